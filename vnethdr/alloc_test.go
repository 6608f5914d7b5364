package vnethdr

import "testing"

// The hot path must not allocate; prove it for every entry point.
func TestZeroAllocs(t *testing.T) {
	s := spec{VLAN: true, Payload: pattern(65000, 1)}
	h, frame := superFrame(t, s, 1448)
	csumH, csumFrame := superFrame(t, spec{V6: true, UDP: true, Payload: pattern(1400, 2)}, 0)
	csumH.GSOType = GSONone
	buf := make([]byte, 2000)
	for name, f := range map[string]func(){
		"CheckGSO": func() {
			if _, err := CheckGSO(&h, frame); err != nil {
				t.Fatal(err)
			}
		},
		"Fixup": func() {
			hh := h
			if err := Fixup(&hh, frame); err != nil {
				t.Fatal(err)
			}
		},
		"FixupError": func() {
			hh := h
			hh.GSOType = GSOUDP
			if err := Fixup(&hh, frame); err == nil {
				t.Fatal("no error")
			}
		},
		"CompleteChecksum": func() {
			hh := csumH
			if err := CompleteChecksum(&hh, csumFrame); err != nil {
				t.Fatal(err)
			}
		},
		"InsertVLAN": func() {
			hh := csumH
			if _, err := InsertVLAN(buf, 4, 1500, 0, 100, &hh); err != nil {
				t.Fatal(err)
			}
		},
		"DecodeEncode": func() {
			var hh Hdr
			hh.Encode(buf)
			if err := hh.Decode(buf); err != nil {
				t.Fatal(err)
			}
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per run", name, n)
		}
	}
}
