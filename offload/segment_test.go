package offload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

func TestSegment(t *testing.T) {
	tests := []struct {
		name string
		s    spec
		gso  int
	}{
		{"tcp4 multiple of mss", spec{Payload: pattern(1448*10, 1), Flags: 0x19, ID: 100, Seq: 1000}, 1448},
		{"tcp4 remainder", spec{Payload: pattern(5000, 2), ID: 7, Seq: 5}, 1448},
		{"tcp4 smaller than mss", spec{Payload: pattern(100, 3)}, 1448},
		{"tcp4 exactly mss", spec{Payload: pattern(1448, 3)}, 1448},
		{"tcp4 no payload", spec{Payload: nil, Flags: 0x11}, 1448},
		{"tcp4 64k", spec{Payload: pattern(65535-40, 4), Seq: 0xfffff000, ID: 0xfffe}, 1448},
		{"tcp4 odd mss", spec{Payload: pattern(10001, 5)}, 1001},
		{"tcp4 cwr ece fin psh", spec{Payload: pattern(4000, 6), Flags: 0xd9}, 1000},
		{"tcp4 ip options", spec{IPOpts: true, Payload: pattern(3000, 7), ID: 9}, 1400},
		{"tcp4 tcp options", spec{TCPOpts: true, Payload: pattern(2896*3+17, 8)}, 1448},
		{"tcp4 vlan", spec{VLAN: true, Payload: pattern(4000, 9)}, 1448},
		{"tcp4 qinq", spec{QinQ: true, VLAN: true, Payload: pattern(4000, 10)}, 1448},
		{"tcp6", spec{V6: true, Payload: pattern(1428*7+3, 11), Seq: 77}, 1428},
		{"tcp6 ext headers", spec{V6: true, Ext: true, Payload: pattern(5000, 12), Flags: 0x99}, 1400},
		{"tcp6 vlan tcp options", spec{V6: true, VLAN: true, TCPOpts: true, Payload: pattern(9000, 13)}, 1416},
		{"tcp6 smaller than mss", spec{V6: true, Payload: pattern(33, 14)}, 1428},
		{"udp4", spec{UDP: true, Payload: pattern(1472*4, 15), ID: 0xffff}, 1472},
		{"udp4 remainder", spec{UDP: true, Payload: pattern(3001, 16)}, 1000},
		{"udp4 vlan ip options", spec{UDP: true, VLAN: true, IPOpts: true, Payload: pattern(2500, 17)}, 1200},
		{"udp6", spec{UDP: true, V6: true, Payload: pattern(1452*3+1, 18)}, 1452},
		{"udp6 ext headers", spec{UDP: true, V6: true, Ext: true, Payload: pattern(4000, 19)}, 1300},
		{"udp6 single", spec{UDP: true, V6: true, Payload: pattern(10, 20)}, 1452},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, in := superFrame(t, tt.s, tt.gso)
			if err := vnethdr.Fixup(&h, in); err != nil {
				t.Fatalf("Fixup: %v", err)
			}
			if int(h.HdrLen) != tt.s.HdrLen() {
				t.Fatalf("HdrLen %d, want %d", h.HdrLen, tt.s.HdrLen())
			}
			orig := append([]byte(nil), in...)
			out, sizes := outBufs(64, tt.s.HdrLen()+tt.gso)
			n, err := Segment(h, in, out, sizes)
			if err != nil {
				t.Fatalf("Segment: %v", err)
			}
			if !bytes.Equal(in, orig) {
				t.Fatal("Segment wrote to its input")
			}
			verifySegments(t, tt.s, h, in, out, sizes, n)
		})
	}
}

// A GRO'd frame from a real NIC reaches a packet socket as GSO with
// DATA_VALID and a stale check field; Segment must not depend on the field.
func TestSegmentWithoutPartialChecksum(t *testing.T) {
	for _, s := range []spec{
		{Payload: pattern(4000, 1)},
		{V6: true, Payload: pattern(4000, 2)},
		{UDP: true, Payload: pattern(4000, 3)},
		{UDP: true, V6: true, Ext: true, Payload: pattern(4000, 4)},
	} {
		h, in := superFrame(t, s, 1000)
		binary.BigEndian.PutUint16(in[s.L4()+s.CsumOff():], 0xbeef)
		h.Flags, h.CsumStart, h.CsumOffset = vnethdr.FlagDataValid, 0, 0
		out, sizes := outBufs(8, 1600)
		n, err := Segment(h, in, out, sizes)
		if err != nil {
			t.Fatalf("v6 %v udp %v: %v", s.V6, s.UDP, err)
		}
		verifySegments(t, s, h, in, out, sizes, n)
	}
}

func TestSegmentErrors(t *testing.T) {
	s := spec{Payload: pattern(4000, 1)}
	h, in := superFrame(t, s, 1000) // 4 segments of 1054 bytes
	out, sizes := outBufs(4, 1054)

	plain := h
	plain.GSOType = vnethdr.GSONone
	if _, err := Segment(plain, in, out, sizes); !errors.Is(err, vnethdr.ErrGSOType) {
		t.Errorf("non-GSO: %v, want ErrGSOType", err)
	}
	if _, err := Segment(h, in, out[:3], sizes); !errors.Is(err, ErrTooManySegments) {
		t.Errorf("3 buffers: %v, want ErrTooManySegments", err)
	}
	if _, err := Segment(h, in, out, sizes[:3]); !errors.Is(err, ErrTooManySegments) {
		t.Errorf("3 sizes: %v, want ErrTooManySegments", err)
	}
	short := append([][]byte(nil), out...)
	short[3] = short[3][:1053] // the last segment is full size too
	if _, err := Segment(h, in, short, sizes); !errors.Is(err, ErrSegmentTooBig) {
		t.Errorf("short buffer: %v, want ErrSegmentTooBig", err)
	}
	for i := range sizes {
		if sizes[i] != 0 || out[i][0] != 0 {
			t.Fatal("a failed Segment wrote output")
		}
	}
	if _, err := Segment(h, in[:len(in)-1], out, sizes); !errors.Is(err, vnethdr.ErrMalformed) {
		t.Errorf("truncated: %v, want ErrMalformed", err)
	}
	frag := append([]byte(nil), in...)
	frag[14+6] |= 0x20 // MF
	if _, err := Segment(h, frag, out, sizes); !errors.Is(err, vnethdr.ErrMalformed) {
		t.Errorf("fragment: %v, want ErrMalformed", err)
	}
	zero := h
	zero.GSOSize = 0
	if _, err := Segment(zero, in, out, sizes); !errors.Is(err, vnethdr.ErrGSOSize) {
		t.Errorf("gso_size 0: %v, want ErrGSOSize", err)
	}
	if n, err := Segment(h, in, out, sizes); err != nil || n != 4 {
		t.Errorf("exact buffers: %d, %v", n, err)
	}
}

// IPv6 with a routing header that still has segments left: the pseudo-header
// carries the final destination (RFC 8200 section 8.1), which gopacket does
// not know about, so the expected checksum is summed here by hand.
func TestSegmentRoutingHeader(t *testing.T) {
	final := []byte{0x20, 0x01, 0x0d, 0xb8, 0xfe, 0xed, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}
	for _, rh := range []struct {
		name string
		hdr  []byte
		ok   bool
	}{
		{"type 2", append([]byte{6, 2, 2, 1, 0, 0, 0, 0}, final...), true},
		{"srh", append(append([]byte{6, 4, 4, 1, 1, 1, 0, 0}, final...), make([]byte, 16)...), true},
		{"type 0", append(append([]byte{6, 4, 0, 2, 0, 0, 0, 0}, make([]byte, 16)...), final...), true},
		{"rpl", append([]byte{6, 2, 3, 1, 0, 0, 0, 0}, final...), false},
		{"type 2 done", append([]byte{6, 2, 2, 0, 0, 0, 0, 0}, final...), true},
	} {
		t.Run(rh.name, func(t *testing.T) {
			s := spec{V6: true, Payload: pattern(3000, 1)}
			f := build(t, s)
			src6, dst6 := s.Seg().Addrs()
			// Splice the routing header in after the IPv6 header.
			in := append(append(append([]byte(nil), f[:54]...), rh.hdr...), f[54:]...)
			in[14+6] = 43
			binary.BigEndian.PutUint16(in[14+4:], uint16(len(in)-54))
			h := vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, GSOType: vnethdr.GSOTCPv6, GSOSize: 1000, CsumStart: uint16(54 + len(rh.hdr)), CsumOffset: 16}
			out, sizes := outBufs(4, 2000)
			n, err := Segment(h, in, out, sizes)
			if !rh.ok {
				if !errors.Is(err, vnethdr.ErrMalformed) {
					t.Fatalf("got %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil || n != 3 {
				t.Fatalf("Segment: %d, %v", n, err)
			}
			dst := final
			if rh.hdr[3] == 0 {
				dst = dst6
			}
			for i := 0; i < n; i++ {
				l4 := out[i][54+len(rh.hdr) : sizes[i]]
				if s := vnethdrtest.RefSum(vnethdrtest.Pseudo(src6, dst, 6, len(l4)), l4); s != 0xffff {
					t.Errorf("segment %d: checksum does not verify against the final destination", i)
				}
			}
		})
	}
}
