package vnethdr

import (
	"bytes"
	"errors"
	"testing"
)

func TestDecodeEncode(t *testing.T) {
	tests := []struct {
		name string
		wire []byte
		h    Hdr
	}{
		{"zero", make([]byte, Len), Hdr{}},
		{
			// What the test bed's veth gives a packet socket for a TSO frame.
			"tcp4 gso",
			[]byte{0x01, 0x01, 0x42, 0x00, 0xa8, 0x05, 0x22, 0x00, 0x10, 0x00},
			Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, HdrLen: 66, GSOSize: 1448, CsumStart: 34, CsumOffset: 16},
		},
		{
			"uso ecn bits little-endian",
			[]byte{0x03, 0x85, 0x34, 0x12, 0x78, 0x56, 0xbc, 0x9a, 0xf0, 0xde},
			Hdr{Flags: 3, GSOType: 0x85, HdrLen: 0x1234, GSOSize: 0x5678, CsumStart: 0x9abc, CsumOffset: 0xdef0},
		},
		{
			"max",
			bytes.Repeat([]byte{0xff}, Len),
			Hdr{0xff, 0xff, 0xffff, 0xffff, 0xffff, 0xffff},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Hdr
			// Trailing bytes (the frame) must be ignored.
			if err := h.Decode(append(append([]byte(nil), tt.wire...), 0xaa, 0xbb)); err != nil {
				t.Fatal(err)
			}
			if h != tt.h {
				t.Fatalf("Decode = %+v, want %+v", h, tt.h)
			}
			b := bytes.Repeat([]byte{0x55}, Len+2)
			tt.h.Encode(b)
			if !bytes.Equal(b[:Len], tt.wire) || b[Len] != 0x55 || b[Len+1] != 0x55 {
				t.Fatalf("Encode = %x, want %x and 2 bytes untouched", b, tt.wire)
			}
		})
	}
}

func TestDecodeShort(t *testing.T) {
	for n := 0; n < Len; n++ {
		h := Hdr{Flags: 9}
		if err := h.Decode(make([]byte, n)); !errors.Is(err, ErrShort) {
			t.Fatalf("len %d: %v, want ErrShort", n, err)
		}
		if h.Flags != 9 {
			t.Fatalf("len %d: h changed on error", n)
		}
	}
}

func TestIsGSO(t *testing.T) {
	for _, tt := range []struct {
		typ  uint8
		want bool
	}{
		{GSONone, false}, {GSOECN, false}, {GSOTCPv4, true}, {GSOTCPv4 | GSOECN, true},
		{GSOTCPv6, true}, {GSOUDPL4, true}, {GSOUDP, true}, {0x7f, true},
	} {
		if got := (Hdr{GSOType: tt.typ}).IsGSO(); got != tt.want {
			t.Errorf("IsGSO(%#x) = %v", tt.typ, got)
		}
	}
}

func TestErrorsDistinct(t *testing.T) {
	errs := []error{ErrShort, ErrCsumBounds, ErrGSOType, ErrGSOSize, ErrMalformed, ErrNoHeadroom}
	seen := map[string]bool{}
	for i, a := range errs {
		if seen[a.Error()] {
			t.Errorf("duplicate message %q", a)
		}
		seen[a.Error()] = true
		for j, b := range errs {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v is %v", a, b)
			}
		}
	}
}
