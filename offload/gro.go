package offload

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// Userspace GRO: TCP segments that arrive MTU-sized from the wire, and
// same-size UDP datagrams of a flow, are merged into one GSO super-frame per
// flow and batch, so a TAP with a vnet header takes one write (and one trip
// through its stack) for up to 64 KiB instead of one per frame. The rules are
// the kernel's (net/core/gro.c: dev_gro_receive, net/ipv4/af_inet.c:
// inet_gro_receive, net/ipv6/ip6_offload.c: ipv6_gro_receive,
// net/ipv4/tcp_offload.c: tcp_gro_receive, net/ipv4/udp_offload.c:
// udp_gro_receive_segment), as wireguard-go applies them to its TUN
// (tun/offload_linux.go), with a few fields more held equal so that Segment
// of a merged frame gives back the original frames byte for byte.

const (
	// groLegacyMaxSize is GRO_LEGACY_MAX_SIZE (include/linux/netdevice.h),
	// the default of a device's gro_max_size and gro_ipv4_max_size and the
	// most SetMaxSize takes: beyond it the kernel merges only BIG TCP, which
	// a 16-bit IP length and a virtio header cannot describe.
	groLegacyMaxSize = 65536

	// udpGROMaxSegments is UDP_GRO_CNT_MAX (net/ipv4/udp_offload.c), the
	// most datagrams the kernel's GRO puts in one super-frame
	// (udp_gro_receive_segment, "under small packet flood GRO count could
	// elsewhere grow a lot"). The accept side, what a write may carry, is
	// UDP_MAX_SEGMENTS (128).
	udpGROMaxSegments = 64

	tcpACK = 0x10

	// ipv4Evil is the reserved bit of the IPv4 flags (RFC 3514).
	ipv4Evil = 0x80
)

// Frame is one frame of a batch given to GRO.Coalesce: the Ethernet frame
// is Buf[Start:End] (End may exceed len(Buf), not cap(Buf)), described by
// Hdr. Coalescing appends payload to Buf past End, so Buf's capacity bounds
// how large a merged frame may grow. The Bufs of the frames of one batch
// must not overlap.
type Frame struct {
	Buf        []byte
	Start, End int
	Hdr        vnethdr.Hdr
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
	noUDP bool      // SetUDP(false): UDP frames are left alone

	// SetMaxSize: a merged frame's length from the end of its Ethernet
	// header (VLAN tags and IP packet) stays below maxV4 (IPv4) or maxV6
	// (IPv6); tagged frames stay below both.
	maxV4, maxV6 int
}

type groSlot struct {
	gen  uint32
	flow int32
}

// groKey names a flow: the length of the L2 header, the L4 protocol (TCP
// and UDP flows are apart even on the same ports), the L2 header itself (MAC
// addresses, VLAN tags, EtherType), the IP addresses and the ports,
// zero-padded. At most 2 + 22 + 32 + 4 bytes.
type groKey [64]byte

// groFlow is a flow seen in this batch and its open super-frame, if any.
type groFlow struct {
	key  groKey
	head int // index of the frame being merged into; -1 if none is open

	// Layout of the head, as offsets from its Start; end is where its IP
	// packet ends now.
	l3, l4, payload, end int
	ipv6                 bool
	proto                uint8 // protoTCP or protoUDP
	maxEnd               int   // end must stay below this (SetMaxSize)

	gsoSize int    // payload of the head segment: every merged one but the last has as much
	segs    int    // segments merged into the head
	nextSeq uint32 // TCP: sequence number the next segment must have
	nextID  uint16 // IPv4 ID the next segment must have
	checked bool   // the head's checksums were verified
	psh     bool   // TCP: the last merged segment had PSH
}

// NewGRO returns a flow table for batches of up to maxBatch frames; it merges
// TCP and UDP (see SetUDP). Larger batches work, but once maxBatch flows are
// tracked the frames of further flows are left as they are.
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
		maxV4: groLegacyMaxSize,
		maxV6: groLegacyMaxSize,
	}
}

// SetUDP turns merging UDP datagrams into USO super-frames on (the default)
// or off. Turn it off when the TAP's kernel cannot take a
// VIRTIO_NET_HDR_GSO_UDP_L4 write: USO in virtio_net_hdr_to_skb came with
// TUN_F_USO4/TUN_F_USO6 in Linux 6.2, so a TAP whose TUNSETOFFLOAD refused
// them would reject every super-frame (EINVAL) and lose its datagrams.
func (g *GRO) SetUDP(on bool) { g.noUDP = !on }

// SetMaxSize bounds merged frames the way a device's gro_ipv4_max_size
// (ipv4) and gro_max_size (ipv6) bound the kernel's GRO (IFLA_GRO_IPV4_MAX_SIZE,
// IFLA_GRO_MAX_SIZE; give it the TAP's): net/core/gro.c: skb_gro_receive
// merges a segment only while the super-frame's length, counted from the
// end of the Ethernet header (VLAN tags and IP packet), stays below the
// size. For a tagged frame the kernel goes by the EtherType in the frame,
// which is a VLAN TPID, and takes gro_ipv4_max_size even for IPv6
// (include/linux/netdevice.h: netif_get_gro_max_size); Coalesce takes the
// smaller of the two, which is at least as strict whether the tag is in the
// frame or was stripped into the skb. Sizes above GRO_LEGACY_MAX_SIZE
// (65536, the default of both) are taken as 65536: larger ones are BIG TCP,
// which a 16-bit IP length cannot carry. Sizes of 0 or less merge nothing,
// like a gro_max_size of 0.
func (g *GRO) SetMaxSize(ipv4, ipv6 int) {
	g.maxV4 = min(max(ipv4, 0), groLegacyMaxSize)
	g.maxV6 = min(max(ipv6, 0), groLegacyMaxSize)
}

// maxEnd is where a merged frame of this layout must end before: its
// length from the end of the Ethernet header below the SetMaxSize bound.
func (g *GRO) maxEnd(l *vnethdr.Layout) int {
	size := g.maxV4
	switch {
	case l.L3 != ethHdrLen: // tagged
		size = min(g.maxV4, g.maxV6)
	case l.IPv6:
		size = g.maxV6
	}
	return ethHdrLen + size
}

// Coalesce merges, in place, TCP segments and UDP datagrams (IPv4 and IPv6,
// optionally VLAN tagged) of one flow that follow each other into the
// earliest frame of that run, which becomes a GSO super-frame; the others
// are marked Merged. It returns how many frames were merged away. It does not
// allocate. The frames of a flow keep their order; merged frames move ahead
// of other flows' frames that were between them.
//
// Frames merge when, as in the kernel's GRO, they have the same L2 header
// (addresses, VLAN tags), IP addresses, L4 protocol and ports, IPv4 TOS, TTL
// and DF (no options, no fragments, not the reserved "evil" bit, which
// net/ipv4/af_inet.c: inet_gro_receive never merges) or IPv6 first word
// (traffic class, flow label) and hop limit (no extension headers), an IP
// length that ends where the frame ends (a frame with Ethernet padding is
// never merged: inet_gro_receive and net/ipv6/ip6_offload.c:
// ipv6_gro_receive flush it), and a payload of 1..GSOSize bytes, where
// GSOSize is the head's payload. IPv4 IDs must be consecutive
// (head ID + n for the nth merged frame): that is what Linux senders and the
// kernel's GSO emit (connected sockets number per socket,
// include/net/ip.h: ip_select_ident_segs), and it makes Segment, which
// numbers IDs the same way, give back the original headers. Fixed IDs (the
// kernel's SKB_GSO_TCP_FIXEDID case, which a virtio header cannot express;
// unconnected UDP sockets with DF send ID 0) are not merged. A frame shorter
// than GSOSize ends the run. Any other frame of the flow (for TCP a pure ACK,
// other flags, out of order; a GSO frame; one that breaks a rule) ends the
// run too, so the frames of a flow stay in their order; such a frame may
// start the next run.
//
// TCP, in addition: the same ACK number, window, urgent pointer, data offset
// and TCP option bytes (timestamps included), flags ACK or ACK|PSH, and the
// next sequence number. A merged segment with PSH ends the run, and the
// super-frame carries its PSH. A head needs at least TCP_MIN_MSS (88) bytes
// of payload: the super-frame's gso_size is the head's payload, and
// vnethdr.Fixup refuses TCP GSO below that (vnethdr.TCPMinMSS); smaller
// segments are left alone.
//
// UDP, in addition (net/ipv4/udp_offload.c: udp_gro_receive_segment): the
// UDP length must be the IP payload length, the check field must not be 0,
// and a super-frame holds at most UDP_GRO_CNT_MAX (64) datagrams, as the
// kernel's GRO (virtio_net_hdr_to_skb would take up to UDP_MAX_SEGMENTS,
// 128). A check field of 0 over IPv4 means the sender
// sent no checksum (RFC 768; over IPv6 it is illegal, RFC 8200 section 8.1):
// such datagrams are never merged, because the super-frame gets a real
// checksum and the receiver would see bytes the sender never sent (the
// kernel's GRO refuses them too, "for symmetry with GSO"). Zero-length
// datagrams are never merged either.
//
// Checksums: a frame is merged only if its checksum is known good: Hdr has
// FlagDataValid (the receiving device checked it), or FlagNeedsCsum with
// CsumStart at the TCP/UDP header and CsumOffset at its check field (a local
// sender left it to offload; the field holds the pseudo-header sum), or, with
// neither flag, Coalesce verifies the pseudo-header and frame sum itself:
// one pass over each frame it merges, as costly as vnethdr.CompleteChecksum
// (about 100 ns per 1500-byte segment on the 2-vCPU test VM, which nearly doubles
// the cost of merging it: BenchmarkCoalesce). The IPv4 header checksum is
// always verified. A frame that fails is left alone, so a corrupt frame
// never becomes part of one whose checksum is then computed afresh.
//
// The head becomes: IP total length (IPv4, with a new header checksum) or
// payload length (IPv6) of the whole, and the pseudo-header sum over the
// whole L4 length in the check field, as the kernel leaves a
// CHECKSUM_PARTIAL frame; for TCP PSH if the last merged segment had it and
// Hdr = {FlagNeedsCsum, GSOTCPv4 or GSOTCPv6, HdrLen = headers, GSOSize,
// CsumStart = TCP header, CsumOffset = 16}; for UDP the UDP length of the
// whole (as net/ipv4/udp.c: udp_send_skb leaves a GSO skb) and Hdr =
// {FlagNeedsCsum, GSOUDPL4, HdrLen = headers, GSOSize, CsumStart = UDP
// header, CsumOffset = 6}. vnethdr.Fixup accepts it unchanged, and the
// receiving kernel splits a UDP one back into datagrams before a socket without UDP_GRO
// sees them (net/ipv4/udp.c: udp_queue_rcv_skb, udp_rcv_segment). The
// merged frame stays within cap(Buf) of the head and, from the end of its
// Ethernet header, below the size SetMaxSize gave (by default 65536, so an
// untagged IP packet of at most 65535 bytes). Every frame
// that is not a head of a merge is left exactly as it was (bytes and Hdr),
// and only Buf[Start:cap(Buf)] of a head is written.
//
// Call it on frames whose VLAN tags are back in the frame
// (vnethdr.InsertVLAN), so that frames of different VLANs are told apart.
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
		l, err := vnethdr.Parse(frame)
		if err != nil || (l.Proto != protoTCP && (l.Proto != protoUDP || g.noUDP)) {
			continue // not TCP or UDP, malformed, a fragment: not part of any flow
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
		fl.open(frames, i, &l, g.maxEnd(&l))
	}
	for i := range g.flows {
		g.flows[i].close(frames)
	}
	return merged
}

// Open reports whether a frame (with its header h) leaves its flow open
// for the next segment: a TCP segment or, with UDP on, a UDP datagram
// that Coalesce could make the head of a merge or append to one, and for
// TCP without PSH (which ends a run). It is what a reader that may wait a
// little for more of a batch asks of the batch's last frame: when it is
// false, more frames would not merge with it.
func (g *GRO) Open(h *vnethdr.Hdr, frame []byte) bool {
	l, err := vnethdr.Parse(frame)
	if err != nil || (l.Proto != protoTCP && (l.Proto != protoUDP || g.noUDP)) || !mergeable(h, frame, &l) {
		return false
	}
	return l.Proto != protoTCP || frame[l.L4+13]&tcpPSH == 0
}

// lookup returns the flow of a TCP or UDP frame, adding it if it is new in
// this batch, or nil when the table is full.
func (g *GRO) lookup(frame []byte, l *vnethdr.Layout) *groFlow {
	var k groKey
	k[0], k[1] = byte(l.L3), l.Proto
	n := 2 + copy(k[2:], frame[:l.L3])
	if l.IPv6 {
		n += copy(k[n:], frame[l.L3+8:l.L3+40])
	} else {
		n += copy(k[n:], frame[l.L3+12:l.L3+20])
	}
	n += copy(k[n:], frame[l.L4:l.L4+4])
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

// mergeable reports whether a TCP or UDP frame may be part of a super-frame
// at all, as its head or appended to one; checksums are checked later, only
// when a merge happens.
func mergeable(h *vnethdr.Hdr, frame []byte, l *vnethdr.Layout) bool {
	if h.GSOType != vnethdr.GSONone {
		return false
	}
	if h.Flags&vnethdr.FlagNeedsCsum != 0 && (int(h.CsumStart) != l.L4 || int(h.CsumOffset) != l.CsumOffset()) {
		return false
	}
	if l.IPv6 {
		if frame[l.L3+6] != l.Proto { // extension headers
			return false
		}
	} else if frame[l.L3] != 0x45 || frame[l.L3+6]&ipv4Evil != 0 {
		// Options; the reserved bit: net/ipv4/af_inet.c: inet_gro_receive
		// flushes a packet with any frag_off bit but DF set.
		return false
	}
	// The IP packet must end where the frame ends: inet_gro_receive and
	// net/ipv6/ip6_offload.c: ipv6_gro_receive flush a packet whose IP
	// length is not the length the skb has, so a frame with Ethernet
	// padding is not merged (and a super-frame is never padded).
	if l.End != len(frame) || l.End == l.Payload {
		return false
	}
	if l.Proto == protoUDP {
		// net/ipv4/udp_offload.c: udp_gro_receive_segment: the UDP length
		// is the IP payload (no trailer inside the IP packet), and a
		// check field of 0 (no checksum) is not merged.
		return int(binary.BigEndian.Uint16(frame[l.L4+4:])) == l.End-l.L4 &&
			binary.BigEndian.Uint16(frame[l.L4+udpCsumOff:]) != 0
	}
	flags := frame[l.L4+13]
	return flags == tcpACK || flags == tcpACK|tcpPSH
}

// open makes frame i the flow's head if it can take segments after it;
// the super-frame must end before maxEnd.
func (fl *groFlow) open(frames []Frame, i int, l *vnethdr.Layout, maxEnd int) {
	f := &frames[i]
	frame := f.Buf[f.Start:f.End]
	fl.head = -1
	if !mergeable(&f.Hdr, frame, l) {
		return
	}
	// A TCP head with PSH ends its run; one with less than TCP_MIN_MSS of
	// payload would make a gso_size that vnethdr.Fixup refuses.
	if l.Proto == protoTCP && (frame[l.L4+13]&tcpPSH != 0 || l.End-l.Payload < vnethdr.TCPMinMSS) {
		return
	}
	*fl = groFlow{
		key:  fl.key,
		head: i,
		l3:   l.L3, l4: l.L4, payload: l.Payload, end: l.End,
		ipv6: l.IPv6, proto: l.Proto, maxEnd: maxEnd,
		gsoSize: l.End - l.Payload,
		nextID:  binary.BigEndian.Uint16(frame[l.L3+4:]) + 1,
	}
	if l.Proto == protoTCP {
		fl.nextSeq = binary.BigEndian.Uint32(frame[l.L4+4:]) + uint32(l.End-l.Payload)
	}
}

// append merges frame i into the flow's head if every rule allows it.
func (fl *groFlow) append(frames []Frame, i int, l *vnethdr.Layout) bool {
	h, c := &frames[fl.head], &frames[i]
	cf := c.Buf[c.Start:c.End]
	if !mergeable(&c.Hdr, cf, l) {
		return false
	}
	// The flow key fixes the L2 length and the protocol; 0x45 or no
	// extension headers fix the IP header length; for TCP the data offset
	// (compared below) the rest.
	if l.L4 != fl.l4 || l.Payload != fl.payload {
		return false
	}
	pay := l.End - l.Payload
	if pay > fl.gsoSize {
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
		// TOS; DF (reserved and MF are 0 here: mergeable); TTL; ID.
		if cf[l3+1] != hf[l3+1] || cf[l3+6]&0xe0 != hf[l3+6]&0xe0 || cf[l3+8] != hf[l3+8] ||
			binary.BigEndian.Uint16(cf[l3+4:]) != fl.nextID {
			return false
		}
	}
	if fl.proto == protoTCP {
		// Sequence number; ACK number and data offset; window; urgent
		// pointer; options. Flags are ACK or ACK|PSH on both (mergeable,
		// open).
		if binary.BigEndian.Uint32(cf[l4+4:]) != fl.nextSeq ||
			!bytes.Equal(cf[l4+8:l4+13], hf[l4+8:l4+13]) || !bytes.Equal(cf[l4+14:l4+16], hf[l4+14:l4+16]) ||
			!bytes.Equal(cf[l4+18:l.Payload], hf[l4+18:l.Payload]) {
			return false
		}
	} else if fl.segs+2 > udpGROMaxSegments {
		// The head and segs datagrams are in; ports are in the key, and
		// length and checksum are per datagram.
		return false
	}
	end := fl.end + pay
	if end >= fl.maxEnd || h.Start+end > cap(h.Buf) {
		return false
	}
	if !fl.checked {
		hl := vnethdr.Layout{L3: l3, L4: l4, Payload: fl.payload, End: fl.end, IPv6: fl.ipv6, Proto: fl.proto}
		if !csumKnownGood(&h.Hdr, h.Buf[h.Start:h.Start+fl.end], &hl) {
			return false
		}
		fl.checked = true
	}
	if !csumKnownGood(&c.Hdr, cf, l) {
		return false
	}

	copy(h.Buf[h.Start+fl.end:h.Start+end], cf[l.Payload:l.End])
	fl.end = end
	h.End = h.Start + end
	fl.nextID++
	fl.segs++
	c.Merged = true
	if fl.proto == protoTCP {
		fl.nextSeq += uint32(pay)
		if cf[l4+13]&tcpPSH != 0 || pay < fl.gsoSize {
			fl.psh = cf[l4+13]&tcpPSH != 0
			fl.close(frames)
		}
	} else if pay < fl.gsoSize {
		fl.close(frames)
	}
	return true
}

// csumKnownGood reports whether a frame's checksums can be trusted: the
// IPv4 header checksum always verifies, and the TCP or UDP checksum was
// checked by the device (FlagDataValid), is left to offload (FlagNeedsCsum,
// whose placement mergeable checked) or verifies here (a UDP check field of
// 0, no checksum, never gets here: mergeable).
func csumKnownGood(h *vnethdr.Hdr, frame []byte, l *vnethdr.Layout) bool {
	if !l.IPv6 && vnethdr.Fold(vnethdr.Sum(frame[l.L3:l.L3+ipv4MinLen], 0)) != 0xffff {
		return false
	}
	if h.Flags&(vnethdr.FlagDataValid|vnethdr.FlagNeedsCsum) != 0 {
		return true
	}
	acc, _ := l.AddrSum(frame) // no routing header: always ok
	return vnethdr.Fold(vnethdr.Sum(frame[l.L4:l.End], acc+uint64(l.Proto)+uint64(l.End-l.L4))) == 0xffff
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
	f.Hdr = vnethdr.Hdr{HdrLen: uint16(fl.payload), GSOSize: uint16(fl.gsoSize)}
	if fl.ipv6 {
		binary.BigEndian.PutUint16(frame[l3+4:], uint16(fl.end-l3-ipv6HdrLen))
		f.Hdr.GSOType = vnethdr.GSOTCPv6
	} else {
		binary.BigEndian.PutUint16(frame[l3+2:], uint16(fl.end-l3))
		frame[l3+10], frame[l3+11] = 0, 0
		binary.BigEndian.PutUint16(frame[l3+10:], ^vnethdr.Fold(vnethdr.Sum(frame[l3:l3+ipv4MinLen], 0)))
		f.Hdr.GSOType = vnethdr.GSOTCPv4
	}
	switch {
	case fl.proto == protoUDP:
		f.Hdr.GSOType = vnethdr.GSOUDPL4
	case fl.psh:
		frame[fl.l4+13] |= tcpPSH
	}
	l := vnethdr.Layout{L3: l3, L4: fl.l4, Payload: fl.payload, End: fl.end, IPv6: fl.ipv6, Proto: fl.proto}
	// Sets FlagNeedsCsum, CsumStart, CsumOffset, the pseudo-header sum and,
	// for UDP, the length of the whole; it fails only for a routing
	// header, which a head never has.
	_ = vnethdr.Partialize(&f.Hdr, frame, &l)
}
