package vnethdr

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// groSeg describes one TCP segment or UDP datagram for the GRO tests; zero
// values give a plain IPv4 TCP segment with ACK, DF, TTL 64, window 512.
type groSeg struct {
	udp            bool   // a UDP datagram: the TCP fields are ignored
	dstPort        uint16 // 0 means 5201
	noCsum         bool   // UDP: send no checksum (check field 0)
	srcIP, dstIP   net.IP // nil means src4/dst4 or src6/dst6
	dstMAC         net.HardwareAddr
	v6, vlan, qinq bool
	vid            uint16 // VLAN id when vlan; 0 means 100
	ts             bool   // NOP NOP timestamps option (doff 8)
	tsval          uint32
	ipOpts, ext    bool // IPv4 options (IHL 7), IPv6 hop-by-hop + destination options
	tos, ttl       uint8
	noDF, mf       bool
	evil           bool // IPv4 reserved flag bit (RFC 3514)
	id             uint16
	flowLabel      uint32
	srcPort        uint16 // 0 means 40000
	srcMAC         byte   // last byte of the source MAC; 0 means 1
	seq, ack       uint32
	win, urg       uint16
	flags          byte // TCP flags byte; 0 means ACK
	payload        []byte
}

func (s groSeg) l3() int {
	n := 14
	if s.qinq {
		n += 4
	}
	if s.vlan {
		n += 4
	}
	return n
}

func (s groSeg) l4() int {
	switch {
	case s.v6 && s.ext:
		return s.l3() + 40 + 24
	case s.v6:
		return s.l3() + 40
	case s.ipOpts:
		return s.l3() + 28
	}
	return s.l3() + 20
}

func (s groSeg) hdrLen() int {
	if s.udp {
		return s.l4() + 8
	}
	if s.ts {
		return s.l4() + 32
	}
	return s.l4() + 20
}

func (s groSeg) addrs() (src, dst net.IP) {
	switch {
	case s.srcIP != nil:
		return s.srcIP, s.dstIP
	case s.v6:
		return src6, dst6
	}
	return src4, dst4
}

func (s groSeg) proto() byte {
	if s.udp {
		return protoUDP
	}
	return protoTCP
}

// csumOff is the offset of the L4 check field from the L4 header.
func (s groSeg) csumOff() int {
	if s.udp {
		return udpCsumOff
	}
	return tcpCsumOff
}

func (s groSeg) gsoType() uint8 {
	switch {
	case s.udp:
		return GSOUDPL4
	case s.v6:
		return GSOTCPv6
	}
	return GSOTCPv4
}

// pseudo is s's pseudo-header for l4Len bytes of TCP or UDP.
func (s groSeg) pseudo(l4Len int) []byte {
	src, dst := s.addrs()
	return pseudo(src, dst, s.proto(), l4Len)
}

// buildSeg serializes s with gopacket, lengths and checksums computed by it.
func buildSeg(tb testing.TB, s groSeg) []byte {
	tb.Helper()
	mac := s.srcMAC
	if mac == 0 {
		mac = 1
	}
	eth := &layers.Ethernet{
		SrcMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, mac},
		DstMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 2},
	}
	if s.dstMAC != nil {
		eth.DstMAC = s.dstMAC
	}
	src, dst := s.addrs()
	l4proto := layers.IPProtocolTCP
	if s.udp {
		l4proto = layers.IPProtocolUDP
	}
	ls := []gopacket.SerializableLayer{eth}
	next := &eth.EthernetType
	if s.qinq {
		*next = layers.EthernetTypeQinQ
		q := &layers.Dot1Q{VLANIdentifier: 7}
		ls = append(ls, q)
		next = &q.Type
	}
	if s.vlan {
		vid := s.vid
		if vid == 0 {
			vid = 100
		}
		*next = layers.EthernetTypeDot1Q
		q := &layers.Dot1Q{VLANIdentifier: vid, Priority: 5}
		ls = append(ls, q)
		next = &q.Type
	}
	ttl := s.ttl
	if ttl == 0 {
		ttl = 64
	}
	var nl gopacket.NetworkLayer
	if s.v6 {
		*next = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, TrafficClass: s.tos, FlowLabel: s.flowLabel, HopLimit: ttl,
			SrcIP: src, DstIP: dst, NextHeader: l4proto}
		ls = append(ls, ip)
		if s.ext {
			ip.NextHeader = layers.IPProtocolIPv6HopByHop
			ls = append(ls, rawLayer{60, 0, 1, 4, 0, 0, 0, 0})
			ls = append(ls, rawLayer{byte(l4proto), 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
		}
		nl = ip
	} else {
		*next = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TOS: s.tos, TTL: ttl, Id: s.id, SrcIP: src, DstIP: dst, Protocol: l4proto}
		if !s.noDF {
			ip.Flags |= layers.IPv4DontFragment
		}
		if s.mf {
			ip.Flags |= layers.IPv4MoreFragments
		}
		if s.evil {
			ip.Flags |= layers.IPv4EvilBit
		}
		if s.ipOpts {
			ip.Options = []layers.IPv4Option{
				{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}},
				{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0},
			}
		}
		ls = append(ls, ip)
		nl = ip
	}
	f := s.flags
	if f == 0 {
		f = tcpACK
	}
	port := s.srcPort
	if port == 0 {
		port = 40000
	}
	dport := s.dstPort
	if dport == 0 {
		dport = 5201
	}
	if s.udp {
		return buildUDP(tb, s, ls, nl, port, dport)
	}
	win := s.win
	if win == 0 {
		win = 512
	}
	tc := &layers.TCP{SrcPort: layers.TCPPort(port), DstPort: layers.TCPPort(dport), Seq: s.seq, Ack: s.ack, Window: win, Urgent: s.urg,
		FIN: f&0x01 != 0, SYN: f&0x02 != 0, RST: f&0x04 != 0, PSH: f&0x08 != 0,
		ACK: f&0x10 != 0, URG: f&0x20 != 0, ECE: f&0x40 != 0, CWR: f&0x80 != 0}
	if s.ts {
		var d [8]byte
		binary.BigEndian.PutUint32(d[:], s.tsval)
		binary.BigEndian.PutUint32(d[4:], 0x01020304)
		tc.Options = []layers.TCPOption{
			{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindTimestamps, OptionData: d[:]},
		}
	}
	if err := tc.SetNetworkLayerForChecksum(nl); err != nil {
		tb.Fatal(err)
	}
	ls = append(ls, tc, gopacket.Payload(s.payload))
	return serializeSeg(tb, s, ls)
}

// buildUDP finishes buildSeg for a datagram.
func buildUDP(tb testing.TB, s groSeg, ls []gopacket.SerializableLayer, nl gopacket.NetworkLayer, sport, dport uint16) []byte {
	tb.Helper()
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	if err := u.SetNetworkLayerForChecksum(nl); err != nil {
		tb.Fatal(err)
	}
	ls = append(ls, u, gopacket.Payload(s.payload))
	b := serializeSeg(tb, s, ls)
	c := b[s.l4()+udpCsumOff:]
	switch {
	case s.noCsum:
		c[0], c[1] = 0, 0
	case c[0] == 0 && c[1] == 0:
		// gopacket leaves a computed 0 as 0, which means "no checksum"
		// (RFC 768); a sender writes 0xffff.
		c[0], c[1] = 0xff, 0xff
	}
	return b
}

func serializeSeg(tb testing.TB, s groSeg, ls []gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		tb.Fatal(err)
	}
	b := buf.Bytes()
	// Cut gopacket's padding to 60 bytes: a packet socket does not pad.
	end := s.l3() + 40 + int(binary.BigEndian.Uint16(b[s.l3()+4:]))
	if !s.v6 {
		end = s.l3() + int(binary.BigEndian.Uint16(b[s.l3()+2:]))
	}
	if end != s.hdrLen()+len(s.payload) {
		tb.Fatalf("built %d bytes of IP, want %d", end, s.hdrLen()+len(s.payload))
	}
	return append([]byte(nil), b[:end]...)
}

// csumMode is how a test segment's TCP checksum arrives.
type csumMode uint8

const (
	csumFull    csumMode = iota // no flag: a full checksum Coalesce has to verify
	csumValid                   // FlagDataValid, full checksum
	csumPartial                 // FlagNeedsCsum, pseudo-header sum in the field
	numCsumModes
)

func (m csumMode) String() string {
	return [...]string{"full", "valid", "partial"}[m]
}

// groHeadroom is where test frames start in their Buf, like the forwarder's
// headroom.
const groHeadroom = 32

// toFrame puts the built segment f into a Buf with room bytes of capacity
// after it, in the given checksum mode.
func toFrame(s groSeg, f []byte, mode csumMode, room int) Frame {
	buf := make([]byte, groHeadroom+len(f), groHeadroom+len(f)+room)
	copy(buf[groHeadroom:], f)
	fr := Frame{Buf: buf, Start: groHeadroom, End: groHeadroom + len(f)}
	switch mode {
	case csumValid:
		fr.Hdr.Flags = FlagDataValid
	case csumPartial:
		binary.BigEndian.PutUint16(buf[groHeadroom+s.l4()+s.csumOff():], refSum(s.pseudo(len(f)-s.l4())))
		fr.Hdr = Hdr{Flags: FlagNeedsCsum, HdrLen: uint16(s.hdrLen()), CsumStart: uint16(s.l4()), CsumOffset: uint16(s.csumOff())}
	}
	return fr
}

func segFrame(tb testing.TB, s groSeg, mode csumMode, room int) Frame {
	tb.Helper()
	return toFrame(s, buildSeg(tb, s), mode, room)
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
		_ = CompleteChecksum(&h, b)
	}
	b = b[:ipEnd(b)]
	if l, err := parse(b); err == nil && l.proto == protoTCP && binary.BigEndian.Uint16(b[l.l4+tcpCsumOff:]) == 0 {
		binary.BigEndian.PutUint16(b[l.l4+tcpCsumOff:], 0xffff)
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
	case h.Flags != FlagNeedsCsum || h.GSOSize == 0:
		tb.Fatalf("super-frame header %+v", h)
	case h.GSOType == GSOTCPv4 || h.GSOType == GSOTCPv6:
		if h.CsumOffset != tcpCsumOff {
			tb.Fatalf("super-frame header %+v", h)
		}
	case h.GSOType == GSOUDPL4:
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
	if l, err := parse(frame); err != nil || l.end != len(frame) || len(frame)-14 >= 65536 {
		tb.Fatalf("super-frame of %d bytes: %v", len(frame), err)
	}
	// No IPv4 reserved bit: the kernel never merges such packets.
	if l3, et, _ := L3Offset(frame); et == etherTypeIPv4 && frame[l3+6]&0x80 != 0 {
		tb.Fatal("super-frame with the IPv4 reserved bit")
	}
	// Fixup takes it as it is, and so would the kernel.
	fh := h
	fc := append([]byte(nil), frame...)
	if err := Fixup(&fh, fc); err != nil || fh != h || !bytes.Equal(fc, frame) {
		tb.Fatalf("Fixup of the super-frame: %v, %+v -> %+v", err, h, fh)
	}
	if why := kernelRefusal(h, len(frame)); why != "" {
		tb.Fatalf("the kernel would refuse the super-frame %+v: %s", h, why)
	}
	// The partial checksum completes to one that verifies.
	ch := h
	if err := CompleteChecksum(&ch, fc); err != nil {
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
