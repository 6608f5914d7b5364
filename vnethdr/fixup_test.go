package vnethdr

import (
	"encoding/binary"
	"errors"
	"testing"
)

func TestFixup(t *testing.T) {
	tcp4 := spec{Payload: pattern(4000, 1)}
	tcp6x := spec{V6: true, Ext: true, Payload: pattern(4000, 2)}
	udp4 := spec{UDP: true, Payload: pattern(3000, 3)}
	udp6 := spec{UDP: true, V6: true, Payload: pattern(3000, 4)}
	vlan4 := spec{VLAN: true, IPOpts: true, TCPOpts: true, Payload: pattern(3000, 5)}
	small := spec{UDP: true, Payload: pattern(5, 6)}
	arp := func(t *testing.T) []byte {
		f := make([]byte, 60)
		binary.BigEndian.PutUint16(f[12:], 0x0806)
		return f
	}
	// gso makes the kernel-style super-frame for s; csum makes the same frame
	// as a non-GSO NEEDS_CSUM frame.
	gso := func(s spec) func(*testing.T) (Hdr, []byte) {
		return func(t *testing.T) (Hdr, []byte) { return superFrame(t, s, 1000) }
	}
	csum := func(s spec) func(*testing.T) (Hdr, []byte) {
		return func(t *testing.T) (Hdr, []byte) {
			h, f := superFrame(t, s, 0)
			h.GSOType, h.HdrLen = GSONone, 0
			return h, f
		}
	}
	type tc struct {
		name   string
		frame  func(*testing.T) (Hdr, []byte)
		mutate func(*Hdr, []byte) []byte
		err    error
		want   func(s *Hdr) bool // checked when err is nil
		hdrLen int
	}
	keep := func(*Hdr, []byte) []byte { return nil }
	tests := []tc{
		// Accepted.
		{"plain frame clears fields", csum(tcp4), func(h *Hdr, f []byte) []byte {
			*h = Hdr{Flags: FlagDataValid | 0x70, HdrLen: 999, GSOSize: 5, CsumStart: 60000, CsumOffset: 60000}
			return nil
		}, nil, func(h *Hdr) bool { return *h == Hdr{Flags: FlagDataValid} }, 0},
		{"plain non-IP", func(t *testing.T) (Hdr, []byte) { return Hdr{HdrLen: 5}, arp(t) }, keep, nil, nil, 0},
		{"plain IP garbage not parsed", func(t *testing.T) (Hdr, []byte) {
			f := arp(t)
			binary.BigEndian.PutUint16(f[12:], 0x0800)
			return Hdr{}, f
		}, keep, nil, nil, 0},
		{"csum tcp4", csum(tcp4), keep, nil, nil, 54},
		{"csum tcp6 ext", csum(tcp6x), keep, nil, nil, 14 + 40 + 24 + 20},
		{"csum udp4", csum(udp4), keep, nil, nil, 42},
		{"csum udp6", csum(udp6), keep, nil, nil, 62},
		{"csum vlan options", csum(vlan4), keep, nil, nil, 18 + 28 + 32},
		{"csum garbage hdr_len", csum(tcp4), func(h *Hdr, f []byte) []byte { h.HdrLen = 0xffff; return nil }, nil, nil, 54},
		{"csum padded tiny frame", csum(small), func(h *Hdr, f []byte) []byte {
			return append(f, make([]byte, 60-len(f))...)
		}, nil, nil, 42},
		{"csum start not at L4 (tunnel)", csum(udp4), func(h *Hdr, f []byte) []byte {
			h.CsumStart, h.CsumOffset = 100, 16
			return nil
		}, nil, nil, 118},
		{"csum non-IP", func(t *testing.T) (Hdr, []byte) {
			return Hdr{Flags: FlagNeedsCsum, CsumStart: 20, CsumOffset: 6}, arp(t)
		}, keep, nil, nil, 28},
		{"csum ipv4 fragment", csum(udp4), func(h *Hdr, f []byte) []byte { f[14+6] |= 0x20; return nil }, nil, nil, 34 + 8},
		{"gso tcp4", gso(tcp4), func(h *Hdr, f []byte) []byte { h.HdrLen = 3; return nil }, nil, nil, 54},
		{"gso tcp4 ecn", gso(tcp4), func(h *Hdr, f []byte) []byte { h.GSOType |= GSOECN; return nil }, nil,
			func(h *Hdr) bool { return h.GSOType == GSOTCPv4|GSOECN }, 54},
		{"gso tcp6 ext", gso(tcp6x), keep, nil, nil, 14 + 40 + 24 + 20},
		{"gso udp4", gso(udp4), keep, nil, nil, 42},
		{"gso udp6", gso(udp6), keep, nil, nil, 62},
		{"gso vlan options", gso(vlan4), keep, nil, nil, 18 + 28 + 32},
		{"gso smaller than gso_size", gso(small), keep, nil, nil, 42},
		{"gso udp 128 segments", gso(spec{UDP: true, Payload: pattern(128*8, 1)}), func(h *Hdr, f []byte) []byte {
			h.GSOSize = 8
			return nil
		}, nil, nil, 42},
		{"gso data_valid becomes needs_csum", gso(udp6), func(h *Hdr, f []byte) []byte {
			h.Flags, h.CsumStart, h.CsumOffset = FlagDataValid, 0, 0
			binary.BigEndian.PutUint16(f[54+6:], 0x1234)
			binary.BigEndian.PutUint16(f[54+4:], 0x4321)
			return nil
		}, nil, func(h *Hdr) bool { return h.Flags == FlagNeedsCsum && h.CsumStart == 54 && h.CsumOffset == 6 }, 62},

		// Rejected.
		{"short frame", csum(tcp4), func(h *Hdr, f []byte) []byte { return f[:13] }, ErrMalformed, nil, 0},
		{"ufo", gso(udp4), func(h *Hdr, f []byte) []byte { h.GSOType = GSOUDP; return nil }, ErrGSOType, nil, 0},
		{"unknown gso type", gso(tcp4), func(h *Hdr, f []byte) []byte { h.GSOType = 2; return nil }, ErrGSOType, nil, 0},
		{"ecn without type", gso(tcp4), func(h *Hdr, f []byte) []byte { h.GSOType = GSOECN; return nil }, ErrGSOType, nil, 0},
		{"uso with ecn", gso(udp4), func(h *Hdr, f []byte) []byte { h.GSOType |= GSOECN; return nil }, ErrGSOType, nil, 0},
		{"tcpv4 on ipv6", gso(tcp6x), func(h *Hdr, f []byte) []byte { h.GSOType = GSOTCPv4; return nil }, ErrGSOType, nil, 0},
		{"tcpv6 on ipv4", gso(tcp4), func(h *Hdr, f []byte) []byte { h.GSOType = GSOTCPv6; return nil }, ErrGSOType, nil, 0},
		{"uso on tcp", gso(tcp4), func(h *Hdr, f []byte) []byte { h.GSOType = GSOUDPL4; return nil }, ErrGSOType, nil, 0},
		{"tcpv4 on udp", gso(udp4), func(h *Hdr, f []byte) []byte { h.GSOType = GSOTCPv4; return nil }, ErrGSOType, nil, 0},
		{"gso non-IP", func(t *testing.T) (Hdr, []byte) {
			return Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, GSOSize: 100, CsumStart: 20, CsumOffset: 16}, arp(t)
		}, keep, ErrGSOType, nil, 0},
		{"gso other L4", gso(tcp4), func(h *Hdr, f []byte) []byte { f[14+9] = 1; return nil }, ErrGSOType, nil, 0},
		{"gso_size 0", gso(tcp4), func(h *Hdr, f []byte) []byte { h.GSOSize = 0; return nil }, ErrGSOSize, nil, 0},
		{"gso_size GSO_BY_FRAGS", gso(tcp4), func(h *Hdr, f []byte) []byte { h.GSOSize = 0xffff; return nil }, ErrGSOSize, nil, 0},
		{"uso 129 segments", gso(spec{UDP: true, Payload: pattern(128*8+1, 1)}), func(h *Hdr, f []byte) []byte {
			h.GSOSize = 8
			return nil
		}, ErrGSOSize, nil, 0},
		{"gso ipv4 MF", gso(tcp4), func(h *Hdr, f []byte) []byte { f[14+6] |= 0x20; return nil }, ErrMalformed, nil, 0},
		{"gso ipv4 frag offset", gso(tcp4), func(h *Hdr, f []byte) []byte { f[14+7] = 1; return nil }, ErrMalformed, nil, 0},
		{"gso ipv6 fragment header", gso(tcp6x), func(h *Hdr, f []byte) []byte { f[54+8] = 44; return nil }, ErrMalformed, nil, 0},
		{"gso padded", gso(tcp4), func(h *Hdr, f []byte) []byte { return append(f, 0, 0) }, ErrMalformed, nil, 0},
		{"gso truncated", gso(tcp4), func(h *Hdr, f []byte) []byte { return f[:len(f)-1] }, ErrMalformed, nil, 0},
		{"gso csum_start not L4", gso(tcp4), func(h *Hdr, f []byte) []byte { h.CsumStart += 4; return nil }, ErrMalformed, nil, 0},
		{"gso ipv6 csum_start at ext header", gso(tcp6x), func(h *Hdr, f []byte) []byte { h.CsumStart = 54; return nil }, ErrMalformed, nil, 0},
		{"gso tcp csum_offset", gso(tcp4), func(h *Hdr, f []byte) []byte { h.CsumOffset = 6; return nil }, ErrCsumBounds, nil, 0},
		{"gso udp csum_offset", gso(udp6), func(h *Hdr, f []byte) []byte { h.CsumOffset = 16; return nil }, ErrCsumBounds, nil, 0},
		{"gso csum past end", gso(tcp4), func(h *Hdr, f []byte) []byte { h.CsumStart = 0xfff0; return nil }, ErrCsumBounds, nil, 0},
		{"csum past end", csum(tcp4), func(h *Hdr, f []byte) []byte { h.CsumOffset = uint16(len(f)); return nil }, ErrCsumBounds, nil, 0},
		{"csum field in last byte", csum(tcp4), func(h *Hdr, f []byte) []byte {
			h.CsumStart, h.CsumOffset = uint16(len(f)-1), 0
			return nil
		}, ErrCsumBounds, nil, 0},
		{"csum start in ethernet header", csum(tcp4), func(h *Hdr, f []byte) []byte { h.CsumStart = 13; return nil }, ErrCsumBounds, nil, 0},
		{"csum field in padding", csum(small), func(h *Hdr, f []byte) []byte {
			h.CsumOffset = uint16(len(f) - 34)
			return append(f, make([]byte, 60-len(f))...)
		}, ErrCsumBounds, nil, 0},
		{"csum bad tcp doff", csum(tcp4), func(h *Hdr, f []byte) []byte { f[34+12] = 0x40; return nil }, ErrMalformed, nil, 0},
		{"csum tcp doff past end", csum(small), func(h *Hdr, f []byte) []byte {
			f[14+9] = 6
			return nil
		}, ErrMalformed, nil, 0},
		{"csum ihl 4", csum(tcp4), func(h *Hdr, f []byte) []byte { f[14] = 0x44; return nil }, ErrMalformed, nil, 0},
		{"csum ip version", csum(tcp4), func(h *Hdr, f []byte) []byte { f[14] = 0x65; return nil }, ErrMalformed, nil, 0},
		{"csum ipv4 length past frame", csum(tcp4), func(h *Hdr, f []byte) []byte { f[14+2]++; return nil }, ErrMalformed, nil, 0},
		{"csum ipv6 jumbo", csum(udp6), func(h *Hdr, f []byte) []byte { f[14+4], f[14+5] = 0, 0; return nil }, ErrMalformed, nil, 0},
		{"csum ipv6 ext past end", csum(spec{V6: true, Ext: true, Payload: pattern(10, 1)}), func(h *Hdr, f []byte) []byte { f[54+1] = 0xff; return nil }, ErrMalformed, nil, 0},
		{"truncated vlan tag", func(t *testing.T) (Hdr, []byte) {
			f := make([]byte, 16)
			binary.BigEndian.PutUint16(f[12:], 0x8100)
			return Hdr{Flags: FlagNeedsCsum, CsumStart: 14, CsumOffset: 0}, f
		}, keep, ErrMalformed, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, f := tt.frame(t)
			if nf := tt.mutate(&h, f); nf != nil {
				f = nf
			}
			err := Fixup(&h, f)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Fixup = %v, want %v (hdr %+v)", err, tt.err, h)
			}
			if err != nil {
				return
			}
			if int(h.HdrLen) != tt.hdrLen {
				t.Errorf("HdrLen %d, want %d", h.HdrLen, tt.hdrLen)
			}
			if tt.want != nil && !tt.want(&h) {
				t.Errorf("header %+v", h)
			}
			if h.Flags&FlagNeedsCsum != 0 && int(h.CsumStart)+int(h.CsumOffset)+2 > len(f) {
				t.Errorf("csum bounds do not hold: %+v", h)
			}
			// Fixup of a fixed header changes nothing.
			again := h
			if err := Fixup(&again, f); err != nil || again != h {
				t.Errorf("second Fixup: %v, %+v != %+v", err, again, h)
			}
		})
	}
}

// A GSO frame Fixup turned from DATA_VALID into NEEDS_CSUM must carry the
// pseudo-header sum the kernel would have put there.
func TestFixupPartialize(t *testing.T) {
	for _, s := range []spec{
		{Payload: pattern(3000, 1)},
		{V6: true, Ext: true, Payload: pattern(3001, 2)},
		{UDP: true, VLAN: true, Payload: pattern(3002, 3)},
		{UDP: true, V6: true, Payload: pattern(3003, 4)},
	} {
		want, wantFrame := superFrame(t, s, 1000)
		h, f := superFrame(t, s, 1000)
		h.Flags, h.CsumStart, h.CsumOffset, h.HdrLen = FlagDataValid, 0, 0, 0
		binary.BigEndian.PutUint16(f[s.L4()+s.CsumOff():], 0xbeef)
		if err := Fixup(&h, f); err != nil {
			t.Fatal(err)
		}
		want.Flags = FlagNeedsCsum
		if h != want {
			t.Errorf("v6 %v udp %v: header %+v, want %+v", s.V6, s.UDP, h, want)
		}
		if string(f) != string(wantFrame) {
			t.Errorf("v6 %v udp %v: frame differs from the kernel-style super-frame", s.V6, s.UDP)
		}
	}
}

// splice6 inserts IPv6 extension headers (each 8 bytes, chained, the last
// pointing at the L4 protocol) after the IPv6 header of an untagged frame.
func splice6(f []byte, first byte, hdrs ...[]byte) []byte {
	proto := f[14+6]
	out := append([]byte(nil), f[:54]...)
	for i, h := range hdrs {
		h = append([]byte(nil), h...)
		if i == len(hdrs)-1 {
			h[0] = proto
		}
		out = append(out, h...)
	}
	out = append(out, f[54:]...)
	out[14+6] = first
	binary.BigEndian.PutUint16(out[14+4:], uint16(len(out)-54))
	return out
}

func TestFixupIPv6ExtensionLimits(t *testing.T) {
	s := spec{V6: true, Payload: pattern(100, 1)}
	dopt := []byte{60, 0, 1, 4, 0, 0, 0, 0}
	for _, tt := range []struct {
		name string
		n    int
		err  error
	}{{"8 headers", 8, nil}, {"9 headers", 9, ErrMalformed}} {
		var hdrs [][]byte
		for i := 0; i < tt.n; i++ {
			hdrs = append(hdrs, dopt)
		}
		f := splice6(build(t, s), 60, hdrs...)
		l4 := 54 + 8*tt.n
		h := Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv6, GSOSize: TCPMinMSS, CsumStart: uint16(l4), CsumOffset: 16}
		if err := Fixup(&h, f); !errors.Is(err, tt.err) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.err)
		} else if err == nil && int(h.HdrLen) != l4+20 {
			t.Errorf("%s: HdrLen %d", tt.name, h.HdrLen)
		}
	}
	// A GRO'd frame whose pseudo-header destination cannot be known (RPL
	// routing header with segments left) cannot be made partial.
	f := splice6(build(t, s), 43, []byte{0, 0, 3, 1, 0, 0, 0, 0})
	h := Hdr{Flags: FlagDataValid, GSOType: GSOTCPv6, GSOSize: TCPMinMSS}
	if err := Fixup(&h, f); !errors.Is(err, ErrMalformed) {
		t.Errorf("RPL routing header: %v, want ErrMalformed", err)
	}
	// A UDP header cut by the IP length.
	u := build(t, spec{UDP: true, Payload: nil})
	binary.BigEndian.PutUint16(u[14+2:], 20+7)
	u = u[:14+27]
	h = Hdr{Flags: FlagNeedsCsum, CsumStart: 34, CsumOffset: 6}
	if err := Fixup(&h, append(u, 0, 0, 0)); !errors.Is(err, ErrMalformed) {
		t.Errorf("short UDP header: %v, want ErrMalformed", err)
	}
}

// Issue 13, item 3: what include/linux/virtio_net.h: virtio_net_hdr_to_skb
// and net/core/skbuff.c: skb_partial_csum_set refuse, Fixup refuses, so
// such a frame counts as a bad header, not as a refusal at the write.
func TestFixupKernelRules(t *testing.T) {
	arp := make([]byte, 60)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	big := make([]byte, 65500) // a non-IP jumbo frame, as a TAP may take
	binary.BigEndian.PutUint16(big[12:], 0x88b5)
	udp4 := build(t, spec{UDP: true, Payload: pattern(100, 1)})
	for _, tt := range []struct {
		name  string
		frame []byte
		h     Hdr
		err   error
	}{
		{"csum_start 14 (nh_min_len)", arp, Hdr{Flags: FlagNeedsCsum, CsumStart: 14, CsumOffset: 0}, ErrCsumBounds},
		{"csum_start 19 (nh_min_len)", arp, Hdr{Flags: FlagNeedsCsum, CsumStart: 19, CsumOffset: 6}, ErrCsumBounds},
		{"csum_start 20", arp, Hdr{Flags: FlagNeedsCsum, CsumStart: 20, CsumOffset: 6}, nil},
		{"ipv4 csum_start inside the IP header", udp4, Hdr{Flags: FlagNeedsCsum, CsumStart: 18, CsumOffset: 8}, ErrCsumBounds},
		{"ipv4 csum_start 20, inside the IP header", udp4, Hdr{Flags: FlagNeedsCsum, CsumStart: 20, CsumOffset: 6}, nil},
		// skb_partial_csum_set: headroom + csum_start >= U16_MAX.
		{"csum_start past the 16-bit skb->csum_start", big, Hdr{Flags: FlagNeedsCsum, CsumStart: 65480, CsumOffset: 0}, ErrCsumBounds},
		{"csum_start at csumStartMax", big, Hdr{Flags: FlagNeedsCsum, CsumStart: csumStartMax, CsumOffset: 0}, nil},
		{"csum_start past csumStartMax", big, Hdr{Flags: FlagNeedsCsum, CsumStart: csumStartMax + 1, CsumOffset: 0}, ErrCsumBounds},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h
			err := Fixup(&h, append([]byte(nil), tt.frame...))
			if !errors.Is(err, tt.err) {
				t.Fatalf("Fixup(%+v) = %v, want %v", tt.h, err, tt.err)
			}
			if why := kernelRefusal(h, len(tt.frame)); err == nil && why != "" {
				t.Fatalf("Fixup took %+v -> %+v, which the kernel refuses: %s", tt.h, h, why)
			}
		})
	}
}

// Every NEEDS_CSUM placement Fixup takes, on frames of every kind, is one
// the kernel takes (kernelRefusal, written from the kernel's code).
func TestFixupNeverKernelRefused(t *testing.T) {
	arp := make([]byte, 60)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	big := make([]byte, 65535)
	binary.BigEndian.PutUint16(big[12:], 0x88b5)
	frames := [][]byte{arp, big,
		build(t, spec{UDP: true, Payload: pattern(40, 1)}),
		build(t, spec{V6: true, Ext: true, Payload: pattern(40, 2)}),
		build(t, spec{VLAN: true, IPOpts: true, TCPOpts: true, Payload: pattern(40, 3)}),
	}
	accepted := 0
	for _, f := range frames {
		starts := []int{}
		for s := 0; s < 120; s++ {
			starts = append(starts, s)
		}
		for s := 0xffff - 1200; s <= 0xffff; s += 7 {
			starts = append(starts, s)
		}
		for _, start := range starts {
			for _, off := range []int{0, 1, 6, 16, 17, 30, 100, 0xffff} {
				for _, flags := range []uint8{FlagNeedsCsum, FlagNeedsCsum | FlagDataValid} {
					h := Hdr{Flags: flags, CsumStart: uint16(start), CsumOffset: uint16(off)}
					in := h
					if Fixup(&h, append([]byte(nil), f...)) != nil {
						continue
					}
					accepted++
					if why := kernelRefusal(h, len(f)); why != "" {
						t.Fatalf("%d-byte frame: Fixup took %+v -> %+v, which the kernel refuses: %s", len(f), in, h, why)
					}
				}
			}
		}
	}
	if accepted == 0 {
		t.Fatal("Fixup took nothing")
	}
}

// Issue 13, item 5: one write must not become tens of thousands of frames.
// A TCP GSO frame with a gso_size below TCP_MIN_MSS is refused; USO is
// bounded by UDP_MAX_SEGMENTS instead.
func TestFixupTCPGSOSizeFloor(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    spec
		gso  int
		err  error
	}{
		{"tcp4 gso_size 1, 65000 bytes", spec{Payload: pattern(65000, 1)}, 1, ErrGSOSize},
		{"tcp6 gso_size 1, 65000 bytes", spec{V6: true, Payload: pattern(65000, 2)}, 1, ErrGSOSize},
		{"tcp4 gso_size 87", spec{Payload: pattern(8700, 3)}, TCPMinMSS - 1, ErrGSOSize},
		{"tcp4 gso_size 87, one segment", spec{Payload: pattern(50, 3)}, TCPMinMSS - 1, ErrGSOSize},
		{"tcp4 gso_size 88", spec{Payload: pattern(65000, 4)}, TCPMinMSS, nil},
		{"tcp6 vlan gso_size 88", spec{V6: true, VLAN: true, Payload: pattern(8800, 5)}, TCPMinMSS, nil},
		{"uso gso_size 1, 128 datagrams", spec{UDP: true, Payload: pattern(128, 6)}, 1, nil},
		{"uso gso_size 1, 129 datagrams", spec{UDP: true, Payload: pattern(129, 7)}, 1, ErrGSOSize},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, valid := range []bool{false, true} {
				h, f := superFrame(t, tt.s, tt.gso)
				if valid { // a GRO'd frame from a packet socket
					h.Flags, h.CsumStart, h.CsumOffset = FlagDataValid, 0, 0
				}
				if err := Fixup(&h, f); !errors.Is(err, tt.err) {
					t.Fatalf("Fixup (data valid %v) = %v, want %v", valid, err, tt.err)
				}
			}
			if tt.s.UDP {
				return
			}
			// CheckGSO, which segmenting goes by, decides the same for
			// TCP frames.
			h, f := superFrame(t, tt.s, tt.gso)
			if _, err := CheckGSO(&h, f); !errors.Is(err, tt.err) {
				t.Fatalf("CheckGSO = %v, want %v", err, tt.err)
			}
		})
	}
}
