package vnethdrtest

import "testing"

// Spec describes a test frame with the defaults most tests want: a TCP
// segment (or UDP datagram) with flags ACK|PSH unless Flags says
// otherwise, ack number 0x01020304, timestamps 1 and 0x01020304 when
// TCPOpts, IPv6 flow label 0x12345, a UDP datagram from port 40001.
type Spec struct {
	V6, UDP bool
	VLAN    bool // 802.1Q tag, VID 100, PCP 5
	QinQ    bool // add an 802.1ad outer tag before the 802.1Q one
	IPOpts  bool // IPv4 options (IHL 7)
	Ext     bool // IPv6 hop-by-hop and destination options headers
	TCPOpts bool // TCP timestamps option (doff 8)
	ID      uint16
	Seq     uint32
	Flags   byte // TCP flags byte (FIN 0x01 ... CWR 0x80); 0 means ACK|PSH
	Payload []byte
}

// Seg is the segment s describes.
func (s Spec) Seg() Seg {
	g := Seg{UDP: s.UDP, V6: s.V6, VLAN: s.VLAN, QinQ: s.QinQ, IPOpts: s.IPOpts, Ext: s.Ext, TS: s.TCPOpts,
		TSVal: 1, ID: s.ID, Seq: s.Seq, Ack: 0x01020304, Flags: s.Flags, FlowLabel: 0x12345, Payload: s.Payload}
	if g.Flags == 0 {
		g.Flags = tcpACK | tcpPSH
	}
	if s.UDP {
		g.SrcPort = 40001
	}
	return g
}

// Build serializes s with lengths and full checksums computed by gopacket.
func (s Spec) Build(tb testing.TB) []byte {
	tb.Helper()
	return s.Seg().Build(tb)
}

// Offsets of a built frame, computed from the Spec, not by a parser.
func (s Spec) L3() int        { return s.Seg().L3() }
func (s Spec) L4() int        { return s.Seg().L4() }
func (s Spec) HdrLen() int    { return s.Seg().HdrLen() }
func (s Spec) CsumOff() int   { return s.Seg().CsumOff() }
func (s Spec) GSOType() uint8 { return s.Seg().GSOType() }

// SuperFrame builds the frame a packet socket hands out for a GSO skb: IP
// lengths of the whole thing, the folded pseudo-header sum in the L4 check
// field (tcp_v4_send_check: th->check = ~tcp_v4_check(len, ...)),
// NEEDS_CSUM with csum_start at the L4 header, gso_type from s (with ECN
// when a TCP Spec has CWR) and gso_size gsoSize.
func SuperFrame(tb testing.TB, s Spec, gsoSize int) (Hdr, []byte) {
	tb.Helper()
	g := s.Seg()
	f := g.Build(tb)
	h := g.Partial(f)
	h.GSOType, h.GSOSize = s.GSOType(), uint16(gsoSize)
	if s.Flags&0x80 != 0 && !s.UDP {
		h.GSOType |= gsoECN
	}
	return h, f
}

// FuzzSeeds are the frames the header fuzz targets start from, one of
// each layout: TCP over IPv4, IPv6 with extension headers, UDP behind a
// VLAN tag, UDP over IPv6 in QinQ, IPv4 and TCP options. They are small:
// Go's minimizer is quadratic in the input length, and with KiB-sized
// inputs a 20 s run spends its time minimizing, not fuzzing.
func FuzzSeeds() []Spec {
	return []Spec{
		{Payload: Pattern(300, 1)},
		{V6: true, Ext: true, Payload: Pattern(200, 2)},
		{UDP: true, VLAN: true, Payload: Pattern(150, 3)},
		{UDP: true, V6: true, QinQ: true, VLAN: true, Payload: Pattern(40, 4)},
		{IPOpts: true, TCPOpts: true, Payload: Pattern(10, 5)},
	}
}

// FuzzedSpec turns fuzz input into a valid frame description: mode's bits
// pick IPv6, UDP, a VLAN tag, QinQ, IPv4 options or IPv6 extension
// headers, and TCP options; the payload is payLen bytes (Pattern, seeded
// by seq), cut to what an IP packet holds.
func FuzzedSpec(mode uint8, flags uint8, seq uint32, id uint16, payLen uint16) Spec {
	s := Spec{
		V6: mode&1 != 0, UDP: mode&2 != 0, VLAN: mode&4 != 0, QinQ: mode&8 != 0,
		TCPOpts: mode&32 != 0, Flags: flags, Seq: seq, ID: id,
	}
	s.IPOpts = !s.V6 && mode&16 != 0
	s.Ext = s.V6 && mode&16 != 0
	if s.UDP {
		s.TCPOpts = false
	}
	maxPay := 65535 - (s.HdrLen() - s.L3())
	if s.V6 {
		maxPay += 40
	}
	s.Payload = Pattern(int(payLen)%(maxPay+1), byte(seq))
	return s
}

// Pattern is n bytes of a xorshift sequence seeded by seed: a payload
// whose bytes differ from frame to frame and place to place.
func Pattern(n int, seed byte) []byte {
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
