package vnethdrtest

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Seg describes one TCP segment or UDP datagram in full; zero values give
// a plain IPv4 TCP segment with ACK, DF, TTL 64, window 512, from
// 02:00:00:00:00:01 198.18.0.1 (2001:db8::1) port 40000 to
// 02:00:00:00:00:02 198.18.0.2 (2001:db8:ffff::2) port 5201.
type Seg struct {
	UDP            bool   // a UDP datagram: the TCP fields are ignored
	DstPort        uint16 // 0 means 5201
	NoCsum         bool   // UDP: send no checksum (check field 0)
	SrcIP, DstIP   net.IP // nil means the addresses above
	DstMAC         net.HardwareAddr
	V6, VLAN, QinQ bool
	VID            uint16 // VLAN id when vlan; 0 means 100
	TS             bool   // NOP NOP timestamps option (doff 8)
	TSVal          uint32
	IPOpts, Ext    bool // IPv4 options (IHL 7), IPv6 hop-by-hop + destination options
	TOS, TTL       uint8
	NoDF, MF       bool
	Evil           bool // IPv4 reserved flag bit (RFC 3514)
	ID             uint16
	FlowLabel      uint32
	SrcPort        uint16 // 0 means 40000
	SrcMAC         byte   // last byte of the source MAC; 0 means 1
	Seq, Ack       uint32
	Win, Urg       uint16
	Flags          byte // TCP flags byte; 0 means ACK
	Payload        []byte
}

// Values from include/uapi/linux/virtio_net.h, RFC 793 and RFC 768.
const (
	needsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM
	gsoTCPv4  = 1
	gsoTCPv6  = 4
	gsoUDPL4  = 5
	gsoECN    = 0x80

	protoTCP   = 6
	protoUDP   = 17
	tcpCsumOff = 16 // offsetof(struct tcphdr, check)
	udpCsumOff = 6  // offsetof(struct udphdr, check)
	tcpPSH     = 0x08
	tcpACK     = 0x10
)

// rawLayer serializes fixed bytes, for IPv6 extension headers.
type rawLayer []byte

func (r rawLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	p, err := b.PrependBytes(len(r))
	copy(p, r)
	return err
}
func (r rawLayer) LayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

var (
	src4 = net.IPv4(198, 18, 0, 1).To4()
	dst4 = net.IPv4(198, 18, 0, 2).To4()
	src6 = net.ParseIP("2001:db8::1")
	dst6 = net.ParseIP("2001:db8:ffff::2")
)

// L3 is the offset of the IP header in the built frame.
func (s Seg) L3() int {
	n := 14
	if s.QinQ {
		n += 4
	}
	if s.VLAN {
		n += 4
	}
	return n
}

// L4 is the offset of the TCP or UDP header.
func (s Seg) L4() int {
	switch {
	case s.V6 && s.Ext:
		return s.L3() + 40 + 24
	case s.V6:
		return s.L3() + 40
	case s.IPOpts:
		return s.L3() + 28
	}
	return s.L3() + 20
}

// HdrLen is the length of all headers, where the payload starts.
func (s Seg) HdrLen() int {
	if s.UDP {
		return s.L4() + 8
	}
	if s.TS {
		return s.L4() + 32
	}
	return s.L4() + 20
}

// Addrs are the IP addresses.
func (s Seg) Addrs() (src, dst net.IP) {
	switch {
	case s.SrcIP != nil:
		return s.SrcIP, s.DstIP
	case s.V6:
		return src6, dst6
	}
	return src4, dst4
}

// Proto is the IP protocol number: 6 (TCP) or 17 (UDP).
func (s Seg) Proto() byte {
	if s.UDP {
		return protoUDP
	}
	return protoTCP
}

// CsumOff is the offset of the L4 check field from the L4 header.
func (s Seg) CsumOff() int {
	if s.UDP {
		return udpCsumOff
	}
	return tcpCsumOff
}

// GSOType is the virtio gso_type of a super-frame of such segments.
func (s Seg) GSOType() uint8 {
	switch {
	case s.UDP:
		return gsoUDPL4
	case s.V6:
		return gsoTCPv6
	}
	return gsoTCPv4
}

// Pseudo is s's pseudo-header for l4Len bytes of TCP or UDP.
func (s Seg) Pseudo(l4Len int) []byte {
	src, dst := s.Addrs()
	return Pseudo(src, dst, s.Proto(), l4Len)
}

// Build serializes s with gopacket, lengths and checksums computed by it.
func (s Seg) Build(tb testing.TB) []byte {
	tb.Helper()
	ls, next := s.linkLayers()
	nl := s.networkLayer(next)
	ls = append(ls, nl.(gopacket.SerializableLayer))
	if s.V6 && s.Ext {
		ls = append(ls, rawLayer{60, 0, 1, 4, 0, 0, 0, 0})
		ls = append(ls, rawLayer{byte(s.l4Proto()), 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	}
	port := s.SrcPort
	if port == 0 {
		port = 40000
	}
	dport := s.DstPort
	if dport == 0 {
		dport = 5201
	}
	if s.UDP {
		return buildUDP(tb, s, ls, nl, port, dport)
	}
	tc := s.tcpLayer(port, dport)
	if err := tc.SetNetworkLayerForChecksum(nl); err != nil {
		tb.Fatal(err)
	}
	ls = append(ls, tc, gopacket.Payload(s.Payload))
	return serializeSeg(tb, s, ls)
}

func (s Seg) l4Proto() layers.IPProtocol {
	if s.UDP {
		return layers.IPProtocolUDP
	}
	return layers.IPProtocolTCP
}

// linkLayers are the Ethernet header and s's VLAN tags, and where the
// EtherType of the network layer goes.
func (s Seg) linkLayers() ([]gopacket.SerializableLayer, *layers.EthernetType) {
	mac := s.SrcMAC
	if mac == 0 {
		mac = 1
	}
	eth := &layers.Ethernet{
		SrcMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, mac},
		DstMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 2},
	}
	if s.DstMAC != nil {
		eth.DstMAC = s.DstMAC
	}
	ls := []gopacket.SerializableLayer{eth}
	next := &eth.EthernetType
	if s.QinQ {
		*next = layers.EthernetTypeQinQ
		q := &layers.Dot1Q{VLANIdentifier: 7}
		ls = append(ls, q)
		next = &q.Type
	}
	if s.VLAN {
		vid := s.VID
		if vid == 0 {
			vid = 100
		}
		*next = layers.EthernetTypeDot1Q
		q := &layers.Dot1Q{VLANIdentifier: vid, Priority: 5}
		ls = append(ls, q)
		next = &q.Type
	}
	return ls, next
}

// networkLayer is s's IPv4 or IPv6 header; it sets *next to its
// EtherType. An IPv6 header with Ext is followed by two extension
// headers Build adds.
func (s Seg) networkLayer(next *layers.EthernetType) gopacket.NetworkLayer {
	src, dst := s.Addrs()
	ttl := s.TTL
	if ttl == 0 {
		ttl = 64
	}
	if s.V6 {
		*next = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, TrafficClass: s.TOS, FlowLabel: s.FlowLabel, HopLimit: ttl,
			SrcIP: src, DstIP: dst, NextHeader: s.l4Proto()}
		if s.Ext {
			ip.NextHeader = layers.IPProtocolIPv6HopByHop
		}
		return ip
	}
	*next = layers.EthernetTypeIPv4
	ip := &layers.IPv4{Version: 4, TOS: s.TOS, TTL: ttl, Id: s.ID, SrcIP: src, DstIP: dst, Protocol: s.l4Proto()}
	if !s.NoDF {
		ip.Flags |= layers.IPv4DontFragment
	}
	if s.MF {
		ip.Flags |= layers.IPv4MoreFragments
	}
	if s.Evil {
		ip.Flags |= layers.IPv4EvilBit
	}
	if s.IPOpts {
		ip.Options = []layers.IPv4Option{
			{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}},
			{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0},
		}
	}
	return ip
}

// tcpLayer is s's TCP header, its flags, window and timestamps.
func (s Seg) tcpLayer(port, dport uint16) *layers.TCP {
	f := s.Flags
	if f == 0 {
		f = tcpACK
	}
	win := s.Win
	if win == 0 {
		win = 512
	}
	tc := &layers.TCP{SrcPort: layers.TCPPort(port), DstPort: layers.TCPPort(dport), Seq: s.Seq, Ack: s.Ack, Window: win, Urgent: s.Urg,
		FIN: f&0x01 != 0, SYN: f&0x02 != 0, RST: f&0x04 != 0, PSH: f&0x08 != 0,
		ACK: f&0x10 != 0, URG: f&0x20 != 0, ECE: f&0x40 != 0, CWR: f&0x80 != 0}
	if s.TS {
		var d [8]byte
		binary.BigEndian.PutUint32(d[:], s.TSVal)
		binary.BigEndian.PutUint32(d[4:], 0x01020304)
		tc.Options = []layers.TCPOption{
			{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindTimestamps, OptionData: d[:]},
		}
	}
	return tc
}

// buildUDP finishes Build for a datagram.
func buildUDP(tb testing.TB, s Seg, ls []gopacket.SerializableLayer, nl gopacket.NetworkLayer, sport, dport uint16) []byte {
	tb.Helper()
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	if err := u.SetNetworkLayerForChecksum(nl); err != nil {
		tb.Fatal(err)
	}
	ls = append(ls, u, gopacket.Payload(s.Payload))
	b := serializeSeg(tb, s, ls)
	c := b[s.L4()+udpCsumOff:]
	switch {
	case s.NoCsum:
		c[0], c[1] = 0, 0
	case c[0] == 0 && c[1] == 0:
		// gopacket leaves a computed 0 as 0, which means "no checksum"
		// (RFC 768); a sender writes 0xffff.
		c[0], c[1] = 0xff, 0xff
	}
	return b
}

func serializeSeg(tb testing.TB, s Seg, ls []gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		tb.Fatal(err)
	}
	b := buf.Bytes()
	// Cut gopacket's padding to 60 bytes: a packet socket does not pad.
	end := s.L3() + 40 + int(binary.BigEndian.Uint16(b[s.L3()+4:]))
	if !s.V6 {
		end = s.L3() + int(binary.BigEndian.Uint16(b[s.L3()+2:]))
	}
	if end != s.HdrLen()+len(s.Payload) {
		tb.Fatalf("built %d bytes of IP, want %d", end, s.HdrLen()+len(s.Payload))
	}
	return append([]byte(nil), b[:end]...)
}

// Partial puts f, a frame built from s, into the form a sender that leaves
// the checksum to offload gives it (CHECKSUM_PARTIAL): the folded
// pseudo-header sum in the L4 check field. It returns the NEEDS_CSUM
// header that goes with it, csum_start at the L4 header, hdr_len all
// headers, no GSO.
func (s Seg) Partial(f []byte) Hdr {
	binary.BigEndian.PutUint16(f[s.L4()+s.CsumOff():], RefSum(s.Pseudo(len(f)-s.L4())))
	return Hdr{Flags: needsCsum, HdrLen: uint16(s.HdrLen()), CsumStart: uint16(s.L4()), CsumOffset: uint16(s.CsumOff())}
}
