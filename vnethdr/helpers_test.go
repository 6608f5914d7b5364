package vnethdr

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// spec describes a test frame. Frames are built with gopacket (someone
// else's code) so the package is checked against an independent encoder.
type spec struct {
	v6, udp bool
	vlan    bool // 802.1Q tag, VID 100, PCP 5
	qinq    bool // add an 802.1ad outer tag before the 802.1Q one
	ipOpts  bool // IPv4 options (IHL 7)
	ext     bool // IPv6 hop-by-hop and destination options headers
	tcpOpts bool // TCP timestamps option (doff 8)
	id      uint16
	seq     uint32
	flags   byte // TCP flags byte (FIN 0x01 ... CWR 0x80); 0 means ACK|PSH
	payload []byte
}

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

// build serializes s with lengths and full checksums computed by gopacket.
func build(tb testing.TB, s spec) []byte {
	tb.Helper()
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{
		SrcMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 1},
		DstMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 2},
	}
	ls = append(ls, eth)
	l3type := layers.EthernetTypeIPv4
	if s.v6 {
		l3type = layers.EthernetTypeIPv6
	}
	next := &eth.EthernetType
	if s.qinq {
		*next = layers.EthernetTypeQinQ
		q := &layers.Dot1Q{VLANIdentifier: 7}
		ls = append(ls, q)
		next = &q.Type
	}
	if s.vlan {
		*next = layers.EthernetTypeDot1Q
		q := &layers.Dot1Q{VLANIdentifier: 100, Priority: 5}
		ls = append(ls, q)
		next = &q.Type
	}
	*next = l3type
	proto := layers.IPProtocolTCP
	if s.udp {
		proto = layers.IPProtocolUDP
	}
	var nl gopacket.NetworkLayer
	if s.v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: src6, DstIP: dst6, NextHeader: proto, FlowLabel: 0x12345}
		ls = append(ls, ip)
		if s.ext {
			ip.NextHeader = layers.IPProtocolIPv6HopByHop
			// hop-by-hop: next = dest opts, len 0, PadN(4); dest opts: next = L4, len 1, PadN(12)
			ls = append(ls, rawLayer{60, 0, 1, 4, 0, 0, 0, 0})
			ls = append(ls, rawLayer{byte(proto), 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
		}
		nl = ip
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, SrcIP: src4, DstIP: dst4, Protocol: proto, Id: s.id, Flags: layers.IPv4DontFragment}
		if s.ipOpts {
			ip.Options = []layers.IPv4Option{
				{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}, // router alert
				{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0},
			}
		}
		ls = append(ls, ip)
		nl = ip
	}
	if s.udp {
		u := &layers.UDP{SrcPort: 40001, DstPort: 5201}
		if err := u.SetNetworkLayerForChecksum(nl); err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, u)
	} else {
		f := s.flags
		if f == 0 {
			f = 0x18
		}
		tc := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: s.seq, Ack: 0x01020304, Window: 512,
			FIN: f&0x01 != 0, SYN: f&0x02 != 0, RST: f&0x04 != 0, PSH: f&0x08 != 0,
			ACK: f&0x10 != 0, URG: f&0x20 != 0, ECE: f&0x40 != 0, CWR: f&0x80 != 0}
		if s.tcpOpts {
			tc.Options = []layers.TCPOption{
				{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
				{OptionType: layers.TCPOptionKindTimestamps, OptionData: []byte{0, 0, 0, 1, 0, 0, 0, 2}},
			}
		}
		if err := tc.SetNetworkLayerForChecksum(nl); err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, tc)
	}
	ls = append(ls, gopacket.Payload(s.payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		tb.Fatal(err)
	}
	// gopacket pads to the 60-byte Ethernet minimum; a frame from a packet
	// socket or a TAP is not padded, so cut it back to the IP length.
	f := buf.Bytes()
	if s.v6 {
		f = f[:s.l3()+40+int(binary.BigEndian.Uint16(f[s.l3()+4:]))]
	} else {
		f = f[:s.l3()+int(binary.BigEndian.Uint16(f[s.l3()+2:]))]
	}
	return append([]byte(nil), f...)
}

// offsets of a built frame, computed from the spec, not by parse.
func (s spec) l3() int {
	n := 14
	if s.qinq {
		n += 4
	}
	if s.vlan {
		n += 4
	}
	return n
}

func (s spec) l4() int {
	n := s.l3()
	switch {
	case s.v6 && s.ext:
		n += 40 + 8 + 16
	case s.v6:
		n += 40
	case s.ipOpts:
		n += 28
	default:
		n += 20
	}
	return n
}

func (s spec) hdrLen() int {
	switch {
	case s.udp:
		return s.l4() + 8
	case s.tcpOpts:
		return s.l4() + 32
	}
	return s.l4() + 20
}

func (s spec) csumOff() int {
	if s.udp {
		return 6
	}
	return 16
}

func (s spec) gsoType() uint8 {
	switch {
	case s.udp:
		return GSOUDPL4
	case s.v6:
		return GSOTCPv6
	}
	return GSOTCPv4
}

// refSum is RFC 1071 done the slow, obvious way, over the concatenation of bs.
func refSum(bs ...[]byte) uint16 {
	var all []byte
	for _, b := range bs {
		all = append(all, b...)
	}
	var s uint32
	for i := 0; i+1 < len(all); i += 2 {
		s += uint32(all[i])<<8 | uint32(all[i+1])
	}
	if len(all)%2 == 1 {
		s += uint32(all[len(all)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// pseudo is the pseudo-header as bytes (RFC 793, RFC 8200 section 8.1).
func pseudo(src, dst net.IP, proto byte, l4Len int) []byte {
	var b []byte
	if len(src) == 4 { // not To4: a v4-mapped IPv6 address is still IPv6 here
		b = append(b, src...)
		b = append(b, dst...)
		b = append(b, 0, proto, byte(l4Len>>8), byte(l4Len))
		return b
	}
	b = append(b, src...)
	b = append(b, dst...)
	return append(b, 0, 0, byte(l4Len>>8), byte(l4Len), 0, 0, 0, proto)
}

func (s spec) pseudo(l4Len int) []byte {
	proto := byte(6)
	if s.udp {
		proto = 17
	}
	if s.v6 {
		return pseudo(src6, dst6, proto, l4Len)
	}
	return pseudo(src4, dst4, proto, l4Len)
}

// superFrame builds the frame a packet socket hands out for a GSO skb: IP
// lengths of the whole thing, the folded pseudo-header sum in the L4 check
// field (tcp_v4_send_check: th->check = ~tcp_v4_check(len, ...)),
// NEEDS_CSUM with csum_start at the L4 header.
func superFrame(tb testing.TB, s spec, gsoSize int) (Hdr, []byte) {
	tb.Helper()
	f := build(tb, s)
	l4Len := len(f) - s.l4()
	binary.BigEndian.PutUint16(f[s.l4()+s.csumOff():], refSum(s.pseudo(l4Len)))
	h := Hdr{
		Flags:      FlagNeedsCsum,
		GSOType:    s.gsoType(),
		HdrLen:     uint16(s.hdrLen()),
		GSOSize:    uint16(gsoSize),
		CsumStart:  uint16(s.l4()),
		CsumOffset: uint16(s.csumOff()),
	}
	if s.flags&0x80 != 0 && !s.udp {
		h.GSOType |= GSOECN
	}
	return h, f
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func outBufs(n, size int) ([][]byte, []int) {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
	}
	return out, make([]int, n)
}
