package vnethdr

import (
	"net"
	"testing"

	"github.com/google/gopacket"
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

// seg is the segment s describes, built by buildSeg: flags ACK|PSH unless
// s says otherwise, ack number 0x01020304, timestamps 1 and 0x01020304,
// IPv6 flow label 0x12345, a UDP datagram from port 40001.
func (s spec) seg() groSeg {
	g := groSeg{udp: s.udp, v6: s.v6, vlan: s.vlan, qinq: s.qinq, ipOpts: s.ipOpts, ext: s.ext, ts: s.tcpOpts,
		tsval: 1, id: s.id, seq: s.seq, ack: 0x01020304, flags: s.flags, flowLabel: 0x12345, payload: s.payload}
	if g.flags == 0 {
		g.flags = tcpACK | tcpPSH
	}
	if s.udp {
		g.srcPort = 40001
	}
	return g
}

// build serializes s with lengths and full checksums computed by gopacket.
func build(tb testing.TB, s spec) []byte {
	tb.Helper()
	return buildSeg(tb, s.seg())
}

// offsets of a built frame, computed from the spec, not by parse.
func (s spec) l3() int        { return s.seg().l3() }
func (s spec) l4() int        { return s.seg().l4() }
func (s spec) hdrLen() int    { return s.seg().hdrLen() }
func (s spec) csumOff() int   { return s.seg().csumOff() }
func (s spec) gsoType() uint8 { return s.seg().gsoType() }

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

// superFrame builds the frame a packet socket hands out for a GSO skb: IP
// lengths of the whole thing, the folded pseudo-header sum in the L4 check
// field (tcp_v4_send_check: th->check = ~tcp_v4_check(len, ...)),
// NEEDS_CSUM with csum_start at the L4 header.
func superFrame(tb testing.TB, s spec, gsoSize int) (Hdr, []byte) {
	tb.Helper()
	f := segFrame(tb, s.seg(), csumPartial, 0)
	f.Hdr.GSOType, f.Hdr.GSOSize = s.gsoType(), uint16(gsoSize)
	if s.flags&0x80 != 0 && !s.udp {
		f.Hdr.GSOType |= GSOECN
	}
	return f.Hdr, f.Buf[f.Start:f.End]
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
