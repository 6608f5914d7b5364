package vnethdr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

func TestSumMatchesReference(t *testing.T) {
	data := pattern(4096+7, 42)
	ones := bytes.Repeat([]byte{0xff}, 4096)
	for _, src := range [][]byte{data, ones, make([]byte, 300)} {
		for off := 0; off < 8; off++ { // odd memory alignment must not matter
			for n := 0; n <= 300 && off+n <= len(src); n++ {
				b := src[off : off+n]
				if got, want := Fold(Sum(b, 0)), vnethdrtest.RefSum(b); got != want && !(got == 0xffff && want == 0 || got == 0 && want == 0xffff) {
					t.Fatalf("off %d len %d: %#04x, want %#04x", off, n, got, want)
				}
			}
		}
		if got, want := Fold(Sum(src, 0)), vnethdrtest.RefSum(src); got != want {
			t.Fatalf("len %d: %#04x, want %#04x", len(src), got, want)
		}
	}
	// Chaining sums over even-length pieces equals one sum.
	acc := Sum(data[:1000], 0)
	acc = Sum(data[1000:2024], acc)
	acc = Sum(data[2024:], acc)
	if Fold(acc) != Fold(Sum(data, 0)) {
		t.Fatal("chained sum differs")
	}
	// An accumulator close to overflow still folds right.
	if got, want := Fold(Sum([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ^uint64(0))), uint16(0xffff); got != want {
		t.Fatalf("overflowing accumulator: %#04x", got)
	}
}

func TestCompleteChecksum(t *testing.T) {
	for _, s := range []spec{
		{Payload: pattern(1448, 1)},
		{Payload: pattern(1, 2)},
		{TCPOpts: true, VLAN: true, Payload: pattern(999, 3)},
		{V6: true, Payload: pattern(1001, 4)},
		{V6: true, Ext: true, Payload: pattern(64, 5)},
		{UDP: true, Payload: pattern(1472, 6)},
		{UDP: true, IPOpts: true, Payload: pattern(3, 7)},
		{UDP: true, V6: true, Payload: pattern(1233, 8)},
		{UDP: true, V6: true, QinQ: true, VLAN: true, Payload: pattern(0, 9)},
	} {
		want := build(t, s)
		h, f := superFrame(t, s, 0)
		h.GSOType = GSONone
		if err := CompleteChecksum(&h, f); err != nil {
			t.Fatal(err)
		}
		if h.Flags&FlagNeedsCsum != 0 {
			t.Error("FlagNeedsCsum still set")
		}
		got, exp := binary.BigEndian.Uint16(f[s.L4()+s.CsumOff():]), binary.BigEndian.Uint16(want[s.L4()+s.CsumOff():])
		if got != exp && !(got == 0xffff && exp == 0) {
			t.Errorf("v6 %v udp %v len %d: checksum %#04x, gopacket %#04x", s.V6, s.UDP, len(s.Payload), got, exp)
		}
		if _, ok := vnethdrtest.Decode(t, f); !ok {
			t.Errorf("v6 %v udp %v: completed frame does not verify", s.V6, s.UDP)
		}
	}
}

// A UDP checksum that sums to 0 must go out as 0xffff (RFC 768).
func TestCompleteChecksumUDPZero(t *testing.T) {
	s := spec{UDP: true, Payload: make([]byte, 2)}
	h, f := superFrame(t, s, 0)
	h.GSOType = GSONone
	// Pick the two payload bytes so that the full sum is 0xffff, i.e. the
	// checksum is 0: sum without them is x, so they must be ^x.
	binary.BigEndian.PutUint16(f[len(f)-2:], 0)
	field := binary.BigEndian.Uint16(f[s.L4()+6:])
	binary.BigEndian.PutUint16(f[s.L4()+6:], 0)
	x := vnethdrtest.RefSum(s.Seg().Pseudo(10), f[s.L4():])
	binary.BigEndian.PutUint16(f[len(f)-2:], ^x)
	binary.BigEndian.PutUint16(f[s.L4()+6:], field)
	if err := CompleteChecksum(&h, f); err != nil {
		t.Fatal(err)
	}
	if c := binary.BigEndian.Uint16(f[s.L4()+6:]); c != 0xffff {
		t.Fatalf("checksum %#04x, want 0xffff", c)
	}
	if _, ok := vnethdrtest.Decode(t, f); !ok {
		t.Fatal("frame does not verify")
	}
}

// Ethernet padding after a short IP packet is not part of the checksum.
func TestCompleteChecksumPadding(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		s := spec{V6: v6, UDP: true, Payload: pattern(3, 1)}
		want := build(t, s)
		h, f := superFrame(t, s, 0)
		h.GSOType = GSONone
		f = append(f, bytes.Repeat([]byte{0xa5}, 7)...) // odd, non-zero padding
		if err := CompleteChecksum(&h, f); err != nil {
			t.Fatal(err)
		}
		if got, exp := binary.BigEndian.Uint16(f[s.L4()+6:]), binary.BigEndian.Uint16(want[s.L4()+6:]); got != exp {
			t.Errorf("v6 %v: checksum %#04x, want %#04x", v6, got, exp)
		}
	}
}

func TestCompleteChecksumNoFlagAndBounds(t *testing.T) {
	s := spec{Payload: pattern(100, 1)}
	_, f := superFrame(t, s, 0)
	orig := append([]byte(nil), f...)
	plain := Hdr{Flags: FlagDataValid, CsumStart: 0xffff, CsumOffset: 0xffff}
	if err := CompleteChecksum(&plain, f); err != nil || !bytes.Equal(f, orig) || plain.Flags != FlagDataValid {
		t.Fatalf("without NEEDS_CSUM: %v, frame or header changed", err)
	}
	for _, bad := range []Hdr{
		{Flags: FlagNeedsCsum, CsumStart: uint16(len(f)), CsumOffset: 0},
		{Flags: FlagNeedsCsum, CsumStart: uint16(len(f) - 1), CsumOffset: 0},
		{Flags: FlagNeedsCsum, CsumStart: 34, CsumOffset: uint16(len(f) - 35)},
		{Flags: FlagNeedsCsum, CsumStart: 0xffff, CsumOffset: 0xffff},
	} {
		if err := CompleteChecksum(&bad, f); !errors.Is(err, ErrCsumBounds) {
			t.Errorf("%+v: %v, want ErrCsumBounds", bad, err)
		}
		if !bytes.Equal(f, orig) || bad.Flags != FlagNeedsCsum {
			t.Errorf("%+v: changed frame or header on error", bad)
		}
	}
	// The last two bytes of the frame are a valid field for a non-IP frame.
	raw := pattern(64, 3)
	raw[12], raw[13] = 0x88, 0xb5
	raw[62], raw[63] = 0, 0 // a zero "pseudo-header" sum
	hh := Hdr{Flags: FlagNeedsCsum, CsumStart: 14, CsumOffset: 48}
	if err := CompleteChecksum(&hh, raw); err != nil || vnethdrtest.RefSum(raw[14:]) != 0xffff {
		t.Fatalf("non-IP frame: %v", err)
	}
}
