package vnethdr

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
)

// Userspace GRO: TCP segments that arrive MTU-sized from the wire are merged
// into one GSO super-frame per flow and batch, so a TAP with a vnet header
// takes one write (and one trip through its stack) for up to 64 KiB instead
// of one per segment. The rules are the kernel's (net/core/gro.c:
// dev_gro_receive, net/ipv4/af_inet.c: inet_gro_receive,
// net/ipv6/ip6_offload.c: ipv6_gro_receive, net/ipv4/tcp_offload.c:
// tcp_gro_receive), as wireguard-go applies them to its TUN
// (tun/offload_linux.go), with a few fields more held equal so that Segment
// of a merged frame gives back the original segments byte for byte.

const (
	// groMaxIPLen bounds a merged IP packet, IPv6 header included, like
	// the kernel's default gro_max_size (GRO_LEGACY_MAX_SIZE, 65536, which
	// net/core/gro.c: skb_gro_receive refuses to reach).
	groMaxIPLen = 0xffff

	tcpACK = 0x10
)

// Frame is one frame of a batch given to GRO.Coalesce: the Ethernet frame
// is Buf[Start:End] (End may exceed len(Buf), not cap(Buf)), described by
// Hdr. Coalescing appends payload to Buf past End, so Buf's capacity bounds
// how large a merged frame may grow. The Bufs of the frames of one batch
// must not overlap.
type Frame struct {
	Buf        []byte
	Start, End int
	Hdr        Hdr
	// Merged is set by Coalesce: this frame's payload now lives in an
	// earlier frame of the batch; do not send it. Coalesce clears it on
	// every other frame.
	Merged bool
}

// GRO is a reusable flow table for Coalesce. It is not safe for concurrent
// use: give each queue its own.
type GRO struct {
	seed  maphash.Seed
	slots []groSlot // open addressing, at least twice as many as flows
	mask  uint32
	gen   uint32    // a slot is in use in this batch if its gen is this
	flows []groFlow // capacity maxBatch; never grows
}

type groSlot struct {
	gen  uint32
	flow int32
}

// groKey names a flow: the length of the L2 header, the L2 header itself
// (MAC addresses, VLAN tags, EtherType), the IP addresses and the TCP
// ports, zero-padded. At most 1 + 22 + 32 + 4 bytes.
type groKey [64]byte

// groFlow is a flow seen in this batch and its open super-frame, if any.
type groFlow struct {
	key  groKey
	head int // index of the frame being merged into; -1 if none is open

	// Layout of the head, as offsets from its Start; end is where its IP
	// packet ends now.
	l3, l4, payload, end int
	ipv6                 bool

	gsoSize int    // payload of the head segment: every merged one but the last has as much
	segs    int    // segments merged into the head
	nextSeq uint32 // sequence number the next segment must have
	nextID  uint16 // IPv4 ID the next segment must have
	checked bool   // the head's checksums were verified
	psh     bool   // the last merged segment had PSH
}

// NewGRO returns a flow table for batches of up to maxBatch frames. Larger
// batches work, but once maxBatch flows are tracked the frames of further
// flows are left as they are.
func NewGRO(maxBatch int) *GRO {
	maxBatch = max(maxBatch, 1)
	n := 1
	for n < 2*maxBatch {
		n <<= 1
	}
	return &GRO{
		seed:  maphash.MakeSeed(),
		slots: make([]groSlot, n),
		mask:  uint32(n - 1),
		flows: make([]groFlow, 0, maxBatch),
	}
}

// Coalesce merges, in place, TCP segments (IPv4 and IPv6, optionally VLAN
// tagged) of one flow that follow each other in sequence into the earliest
// frame of that run, which becomes a GSO super-frame; the others are marked
// Merged. It returns how many frames were merged away. It does not allocate.
//
// Segments merge when, as in the kernel's GRO, they have the same L2 header
// (addresses, VLAN tags), IP addresses, ports, IPv4 TOS, TTL and DF (no
// options, no fragments) or IPv6 first word (traffic class, flow label) and
// hop limit (no extension headers), the same ACK number, window, urgent
// pointer, data offset and TCP option bytes (timestamps included), flags ACK
// or ACK|PSH, the next sequence number and a payload of 1..GSOSize bytes,
// where GSOSize is the head's payload. IPv4 IDs must be consecutive (head
// ID + n for the nth merged segment): that is what Linux senders and the
// kernel's GSO emit, and it makes Segment, which numbers IDs the same way,
// give back the original headers. Fixed IDs (the kernel's SKB_GSO_TCP_FIXEDID
// case, which a virtio header cannot express) are not merged. A merged
// segment with PSH, or shorter than GSOSize, ends the run, and the
// super-frame carries its PSH. Any other TCP frame of the flow (pure ACK,
// other flags, out of order, GSO, ...) ends the run too, so the frames of a
// flow stay in their order; such a frame may start the next run.
//
// Checksums: a segment is merged only if its checksum is known good: Hdr has
// FlagDataValid (the receiving device checked it), or FlagNeedsCsum with
// CsumStart at the TCP header and CsumOffset at its check field (a local
// sender left it to offload; the field holds the pseudo-header sum), or, with
// neither flag, Coalesce verifies the pseudo-header and segment sum itself:
// one pass over each segment it merges, as costly as CompleteChecksum (about
// 100 ns per 1500-byte segment on the 2-vCPU test VM, which nearly doubles
// the cost of merging it: BenchmarkCoalesce). The IPv4 header checksum is
// always verified. A segment that fails is left alone, so a corrupt segment
// never becomes part of a frame whose checksum is then computed afresh.
//
// The head becomes: IP total length (IPv4, with a new header checksum) or
// payload length (IPv6) of the whole, PSH if the last merged segment had it,
// Hdr = {FlagNeedsCsum, GSOTCPv4 or GSOTCPv6, HdrLen = headers, GSOSize,
// CsumStart = TCP header, CsumOffset = 16}, and the pseudo-header sum in the
// TCP check field, as the kernel leaves a CHECKSUM_PARTIAL frame; Fixup
// accepts it unchanged. The merged IP packet stays within 65535 bytes and
// cap(Buf) of the head. Every frame that is not a head of a merge is left
// exactly as it was (bytes and Hdr), and only Buf[Start:cap(Buf)] of a head
// is written.
//
// Call it on frames whose VLAN tags are back in the frame (InsertVLAN), so
// that frames of different VLANs are told apart.
func (g *GRO) Coalesce(frames []Frame) int {
	g.gen++
	if g.gen == 0 {
		clear(g.slots)
		g.gen = 1
	}
	g.flows = g.flows[:0]
	merged := 0
	for i := range frames {
		f := &frames[i]
		f.Merged = false
		if f.Start < 0 || f.Start > f.End || f.End > cap(f.Buf) {
			continue
		}
		frame := f.Buf[f.Start:f.End]
		l, err := parse(frame)
		if err != nil || l.proto != protoTCP {
			continue // not TCP, malformed, a fragment: not part of any flow
		}
		fl := g.lookup(frame, &l)
		if fl == nil {
			continue
		}
		if fl.head >= 0 && fl.append(frames, i, &l) {
			merged++
			continue
		}
		fl.close(frames)
		fl.open(frames, i, &l)
	}
	for i := range g.flows {
		g.flows[i].close(frames)
	}
	return merged
}

// lookup returns the flow of a TCP frame, adding it if it is new in this
// batch, or nil when the table is full.
func (g *GRO) lookup(frame []byte, l *layout) *groFlow {
	var k groKey
	k[0] = byte(l.l3)
	n := 1 + copy(k[1:], frame[:l.l3])
	if l.ipv6 {
		n += copy(k[n:], frame[l.l3+8:l.l3+40])
	} else {
		n += copy(k[n:], frame[l.l3+12:l.l3+20])
	}
	n += copy(k[n:], frame[l.l4:l.l4+4])
	for j := uint32(maphash.Bytes(g.seed, k[:n])) & g.mask; ; j = (j + 1) & g.mask {
		s := &g.slots[j]
		if s.gen != g.gen {
			// Flows never outnumber half the slots, so an empty slot
			// ends every probe.
			if len(g.flows) == cap(g.flows) {
				return nil
			}
			g.flows = append(g.flows, groFlow{key: k, head: -1})
			s.gen, s.flow = g.gen, int32(len(g.flows)-1)
			return &g.flows[s.flow]
		}
		if fl := &g.flows[s.flow]; fl.key == k {
			return fl
		}
	}
}

// mergeable reports whether a TCP frame may be part of a super-frame at all,
// as its head or appended to one; checksums are checked later, only when a
// merge happens.
func mergeable(h *Hdr, frame []byte, l *layout) bool {
	if h.GSOType != GSONone {
		return false
	}
	if h.Flags&FlagNeedsCsum != 0 && (int(h.CsumStart) != l.l4 || h.CsumOffset != tcpCsumOff) {
		return false
	}
	if l.ipv6 {
		if frame[l.l3+6] != protoTCP { // extension headers
			return false
		}
	} else if frame[l.l3] != 0x45 { // options
		return false
	}
	if l.end == l.payload || l.end-l.l3 > groMaxIPLen {
		return false
	}
	flags := frame[l.l4+13]
	return flags == tcpACK || flags == tcpACK|tcpPSH
}

// open makes frame i the flow's head if it can take segments after it.
func (fl *groFlow) open(frames []Frame, i int, l *layout) {
	f := &frames[i]
	frame := f.Buf[f.Start:f.End]
	fl.head = -1
	if !mergeable(&f.Hdr, frame, l) || frame[l.l4+13]&tcpPSH != 0 {
		return
	}
	*fl = groFlow{
		key:  fl.key,
		head: i,
		l3:   l.l3, l4: l.l4, payload: l.payload, end: l.end,
		ipv6:    l.ipv6,
		gsoSize: l.end - l.payload,
		nextSeq: binary.BigEndian.Uint32(frame[l.l4+4:]) + uint32(l.end-l.payload),
		nextID:  binary.BigEndian.Uint16(frame[l.l3+4:]) + 1,
	}
}

// append merges frame i into the flow's head if every rule allows it.
func (fl *groFlow) append(frames []Frame, i int, l *layout) bool {
	h, c := &frames[fl.head], &frames[i]
	cf := c.Buf[c.Start:c.End]
	if !mergeable(&c.Hdr, cf, l) {
		return false
	}
	// The flow key fixes the L2 length; 0x45 or no extension headers fix
	// the IP header length; the data offset (compared below) the rest.
	if l.l4 != fl.l4 || l.payload != fl.payload {
		return false
	}
	pay := l.end - l.payload
	if pay > fl.gsoSize || binary.BigEndian.Uint32(cf[l.l4+4:]) != fl.nextSeq {
		return false
	}
	hf := h.Buf[h.Start : h.Start+fl.payload] // the head's headers, not yet rewritten
	l3, l4 := fl.l3, fl.l4
	if fl.ipv6 {
		// Version, traffic class, flow label; hop limit.
		if !bytes.Equal(cf[l3:l3+4], hf[l3:l3+4]) || cf[l3+7] != hf[l3+7] {
			return false
		}
	} else {
		// TOS; reserved, DF (and MF, 0 here); TTL; ID.
		if cf[l3+1] != hf[l3+1] || cf[l3+6]&0xe0 != hf[l3+6]&0xe0 || cf[l3+8] != hf[l3+8] ||
			binary.BigEndian.Uint16(cf[l3+4:]) != fl.nextID {
			return false
		}
	}
	// ACK number and data offset; window; urgent pointer; options. Flags
	// are ACK or ACK|PSH on both (mergeable, open).
	if !bytes.Equal(cf[l4+8:l4+13], hf[l4+8:l4+13]) || !bytes.Equal(cf[l4+14:l4+16], hf[l4+14:l4+16]) ||
		!bytes.Equal(cf[l4+18:l.payload], hf[l4+18:l.payload]) {
		return false
	}
	end := fl.end + pay
	if end-l3 > groMaxIPLen || h.Start+end > cap(h.Buf) {
		return false
	}
	if !fl.checked {
		hl := layout{l3: l3, l4: l4, payload: fl.payload, end: fl.end, ipv6: fl.ipv6}
		if !csumKnownGood(&h.Hdr, h.Buf[h.Start:h.Start+fl.end], &hl) {
			return false
		}
		fl.checked = true
	}
	if !csumKnownGood(&c.Hdr, cf, l) {
		return false
	}

	copy(h.Buf[h.Start+fl.end:h.Start+end], cf[l.payload:l.end])
	fl.end = end
	h.End = h.Start + end // a padded head loses its padding here
	fl.nextSeq += uint32(pay)
	fl.nextID++
	fl.segs++
	c.Merged = true
	if cf[l4+13]&tcpPSH != 0 || pay < fl.gsoSize {
		fl.psh = cf[l4+13]&tcpPSH != 0
		fl.close(frames)
	}
	return true
}

// csumKnownGood reports whether a segment's checksums can be trusted: the
// IPv4 header checksum always verifies, and the TCP checksum was checked by
// the device (FlagDataValid), is left to offload (FlagNeedsCsum, whose
// placement mergeable checked) or verifies here.
func csumKnownGood(h *Hdr, frame []byte, l *layout) bool {
	if !l.ipv6 && fold(sum(frame[l.l3:l.l3+ipv4MinLen], 0)) != 0xffff {
		return false
	}
	if h.Flags&(FlagDataValid|FlagNeedsCsum) != 0 {
		return true
	}
	acc, _ := addrSum(frame, l) // no routing header: always ok
	return fold(sum(frame[l.l4:l.end], acc+protoTCP+uint64(l.end-l.l4))) == 0xffff
}

// close ends the flow's open run; if segments were merged, it turns the
// head into the super-frame.
func (fl *groFlow) close(frames []Frame) {
	if fl.head < 0 {
		return
	}
	if fl.segs > 0 {
		fl.finish(&frames[fl.head])
	}
	fl.head = -1
}

func (fl *groFlow) finish(f *Frame) {
	frame := f.Buf[f.Start:f.End]
	l3 := fl.l3
	f.Hdr = Hdr{HdrLen: uint16(fl.payload), GSOSize: uint16(fl.gsoSize)}
	if fl.ipv6 {
		binary.BigEndian.PutUint16(frame[l3+4:], uint16(fl.end-l3-ipv6HdrLen))
		f.Hdr.GSOType = GSOTCPv6
	} else {
		binary.BigEndian.PutUint16(frame[l3+2:], uint16(fl.end-l3))
		frame[l3+10], frame[l3+11] = 0, 0
		binary.BigEndian.PutUint16(frame[l3+10:], ^fold(sum(frame[l3:l3+ipv4MinLen], 0)))
		f.Hdr.GSOType = GSOTCPv4
	}
	if fl.psh {
		frame[fl.l4+13] |= tcpPSH
	}
	l := layout{l3: l3, l4: fl.l4, payload: fl.payload, end: fl.end, ipv6: fl.ipv6, proto: protoTCP}
	// Sets FlagNeedsCsum, CsumStart, CsumOffset and the pseudo-header sum;
	// it fails only for a routing header, which a head never has.
	_ = partialize(&f.Hdr, frame, &l)
}
