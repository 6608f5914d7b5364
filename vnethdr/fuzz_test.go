package vnethdr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
)

// verifyRaw checks a frame Segment emitted without relying on gopacket, which
// refuses some valid inputs a fuzzer makes (odd IPv6 option TLVs): offsets
// come from parse, every sum from refSum.
func verifyRaw(tb testing.TB, frame []byte) {
	tb.Helper()
	l, err := parse(frame)
	if err != nil || l.l4 == 0 || l.end != len(frame) {
		tb.Fatalf("emitted frame does not parse: %+v %v\n%x", l, err, frame)
	}
	var src, dst net.IP
	if l.ipv6 {
		src, dst = frame[l.l3+8:l.l3+24], frame[l.l3+24:l.l3+40]
		if l.rh != 0 && frame[l.rh+3] != 0 {
			return // final destination: TestSegmentRoutingHeader covers it
		}
	} else {
		ihl := int(frame[l.l3]&0x0f) * 4
		if s := refSum(frame[l.l3 : l.l3+ihl]); s != 0xffff {
			tb.Fatalf("IPv4 header checksum does not verify: %#04x", s)
		}
		src, dst = frame[l.l3+12:l.l3+16], frame[l.l3+16:l.l3+20]
	}
	l4 := frame[l.l4:l.end]
	if s := refSum(pseudo(src, dst, l.proto, len(l4)), l4); s != 0xffff {
		tb.Fatalf("L4 checksum does not verify: %#04x\n%x", s, frame)
	}
	if l.proto == protoUDP && (binary.BigEndian.Uint16(l4[6:]) == 0 || int(binary.BigEndian.Uint16(l4[4:])) != len(l4)) {
		tb.Fatalf("UDP checksum 0 or wrong length")
	}
}

// segmentAll runs Segment with as many exactly sized buffers as it needs,
// checks every emitted frame and that the payloads reassemble.
func segmentAll(tb testing.TB, h Hdr, frame []byte, hdrLen int) {
	tb.Helper()
	mss, pay := int(h.GSOSize), len(frame)-hdrLen
	n := max(1, (pay+mss-1)/mss)
	if n > 512 { // keep one run cheap; FuzzSegment covers long splits
		return
	}
	out, sizes := outBufs(n, hdrLen+min(mss, pay))
	orig := append([]byte(nil), frame...)
	got, err := Segment(h, frame, out, sizes)
	if err != nil || got != n {
		tb.Fatalf("Segment after Fixup: %d, %v (want %d)", got, err, n)
	}
	if !bytes.Equal(frame, orig) {
		tb.Fatal("Segment wrote to its input")
	}
	var re []byte
	for i := 0; i < n; i++ {
		f := out[i][:sizes[i]]
		verifyRaw(tb, f)
		re = append(re, f[hdrLen:]...)
	}
	if !bytes.Equal(re, frame[hdrLen:]) {
		tb.Fatal("payloads do not reassemble")
	}
}

// addHdr adds the seed h (encoded) and frame to f.
func addHdr(f *testing.F, h Hdr, frame []byte) {
	var b [Len]byte
	h.Encode(b[:])
	f.Add(b[:], frame)
}

// fuzzHdr fuzzes fn with every header input that decodes and any frame.
func fuzzHdr(f *testing.F, fn func(t *testing.T, h Hdr, frame []byte)) {
	f.Fuzz(func(t *testing.T, hdr, frame []byte) {
		var h Hdr
		if h.Decode(hdr) != nil {
			return
		}
		fn(t, h, frame)
	})
}

func FuzzDecodeFixup(f *testing.F) {
	// Small seeds: Go's minimizer is quadratic in the input length, and with
	// KiB-sized inputs a 20 s run spends its time minimizing, not fuzzing.
	for _, s := range []spec{
		{payload: pattern(300, 1)},
		{v6: true, ext: true, payload: pattern(200, 2)},
		{udp: true, vlan: true, payload: pattern(150, 3)},
		{udp: true, v6: true, qinq: true, vlan: true, payload: pattern(40, 4)},
		{ipOpts: true, tcpOpts: true, payload: pattern(10, 5)},
	} {
		h, fr := superFrame(f, s, 64)
		addHdr(f, h, fr)
		h.GSOType = GSONone
		addHdr(f, h, fr)
		h.Flags = FlagDataValid
		h.GSOType = s.gsoType()
		addHdr(f, h, fr)
	}
	f.Add(make([]byte, Len), make([]byte, 60))
	// NEEDS_CSUM at 14..19 (the kernel's nh_min_len is 20) and TCP GSO
	// below TCP_MIN_MSS, both refused since issue 13.
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	f.Add([]byte{FlagNeedsCsum, 0, 0, 0, 0, 0, 14, 0, 0, 0}, arp)
	f.Add([]byte{FlagNeedsCsum, 0, 0, 0, 0, 0, 19, 0, 6, 0}, arp)
	{
		h, fr := superFrame(f, spec{payload: pattern(2000, 7)}, 87)
		addHdr(f, h, fr)
	}
	fuzzHdr(f, func(t *testing.T, h Hdr, frame []byte) {
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
		// A GSO frame Fixup accepts, Segment splits into valid frames.
		segmentAll(t, h, frame, int(h.HdrLen))
	})
}

// fuzzSpec turns fuzz bytes into a valid frame description.
func fuzzSpec(mode uint8, flags uint8, seq uint32, id uint16, payLen uint16) spec {
	s := spec{
		v6: mode&1 != 0, udp: mode&2 != 0, vlan: mode&4 != 0, qinq: mode&8 != 0,
		tcpOpts: mode&32 != 0, flags: flags, seq: seq, id: id,
	}
	s.ipOpts = !s.v6 && mode&16 != 0
	s.ext = s.v6 && mode&16 != 0
	if s.udp {
		s.tcpOpts = false
	}
	maxPay := 65535 - (s.hdrLen() - s.l3())
	if s.v6 {
		maxPay += 40
	}
	s.payload = pattern(int(payLen)%(maxPay+1), byte(seq))
	return s
}

func FuzzSegment(f *testing.F) {
	f.Add(uint16(1448*10), uint16(1448), uint8(0x19), uint8(0), uint32(1), uint16(1))
	f.Add(uint16(5000), uint16(1428), uint8(0x99), uint8(1|16), uint32(0xffffff00), uint16(0xffff))
	f.Add(uint16(3001), uint16(1000), uint8(0), uint8(2|4), uint32(0), uint16(0))
	f.Add(uint16(10), uint16(1452), uint8(0), uint8(1|2|4|8|16), uint32(0), uint16(0))
	f.Add(uint16(65535), uint16(1), uint8(0xff), uint8(64|32|16|4), uint32(7), uint16(7))
	f.Fuzz(func(t *testing.T, payLen, gso uint16, flags, mode uint8, seq uint32, id uint16) {
		s := fuzzSpec(mode, flags, seq, id, payLen)
		mss := int(gso)
		if mss == 0 || mss == 0xffff {
			mss = 1448
		}
		// Keep a run cheap: at most 512 segments.
		mss = max(mss, (len(s.payload)+511)/512)
		if !s.udp && mss < tcpMinMSS {
			// Refused by both (issue 13); go on with the smallest
			// gso_size they take.
			h, in := superFrame(t, s, mss)
			if _, err := Segment(h, in, nil, nil); !errors.Is(err, ErrGSOSize) {
				t.Fatalf("Segment with gso_size %d: %v", mss, err)
			}
			if err := Fixup(&h, in); !errors.Is(err, ErrGSOSize) {
				t.Fatalf("Fixup with gso_size %d: %v", mss, err)
			}
			mss = tcpMinMSS
		}
		h, in := superFrame(t, s, mss)
		if mode&64 != 0 { // a GRO'd frame: DATA_VALID, stale check field
			h.Flags, h.CsumStart, h.CsumOffset = FlagDataValid, 0, 0
			binary.BigEndian.PutUint16(in[s.l4()+s.csumOff():], uint16(seq))
		}
		n := max(1, (len(s.payload)+mss-1)/mss)
		out, sizes := outBufs(n, s.hdrLen()+min(mss, len(s.payload)))
		got, err := Segment(h, in, out, sizes)
		if err != nil {
			t.Fatalf("Segment: %v", err)
		}
		verifySegments(t, s, h, in, out, sizes, got)

		// The same frame through Fixup (which may rewrite the check field)
		// segments to the same bytes.
		fh, fin := h, append([]byte(nil), in...)
		if err := Fixup(&fh, fin); err != nil {
			if !(s.udp && n > udpMaxSegments && errors.Is(err, ErrGSOSize)) {
				t.Fatalf("Fixup: %v", err)
			}
		} else {
			out2, sizes2 := outBufs(n, s.hdrLen()+min(mss, len(s.payload)))
			if _, err := Segment(fh, fin, out2, sizes2); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				if !bytes.Equal(out[i][:sizes[i]], out2[i][:sizes2[i]]) {
					t.Fatalf("segment %d differs after Fixup", i)
				}
			}
		}
		// One buffer too few, or one byte too short: an error, nothing written.
		if n > 1 {
			if _, err := Segment(h, in, out[:n-1], sizes); !errors.Is(err, ErrTooManySegments) {
				t.Fatalf("n-1 buffers: %v", err)
			}
		}
		short, ssizes := outBufs(n, s.hdrLen()+min(mss, len(s.payload)))
		short[0] = short[0][:len(short[0])-1]
		if _, err := Segment(h, in, short, ssizes); !errors.Is(err, ErrSegmentTooBig) {
			t.Fatalf("short buffer: %v", err)
		}
		for i := range ssizes {
			if ssizes[i] != 0 {
				t.Fatal("a failed Segment set sizes")
			}
		}
	})
}

// FuzzSegmentRaw feeds arbitrary headers and frames to Segment: it must not
// panic, must only write out[i][:sizes[i]], and what it emits must verify.
func FuzzSegmentRaw(f *testing.F) {
	for _, s := range []spec{
		{payload: pattern(300, 1)},
		{v6: true, ext: true, udp: true, payload: pattern(200, 2)},
		{vlan: true, ipOpts: true, tcpOpts: true, payload: pattern(133, 3)},
	} {
		h, fr := superFrame(f, s, 64)
		addHdr(f, h, fr)
	}
	const nbuf, bufLen, guard = 16, 384, 0xee
	fuzzHdr(f, func(t *testing.T, h Hdr, frame []byte) {
		backing := bytes.Repeat([]byte{guard}, nbuf*bufLen)
		out := make([][]byte, nbuf)
		for i := range out {
			out[i] = backing[i*bufLen : (i+1)*bufLen : (i+1)*bufLen]
		}
		sizes := make([]int, nbuf)
		orig := append([]byte(nil), frame...)
		n, err := Segment(h, frame, out, sizes)
		if !bytes.Equal(frame, orig) {
			t.Fatal("Segment wrote to its input")
		}
		if err != nil {
			if n != 0 || bytes.Count(backing, []byte{guard}) != len(backing) {
				t.Fatalf("failed Segment (%v) returned %d or wrote output", err, n)
			}
			return
		}
		if n < 1 || n > nbuf {
			t.Fatalf("n = %d", n)
		}
		hdrLen := -1
		var re []byte
		for i := 0; i < nbuf; i++ {
			if i >= n {
				if bytes.Count(out[i], []byte{guard}) != bufLen {
					t.Fatalf("buffer %d of %d written", i, n)
				}
				continue
			}
			if sizes[i] > bufLen || bytes.Count(out[i][sizes[i]:], []byte{guard}) != bufLen-sizes[i] {
				t.Fatalf("segment %d wrote past sizes[i] = %d", i, sizes[i])
			}
			seg := out[i][:sizes[i]]
			verifyRaw(t, seg)
			l, _ := parse(seg)
			if hdrLen == -1 {
				hdrLen = l.payload
			}
			re = append(re, seg[l.payload:]...)
		}
		if hdrLen < 0 || !bytes.Equal(re, frame[hdrLen:]) {
			t.Fatal("payloads do not reassemble")
		}
	})
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
			want := ^refSum(data[start:end])
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
		s := fuzzSpec(mode, 0x18, 1, 1, 0)
		s.payload = data
		want := build(t, s)
		ph, pf := superFrame(t, s, 0)
		ph.GSOType = GSONone
		if err := CompleteChecksum(&ph, pf); err != nil {
			t.Fatal(err)
		}
		got, exp := binary.BigEndian.Uint16(pf[s.l4()+s.csumOff():]), binary.BigEndian.Uint16(want[s.l4()+s.csumOff():])
		if got != exp && !(got == 0xffff && exp == 0) {
			t.Fatalf("checksum %#04x, gopacket %#04x", got, exp)
		}
	})
}
