package offload

import (
	"bytes"
	"encoding/binary"
	"maps"
	"slices"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// fuzzBytes hands out fuzz input a byte at a time, zeros once it is spent.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

// fuzzFlow is a flow the GRO fuzz targets generate frames of: its
// segments are base with the flow's next sequence number and IP ID, of
// size payload bytes (a TCP flow's MSS, a UDP flow's datagram size).
type fuzzFlow struct {
	base groSeg
	size int
	seq  uint32
	id   uint16
}

// next is the flow's next segment, before an action changes it.
func (fl *fuzzFlow) next() groSeg {
	s := fl.base
	s.Seq, s.ID = fl.seq, fl.id
	return s
}

// Actions of FuzzCoalesce, one per generated frame; a segment is the
// flow's next one unless the action says otherwise.
const (
	actClean      = iota // 0..29: in order, full size
	actShort      = 30   // 30..33: short payload
	actPSH        = 34   // 34..35
	actPureACK    = 36
	actGap        = 37 // the sender skips ahead
	actRetransmit = 38
	actTOS        = 39 // this segment only
	actTTL        = 40
	actACK        = 41 // from here on
	actWindow     = 42
	actTSval      = 43
	actFlags      = 44
	actBadCsum    = 45 // corrupt, no flag: must not merge
	actIDSkip     = 46
	actIDRepeat   = 47
	actUDP        = 48 // a UDP datagram of one of four flows (v4/v6, VLAN or not)
	actGSO        = 49 // a GSO frame of the flow
	actOptions    = 50 // IPv4 options / IPv6 extension headers
	actBadIPCsum  = 51 // IPv4 header corrupt, FlagDataValid: must not merge
	actDF         = 52 // DF flipped / flow label changed
	actCsumStart  = 53 // FlagNeedsCsum pointing elsewhere
	actNoRoom     = 54
	actEvil       = 55 // IPv4 reserved bit: must not merge
	actPadded     = 56 // Ethernet padding after the IP packet: must not merge
)

// FuzzCoalesce builds a batch from four TCP flows (two with the same 5-tuple
// on different VLANs), mostly in-order MTU segments with perturbations the
// fuzzer picks, and UDP datagrams of four more flows between them (all with
// IPv4 ID 0, so only the IPv6 ones merge; FuzzCoalesceUDP covers UDP), and
// checks what Coalesce makes of it (fuzzBatch.check), with a size bound
// (SetMaxSize) the fuzzer picks. Segment sizes include 87 and 88 bytes, on
// either side of TCP_MIN_MSS.
func FuzzCoalesce(f *testing.F) {
	clean := []byte{0x11, 0, 0, 0, 0, 0}
	for i := 0; i < 24; i++ {
		clean = append(clean, byte(i&3), byte(7*3), 0) // 4 flows interleaved, big room, full checksums
	}
	f.Add(clean)
	for _, sizes := range []byte{0x13, 0x2c} { // SetMaxSize(9000, 30000), (3000, 1601)
		c := append([]byte(nil), clean...)
		c[5] = sizes
		f.Add(c)
	}
	mixed := []byte{0x43, 0x21, 0x80, 0xf0, 7, 0}
	for i, a := range []byte{0, 0, 30, 0, 0, 34, 0, 36, 0, 37, 0, 38, 0, 45, 0, 0, 46, 0, 47, 0, 48, 49, 0, 50, 0, 51, 52, 53, 0, 54, 0, 41, 0, 42, 0, 43, 0, 44, 39, 0, 40, 0, 55, 0, 56, 0} {
		mixed = append(mixed, a<<2|byte(i%2), byte(i), byte(i*37))
	}
	f.Add(mixed)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 1, 4, 1, 1, 5, 1, 1, 6, 1, 1, 7, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzBytes(data)
		flows := [4]fuzzFlow{
			{base: groSeg{TS: true}},
			{base: groSeg{V6: true, FlowLabel: 5}},
			{base: groSeg{VLAN: true}}, // flow 0's 5-tuple on a VLAN
			{base: groSeg{V6: true, QinQ: true, VLAN: true, TS: true, SrcPort: 40001}},
		}
		cfg := in.next()
		for k := range flows {
			flows[k].size = [...]int{1448, vnethdr.TCPMinMSS - 1, 100, vnethdr.TCPMinMSS, 536, 1448, 1000, 1428}[(int(cfg)>>(2*k)+k)&7]
			flows[k].seq = uint32(in.next()) << 24
			flows[k].id = 0xfff0 + uint16(k)
		}
		maxBatch := 32
		tbl := in.next()
		if tbl&0x80 != 0 {
			maxBatch = 2 // the table fills up
		}
		var batch fuzzBatch // flows 0..3 TCP, 4..7 UDP
		batch.sizes(tbl)
		for n := 0; n < 48 && len(in) > 0; n++ {
			op, arg, arg2 := in.next(), in.next(), in.next()
			k, act := int(op&3), int(op>>2)
			fl := &flows[k]
			s := fl.next()
			size := fl.size
			mode := vnethdrtest.CsumMode(arg % 3)
			room := [...]int{0, fl.size / 2, fl.size, 2 * fl.size, 4 * fl.size, 16 * fl.size, 45 * fl.size, bigRoom}[(arg/3)&7]
			isBad := false
			switch {
			case act >= actShort && act < actPSH:
				size = 1 + int(arg2)%fl.size
			case act >= actPSH && act < actPureACK:
				s.Flags = tcpACK | tcpPSH
			case act == actPureACK:
				size = 0
			case act == actGap:
				s.Seq += 1 + uint32(arg2)
			case act == actRetransmit:
				s.Seq -= uint32(fl.size)
			case act == actTOS:
				s.TOS = arg2 | 1
			case act == actTTL:
				s.TTL = arg2 | 1
			case act == actACK:
				fl.base.Ack++
				s.Ack++
			case act == actWindow:
				fl.base.Win = 1000 + uint16(arg2)
				s.Win = fl.base.Win
			case act == actTSval:
				fl.base.TSVal++
				s.TSVal++
			case act == actFlags:
				s.Flags = tcpACK | [...]byte{tcpFIN, 0x02, 0x04, 0x20, 0x40, tcpCWR, 0}[arg2%7]
				if arg2%7 == 6 {
					s.Flags = tcpPSH
				}
			case act == actBadCsum:
				mode, isBad = vnethdrtest.CsumFull, true
			case act == actIDSkip:
				s.ID++
			case act == actIDRepeat:
				s.ID--
			case act == actOptions:
				s.IPOpts, s.Ext = !s.V6, s.V6
			case act == actBadIPCsum:
				mode, isBad = vnethdrtest.CsumValid, !s.V6
			case act == actDF:
				s.NoDF = true
				s.FlowLabel++
			case act == actCsumStart:
				mode = vnethdrtest.CsumPartial
			case act == actNoRoom:
				room = 0
			case act == actGSO:
				size = 2 * fl.size
				mode = vnethdrtest.CsumPartial
			case act == actEvil:
				s.Evil, isBad = true, !s.V6
			case act == actPadded:
				room, isBad = max(room, 8), true
			}
			if act == actUDP {
				u := spec{UDP: true, V6: arg2&1 != 0, VLAN: arg2&2 != 0, Payload: pattern(int(arg2), arg)}
				batch.add(segFrame(t, u.Seg(), vnethdrtest.CsumPartial, room), 4+int(arg2&3), false)
				continue
			}
			s.Payload = pattern(size, byte(n))
			fr := segFrame(t, s, mode, room)
			switch act {
			case actBadCsum:
				fr.Buf[fr.End-1-int(arg2)%max(size, 1)] ^= 1 << (arg2 % 8)
			case actBadIPCsum:
				if !s.V6 {
					fr.Buf[fr.Start+s.L3()+10] ^= 0x40
				}
			case actCsumStart:
				fr.Hdr.CsumStart = uint16(s.L3() + int(arg2)%20)
			case actGSO:
				fr.Hdr.GSOType, fr.Hdr.GSOSize = s.GSOType(), uint16(fl.size)
			case actPadded:
				pad(&fr, 1+int(arg2)%8)
			}
			batch.add(fr, k, isBad)
			// The sender moves on as a real one would.
			if act != actRetransmit {
				fl.seq = s.Seq + uint32(size)
			}
			fl.id = s.ID + 1
			if act == actGSO {
				fl.id++
			}
		}
		batch.check(t, maxBatch, func(k int) bool { return k >= 4 })
	})
}

// fuzzBatch is a batch a GRO fuzz target made: each frame with its flow (-1
// for none) and whether it is bad, which must not merge, and the sizes to
// give SetMaxSize (setMax).
type fuzzBatch struct {
	frames       []Frame
	flowOf       []int
	bad          []bool
	setMax       bool
	maxV4, maxV6 int
}

// fuzzMaxSizes are the gro_ipv4_max_size and gro_max_size values the GRO
// fuzz targets pick from; -1 is "do not call SetMaxSize".
var fuzzMaxSizes = [8]int{-1, 65536, 30000, 9000, 3000, 1601, 185000, 0}

// sizes picks the SetMaxSize arguments from bits 0-5 of b.
func (b *fuzzBatch) sizes(c byte) {
	b.maxV4, b.maxV6 = fuzzMaxSizes[c&7], fuzzMaxSizes[c>>3&7]
	b.setMax = b.maxV4 != -1 || b.maxV6 != -1
}

// newGRO is the flow table of maxBatch flows the batch is coalesced with.
func (b *fuzzBatch) newGRO(maxBatch int) *GRO {
	g := NewGRO(maxBatch)
	if b.setMax {
		g.SetMaxSize(b.maxV4, b.maxV6)
	}
	return g
}

// maxLen is the length from the end of the Ethernet header that a
// super-frame must stay below, from the kernel's rule
// (net/core/gro.c: skb_gro_receive, netif_get_gro_max_size) and the bound
// of a non-BIG-TCP frame (GRO_LEGACY_MAX_SIZE, 65536), computed here
// without gro.go: the smaller size for a tagged frame.
func (b *fuzzBatch) maxLen(frame []byte) int {
	bound := func(v int) int {
		if !b.setMax || v == -1 {
			return 65536
		}
		return min(max(v, 0), 65536)
	}
	v4, v6 := bound(b.maxV4), bound(b.maxV6)
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800:
		return v4
	case 0x86dd:
		return v6
	}
	return min(v4, v6)
}

func (b *fuzzBatch) add(fr Frame, flow int, bad bool) {
	b.frames, b.flowOf, b.bad = append(b.frames, fr), append(b.flowOf, flow), append(b.bad, bad)
}

// check coalesces the batch with a table of maxBatch flows and checks what
// Coalesce makes of it: frames it does not merge into are unchanged (all of
// their Buf), merged frames are untouched, bad ones are never merged, every
// super-frame passes Fixup and the kernel's checks, has no IPv4 reserved
// bit, no padding, at most 64 datagrams if UDP, and its checksum verifies
// once completed (expand), stays below the size bound (maxLen), it is USO
// just when its flow is UDP (udp(flow)), and, per flow,
// the frames in output order (super-frames split by Segment, with verifying
// checksums) are the input frames byte for byte (checksums finished).
func (b *fuzzBatch) check(t *testing.T, maxBatch int, udp func(flow int) bool) {
	t.Helper()
	orig := cloneFrames(b.frames)
	n := b.newGRO(maxBatch).Coalesce(b.frames)
	merged := 0
	got, want := map[int][][]byte{}, map[int][][]byte{}
	for i, fr := range b.frames {
		if fr.Merged {
			merged++
		}
		same, k := unchanged(fr, orig[i]), b.flowOf[i]
		switch {
		case fr.Merged && (!same || k < 0):
			t.Fatalf("frame %d: merged but changed, or of no flow", i)
		case b.bad[i] && (fr.Merged || !same):
			t.Fatalf("frame %d: bad, but merged or changed", i)
		case !same && (orig[i].Hdr.IsGSO() || !fr.Hdr.IsGSO() || k < 0):
			t.Fatalf("frame %d: changed, but not into a super-frame: %+v -> %+v", i, orig[i].Hdr, fr.Hdr)
		case !same && !bytes.Equal(fr.Buf[:fr.Start], orig[i].Buf[:fr.Start]):
			t.Fatalf("frame %d: written before Start", i)
		case !same && (fr.Hdr.GSOType == vnethdr.GSOUDPL4) != udp(k):
			t.Fatalf("frame %d of flow %d: super-frame of GSO type %d", i, k, fr.Hdr.GSOType)
		case !same && fr.End-fr.Start-14 >= b.maxLen(fr.Buf[fr.Start:fr.End]):
			t.Fatalf("frame %d: super-frame of %d bytes, bound %d (SetMaxSize(%d, %d))",
				i, fr.End-fr.Start, b.maxLen(fr.Buf[fr.Start:fr.End]), b.maxV4, b.maxV6)
		case k < 0:
			continue
		}
		want[k] = append(want[k], canonical(orig[i]))
		switch {
		case fr.Merged:
		case same:
			got[k] = append(got[k], canonical(fr))
		default:
			got[k] = append(got[k], expand(t, fr)...)
		}
	}
	if n != merged {
		t.Fatalf("Coalesce returned %d, %d frames Merged", n, merged)
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if len(got[k]) != len(want[k]) {
			t.Fatalf("flow %d: %d frames out, %d in", k, len(got[k]), len(want[k]))
		}
		for i := range got[k] {
			if !bytes.Equal(got[k][i], want[k][i]) {
				t.Fatalf("flow %d: frame %d differs:\n got %x\nwant %x", k, i, got[k][i], want[k][i])
			}
		}
	}
}

// FuzzCoalesceRaw gives Coalesce arbitrary frames and headers (seeded with
// TCP segments and UDP datagrams). It must not
// panic; frames other than heads are untouched (Merged ones too), and each
// super-frame passes Fixup and splits back, checksums apart, into its head
// and frames marked Merged after it, each used once.
func FuzzCoalesceRaw(f *testing.F) {
	// Input: a byte for the table size (bits 0-3) and the SetMaxSize
	// sizes (bits 4-7, fuzzBatch.sizes), then per frame a 10-byte vnet
	// header, a 2-byte length, a room byte (x64 bytes), and the frame.
	add := func(fs ...Frame) {
		b := []byte{byte(len(fs))}
		for _, fr := range fs {
			var h [vnethdr.Len]byte
			fr.Hdr.Encode(h[:])
			b = append(b, h[:]...)
			b = binary.BigEndian.AppendUint16(b, uint16(fr.End-fr.Start))
			b = append(b, 255)
			b = append(b, fr.Buf[fr.Start:fr.End]...)
		}
		f.Add(b)
	}
	seg := func(s groSeg, m vnethdrtest.CsumMode) Frame { return segFrame(f, s, m, 0) }
	a := run(groSeg{}, 3, 100, 0, 1)
	b := run(groSeg{V6: true, TS: true, VLAN: true}, 3, vnethdr.TCPMinMSS, 9, 2)
	add(seg(a[0], vnethdrtest.CsumValid), seg(b[0], vnethdrtest.CsumPartial), seg(a[1], vnethdrtest.CsumFull), seg(b[1], vnethdrtest.CsumValid), seg(a[2], vnethdrtest.CsumPartial), seg(b[2], vnethdrtest.CsumFull))
	add(seg(a[0], vnethdrtest.CsumFull), seg(a[2], vnethdrtest.CsumFull), seg(a[1], vnethdrtest.CsumFull))
	// Trusted checksums: mutated payloads still merge.
	add(seg(b[0], vnethdrtest.CsumValid), seg(a[0], vnethdrtest.CsumValid), seg(b[1], vnethdrtest.CsumValid), seg(a[1], vnethdrtest.CsumValid), seg(b[2], vnethdrtest.CsumValid))
	// UDP datagrams, v4 and v6 on a VLAN, between TCP segments.
	u := run(groSeg{UDP: true}, 3, 40, 9, 3)
	v := run(groSeg{UDP: true, V6: true, VLAN: true}, 3, 18, 0, 4)
	add(seg(u[0], vnethdrtest.CsumValid), seg(a[0], vnethdrtest.CsumFull), seg(v[0], vnethdrtest.CsumPartial), seg(u[1], vnethdrtest.CsumPartial), seg(v[1], vnethdrtest.CsumFull),
		seg(a[1], vnethdrtest.CsumFull), seg(u[2], vnethdrtest.CsumFull), seg(v[2], vnethdrtest.CsumValid))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzBytes(data)
		cfg := in.next()
		maxBatch := int(cfg%16) + 1
		var sized fuzzBatch
		k := cfg >> 4 & 7
		sized.sizes(k | k<<3) // the same size for both, from bits 4-6
		var frames []Frame
		for len(in) >= vnethdr.Len+3 && len(frames) < 16 {
			var h vnethdr.Hdr
			_ = h.Decode(in)
			in = in[vnethdr.Len:]
			n := int(in.next())<<8 | int(in.next())
			room := int(in.next()) * 64
			n = min(n%2048, len(in))
			buf := make([]byte, groHeadroom+n, groHeadroom+n+room)
			copy(buf[groHeadroom:], in[:n])
			in = in[n:]
			frames = append(frames, Frame{Buf: buf, Start: groHeadroom, End: groHeadroom + n, Hdr: h})
		}
		orig := cloneFrames(frames)
		n := sized.newGRO(maxBatch).Coalesce(frames)
		used := make([]bool, len(frames))
		matched := 0
		for i, fr := range frames {
			same := unchanged(fr, orig[i])
			if fr.Merged && !same {
				t.Fatalf("frame %d: merged and changed", i)
			}
			if same || fr.Merged {
				continue
			}
			if orig[i].Hdr.IsGSO() || !fr.Hdr.IsGSO() || !bytes.Equal(fr.Buf[:fr.Start], orig[i].Buf[:fr.Start]) {
				t.Fatalf("frame %d: changed, but not into a super-frame: %+v -> %+v", i, orig[i].Hdr, fr.Hdr)
			}
			if l := fr.End - fr.Start - 14; l >= sized.maxLen(fr.Buf[fr.Start:fr.End]) {
				t.Fatalf("frame %d: super-frame of %d bytes after the Ethernet header, SetMaxSize(%d, %d)", i, l, sized.maxV4, sized.maxV6)
			}
			segs := expand(t, fr)
			if !sameSegment(segs[0], orig[i]) {
				t.Fatalf("frame %d: first segment is not the head", i)
			}
			j := i
			for _, s := range segs[1:] {
				for j++; j < len(frames) && (used[j] || !frames[j].Merged || !sameSegment(s, orig[j])); j++ {
				}
				if j == len(frames) {
					t.Fatalf("frame %d: a segment of the super-frame is no merged frame after it", i)
				}
				used[j] = true
				matched++
			}
		}
		if matched != n {
			t.Fatalf("Coalesce returned %d, %d merged frames found in super-frames", n, matched)
		}
	})
}

// sameSegment reports whether seg, emitted by Segment, is the frame orig
// apart from the TCP or UDP checksum (Segment computes it; orig's may be
// partial or trusted) and Ethernet padding.
func sameSegment(seg []byte, orig Frame) bool {
	o := orig.Buf[orig.Start:orig.End]
	o = o[:ipEnd(o)]
	l, err := vnethdr.Parse(seg)
	if err != nil || (l.Proto != protoTCP && l.Proto != protoUDP) || len(o) != len(seg) {
		return false
	}
	c := l.L4 + l.CsumOffset()
	return bytes.Equal(seg[:c], o[:c]) && bytes.Equal(seg[c+2:], o[c+2:])
}
