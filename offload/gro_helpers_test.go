package offload

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// groHeadroom is where test frames start in their Buf, like the forwarder's
// headroom.
const groHeadroom = 32

// toFrame puts the built segment f into a Buf with room bytes of capacity
// after it, in the given checksum mode.
func toFrame(s groSeg, f []byte, mode vnethdrtest.CsumMode, room int) Frame {
	buf := make([]byte, groHeadroom+len(f), groHeadroom+len(f)+room)
	copy(buf[groHeadroom:], f)
	fr := Frame{Buf: buf, Start: groHeadroom, End: groHeadroom + len(f)}
	switch mode {
	case vnethdrtest.CsumValid:
		fr.Hdr.Flags = vnethdr.FlagDataValid
	case vnethdrtest.CsumPartial:
		fr.Hdr = vnethdr.Hdr(s.Partial(buf[groHeadroom:]))
	}
	return fr
}

func segFrame(tb testing.TB, s groSeg, mode vnethdrtest.CsumMode, room int) Frame {
	tb.Helper()
	return toFrame(s, s.Build(tb), mode, room)
}

// bigRoom lets any frame grow to a 64 KiB super-frame.
const bigRoom = 65536

// cloneFrames deep-copies frames, Bufs up to their capacity.
func cloneFrames(frames []Frame) []Frame {
	out := make([]Frame, len(frames))
	for i, f := range frames {
		out[i] = f
		b := make([]byte, cap(f.Buf))
		copy(b, f.Buf[:cap(f.Buf)])
		out[i].Buf = b[:len(f.Buf)]
	}
	return out
}

// canonical is what a segment means on the wire: its IP packet with the
// TCP or UDP checksum finished when it was left to offload, and a TCP one
// written 0xffff rather than 0, the other form of the same one's complement
// number, which Segment never emits (gopacket does). A UDP check field of 0
// means "no checksum" and stays.
func canonical(f Frame) []byte {
	b := append([]byte(nil), f.Buf[f.Start:f.End]...)
	h := f.Hdr
	if !h.IsGSO() {
		_ = vnethdr.CompleteChecksum(&h, b)
	}
	b = b[:ipEnd(b)]
	if l, err := vnethdr.Parse(b); err == nil && l.Proto == protoTCP && binary.BigEndian.Uint16(b[l.L4+tcpCsumOff:]) == 0 {
		binary.BigEndian.PutUint16(b[l.L4+tcpCsumOff:], 0xffff)
	}
	return b
}

// unchanged reports whether frame f is byte for byte what orig was, all of
// its Buf included.
func unchanged(f, orig Frame) bool {
	return f.Start == orig.Start && f.End == orig.End && f.Hdr == orig.Hdr &&
		len(f.Buf) == len(orig.Buf) && cap(f.Buf) == cap(orig.Buf) &&
		bytes.Equal(f.Buf[:cap(f.Buf)], orig.Buf[:cap(orig.Buf)])
}

// expand checks a super-frame made by Coalesce and returns the segments
// Segment makes of it; a frame that is not GSO is returned canonical, as
// the only element.
func expand(tb testing.TB, f Frame) [][]byte {
	tb.Helper()
	frame := f.Buf[f.Start:f.End]
	if !f.Hdr.IsGSO() {
		return [][]byte{canonical(f)}
	}
	h := f.Hdr
	switch {
	case h.Flags != vnethdr.FlagNeedsCsum || h.GSOSize == 0:
		tb.Fatalf("super-frame header %+v", h)
	case h.GSOType == vnethdr.GSOTCPv4 || h.GSOType == vnethdr.GSOTCPv6:
		if h.CsumOffset != tcpCsumOff {
			tb.Fatalf("super-frame header %+v", h)
		}
	case h.GSOType == vnethdr.GSOUDPL4:
		if h.CsumOffset != udpCsumOff {
			tb.Fatalf("super-frame header %+v", h)
		}
		// UDP_GRO_CNT_MAX, not the UDP_MAX_SEGMENTS a write may carry.
		if n := (len(frame) - int(h.HdrLen) + int(h.GSOSize) - 1) / int(h.GSOSize); n > 64 {
			tb.Fatalf("USO super-frame of %d segments", n)
		}
	default:
		tb.Fatalf("super-frame header %+v", h)
	}
	// Not padded, not larger than the default gro_max_size (65536) lets the
	// kernel's GRO make, counted from the end of the Ethernet header.
	if l, err := vnethdr.Parse(frame); err != nil || l.End != len(frame) || len(frame)-14 >= 65536 {
		tb.Fatalf("super-frame of %d bytes: %v", len(frame), err)
	}
	// No IPv4 reserved bit: the kernel never merges such packets.
	if l3, et, _ := vnethdr.L3Offset(frame); et == etherTypeIPv4 && frame[l3+6]&0x80 != 0 {
		tb.Fatal("super-frame with the IPv4 reserved bit")
	}
	// Fixup takes it as it is, and so would the kernel.
	fh := h
	fc := append([]byte(nil), frame...)
	if err := vnethdr.Fixup(&fh, fc); err != nil || fh != h || !bytes.Equal(fc, frame) {
		tb.Fatalf("Fixup of the super-frame: %v, %+v -> %+v", err, h, fh)
	}
	if why := kernelRefusal(h, len(frame)); why != "" {
		tb.Fatalf("the kernel would refuse the super-frame %+v: %s", h, why)
	}
	// The partial checksum completes to one that verifies.
	ch := h
	if err := vnethdr.CompleteChecksum(&ch, fc); err != nil {
		tb.Fatal(err)
	}
	verifyRaw(tb, fc)
	mss := int(h.GSOSize)
	n := (len(frame) - int(h.HdrLen) + mss - 1) / mss
	out, sizes := outBufs(n, int(h.HdrLen)+mss)
	k, err := Segment(h, frame, out, sizes)
	if err != nil || k != n {
		tb.Fatalf("Segment of the super-frame: %d, %v (want %d)", k, err, n)
	}
	segs := make([][]byte, k)
	for i := range segs {
		segs[i] = out[i][:sizes[i]]
		verifyRaw(tb, segs[i])
	}
	return segs
}
