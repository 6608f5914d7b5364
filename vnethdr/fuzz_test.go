package vnethdr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

func FuzzDecodeFixup(f *testing.F) {
	for _, s := range vnethdrtest.FuzzSeeds() {
		h, fr := superFrame(f, s, 64)
		vnethdrtest.AddHdr(f, h, fr)
		h.GSOType = GSONone
		vnethdrtest.AddHdr(f, h, fr)
		h.Flags = FlagDataValid
		h.GSOType = s.GSOType()
		vnethdrtest.AddHdr(f, h, fr)
	}
	f.Add(make([]byte, Len), make([]byte, 60))
	// NEEDS_CSUM at 14..19 (the kernel's nh_min_len is 20) and TCP GSO
	// below TCP_MIN_MSS, both refused since issue 13.
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	f.Add([]byte{FlagNeedsCsum, 0, 0, 0, 0, 0, 14, 0, 0, 0}, arp)
	f.Add([]byte{FlagNeedsCsum, 0, 0, 0, 0, 0, 19, 0, 6, 0}, arp)
	{
		h, fr := superFrame(f, spec{Payload: pattern(2000, 7)}, 87)
		vnethdrtest.AddHdr(f, h, fr)
	}
	vnethdrtest.FuzzHdr(f, func(t *testing.T, h Hdr, frame []byte) {
		in, orig := h, append([]byte(nil), frame...)
		err := Fixup(&h, frame)
		if err != nil {
			if !bytes.Equal(frame, orig) && !(in.IsGSO() && in.Flags&FlagNeedsCsum == 0) {
				t.Fatal("Fixup wrote to the frame of a header it could not fix")
			}
			return
		}
		if !bytes.Equal(frame, orig) && (!in.IsGSO() || in.Flags&FlagNeedsCsum != 0) {
			t.Fatal("Fixup wrote to a frame it only had to check")
		}
		if int(h.HdrLen) > len(frame) {
			t.Fatalf("HdrLen %d > frame %d", h.HdrLen, len(frame))
		}
		if h.Flags&^(FlagNeedsCsum|FlagDataValid) != 0 {
			t.Fatalf("unknown flags kept: %#x", h.Flags)
		}
		// The kernel takes what Fixup took (kernelRefusal is written from
		// the kernel's code, not from Fixup's).
		if why := kernelRefusal(h, len(frame)); why != "" {
			t.Fatalf("Fixup took %+v -> %+v, which the kernel refuses: %s", in, h, why)
		}
		// tapfwd's own floor (issue 13): no TCP GSO below TCP_MIN_MSS (88
		// bytes, include/net/tcp.h), so one write is not tens of
		// thousands of frames.
		if h.IsGSO() && h.GSOType&^GSOECN != GSOUDPL4 && h.GSOSize < 88 {
			t.Fatalf("TCP GSO with gso_size %d accepted", h.GSOSize)
		}
		if h.Flags&FlagNeedsCsum != 0 {
			if int(h.CsumStart) < 20 || int(h.CsumStart)+int(h.CsumOffset)+2 > len(frame) {
				t.Fatalf("csum bounds do not hold: %+v, frame %d", h, len(frame))
			}
			if int(h.HdrLen) < int(h.CsumStart)+int(h.CsumOffset)+2 {
				t.Fatalf("HdrLen %d below the checksum field: %+v", h.HdrLen, h)
			}
		} else if h.HdrLen != 0 || h.CsumStart != 0 || h.CsumOffset != 0 {
			t.Fatalf("plain frame kept offsets: %+v", h)
		}
		again := h
		if err := Fixup(&again, frame); err != nil || again != h {
			t.Fatalf("Fixup not idempotent: %v, %+v != %+v", err, again, h)
		}
		if !h.IsGSO() {
			// What Fixup let through as NEEDS_CSUM can be completed.
			if err := CompleteChecksum(&h, frame); err != nil {
				t.Fatalf("CompleteChecksum after Fixup: %v", err)
			}
			return
		}
		if h.Flags&FlagNeedsCsum == 0 || h.GSOSize == 0 {
			t.Fatalf("GSO header without NEEDS_CSUM or size: %+v", h)
		}
		// A GSO frame Fixup accepts can be segmented.
		segmentable(t, h, frame)
	})
}

// segmentable checks that a GSO frame Fixup took (h is the fixed header)
// has what segmenting it needs; the split itself is fuzzed where Segment
// is. CheckGSO takes the header, the payload starts at HdrLen, and the
// pseudo-header's final destination can be read.
func segmentable(t *testing.T, h Hdr, frame []byte) {
	t.Helper()
	l, err := CheckGSO(&h, frame)
	if err != nil || l.Payload != int(h.HdrLen) {
		t.Fatalf("CheckGSO after Fixup: %v, payload at %d, HdrLen %d", err, l.Payload, h.HdrLen)
	}
	if _, ok := l.AddrSum(frame); !ok {
		t.Fatal("Fixup took a GSO frame whose final destination cannot be read")
	}
}

func FuzzCompleteChecksum(f *testing.F) {
	f.Add(pattern(100, 1), uint16(34), uint16(16), uint8(0))
	f.Add(pattern(101, 2), uint16(54), uint16(6), uint8(1|2|4))
	f.Add(pattern(3, 3), uint16(14), uint16(0), uint8(2|8))
	f.Fuzz(func(t *testing.T, data []byte, start, off uint16, mode uint8) {
		// Raw: any bytes, any offsets.
		h := Hdr{Flags: FlagNeedsCsum, CsumStart: start, CsumOffset: off}
		frame := append([]byte(nil), data...)
		err := CompleteChecksum(&h, frame)
		field := int(start) + int(off)
		if err != nil {
			if !errors.Is(err, ErrCsumBounds) || !bytes.Equal(frame, data) || h.Flags != FlagNeedsCsum {
				t.Fatalf("failed CompleteChecksum: %v, or wrote", err)
			}
		} else {
			end := ipEnd(data)
			if field+2 > end || h.Flags != 0 {
				t.Fatalf("accepted field %d past end %d", field, end)
			}
			want := ^vnethdrtest.RefSum(data[start:end])
			if want == 0 {
				want = 0xffff
			}
			if got := binary.BigEndian.Uint16(frame[field:]); got != want {
				t.Fatalf("checksum %#04x, reference %#04x", got, want)
			}
			if !bytes.Equal(frame[:field], data[:field]) || !bytes.Equal(frame[field+2:], data[field+2:]) {
				t.Fatal("wrote outside the checksum field")
			}
		}

		// Structured: a real TCP/UDP frame, against gopacket.
		if len(data) > 9000 {
			data = data[:9000]
		}
		s := vnethdrtest.FuzzedSpec(mode, 0x18, 1, 1, 0)
		s.Payload = data
		want := build(t, s)
		ph, pf := superFrame(t, s, 0)
		ph.GSOType = GSONone
		if err := CompleteChecksum(&ph, pf); err != nil {
			t.Fatal(err)
		}
		got, exp := binary.BigEndian.Uint16(pf[s.L4()+s.CsumOff():]), binary.BigEndian.Uint16(want[s.L4()+s.CsumOff():])
		if got != exp && !(got == 0xffff && exp == 0) {
			t.Fatalf("checksum %#04x, gopacket %#04x", got, exp)
		}
	})
}
