package offload

import (
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// Segment is on the hot path and must not allocate, also when it fails.
func TestSegmentZeroAllocs(t *testing.T) {
	h, frame := superFrame(t, spec{VLAN: true, Payload: pattern(65000, 1)}, 1448)
	out, sizes := outBufs(64, 1600)
	for name, f := range map[string]func(){
		"Segment": func() {
			if _, err := Segment(h, frame, out, sizes); err != nil {
				t.Fatal(err)
			}
		},
		"SegmentError": func() {
			if _, err := Segment(h, frame, out[:1], sizes); err == nil {
				t.Fatal("no error")
			}
		},
		"SegmentRefused": func() {
			hh := h
			hh.GSOType = vnethdr.GSOUDP
			if _, err := Segment(hh, frame, out, sizes); err == nil {
				t.Fatal("no error")
			}
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per run", name, n)
		}
	}
}
