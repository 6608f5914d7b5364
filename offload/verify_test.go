package offload

import (
	"bytes"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// verifySegments checks Segment's output for the super-frame in (built from
// s) against everything the kernel's GSO guarantees.
func verifySegments(t testing.TB, s spec, h vnethdr.Hdr, in []byte, out [][]byte, sizes []int, n int) {
	t.Helper()
	mss := int(h.GSOSize)
	want := (len(s.Payload) + mss - 1) / mss
	if want == 0 {
		want = 1
	}
	if n != want {
		t.Fatalf("%d segments, want %d", n, want)
	}
	var got []byte
	for i := 0; i < n; i++ {
		f := out[i][:sizes[i]]
		d, ok := vnethdrtest.Decode(t, f)
		if !ok {
			t.Fatalf("segment %d of %d (%d bytes)", i, n, len(f))
		}
		if !bytes.Equal(f[:s.L3()], in[:s.L3()]) {
			t.Errorf("segment %d: L2 header changed", i)
		}
		segLen := min(mss, len(s.Payload)-i*mss)
		if len(d.Payload) != segLen {
			t.Errorf("segment %d: payload %d bytes, want %d", i, len(d.Payload), segLen)
		}
		if sizes[i] != s.HdrLen()+segLen {
			t.Errorf("segment %d: size %d, want %d", i, sizes[i], s.HdrLen()+segLen)
		}
		got = append(got, d.Payload...)
		if d.IP4 != nil {
			if int(d.IP4.Length) != len(f)-s.L3() {
				t.Errorf("segment %d: IPv4 length %d, frame has %d", i, d.IP4.Length, len(f)-s.L3())
			}
			if d.IP4.Id != s.ID+uint16(i) {
				t.Errorf("segment %d: IPv4 ID %d, want %d", i, d.IP4.Id, s.ID+uint16(i))
			}
		} else if int(d.IP6.Length) != len(f)-s.L3()-40 {
			t.Errorf("segment %d: IPv6 payload length %d, frame has %d", i, d.IP6.Length, len(f)-s.L3()-40)
		}
		if tc := d.TCP; tc != nil {
			if want := s.Seq + uint32(i*mss); tc.Seq != want {
				t.Errorf("segment %d: seq %d, want %d", i, tc.Seq, want)
			}
			f := s.Flags
			if f == 0 {
				f = 0x18
			}
			first, last := i == 0, i == n-1
			if tc.CWR != (first && f&0x80 != 0) {
				t.Errorf("segment %d: CWR %v", i, tc.CWR)
			}
			if tc.FIN != (last && f&0x01 != 0) || tc.PSH != (last && f&0x08 != 0) {
				t.Errorf("segment %d: FIN %v PSH %v", i, tc.FIN, tc.PSH)
			}
			if tc.ACK != (f&0x10 != 0) || tc.ECE != (f&0x40 != 0) || tc.Ack != 0x01020304 {
				t.Errorf("segment %d: ACK/ECE/ack number changed", i)
			}
		}
	}
	if !bytes.Equal(got, s.Payload) {
		t.Errorf("reassembled payload (%d bytes) differs from the input (%d bytes)", len(got), len(s.Payload))
	}
}
