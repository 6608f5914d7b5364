package afxdp

import (
	"bytes"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xa}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xb}
	ipA  = net.IPv4(198, 18, 7, 1).To4()
	ipB  = net.IPv4(198, 18, 7, 2).To4()
)

// frameSpec describes a test frame, built with gopacket with full checksums.
type frameSpec struct {
	tcp     bool
	tags    []uint16 // VLAN tags, outermost first: 2 tags is QinQ (802.1ad outer)
	payload int
	ttl     uint8
}

func buildFrame(tb testing.TB, s frameSpec) []byte {
	tb.Helper()
	et := layers.EthernetTypeIPv4
	var ls []gopacket.SerializableLayer
	for i := len(s.tags) - 1; i >= 0; i-- {
		q := &layers.Dot1Q{VLANIdentifier: s.tags[i] & 0xfff, Priority: uint8(s.tags[i] >> 13), Type: et}
		ls = append([]gopacket.SerializableLayer{q}, ls...)
		et = layers.EthernetTypeDot1Q
		if i == 0 && len(s.tags) == 2 {
			et = layers.EthernetTypeQinQ
		}
	}
	ttl := s.ttl
	if ttl == 0 {
		ttl = 64
	}
	ip := &layers.IPv4{Version: 4, TTL: ttl, SrcIP: ipA, DstIP: ipB, Protocol: layers.IPProtocolUDP}
	var l4 gopacket.SerializableLayer
	if s.tcp {
		ip.Protocol = layers.IPProtocolTCP
		t := &layers.TCP{SrcPort: 40000, DstPort: 80, Seq: 1000, Ack: 77, ACK: true, PSH: true, Window: 512}
		t.SetNetworkLayerForChecksum(ip)
		l4 = t
	} else {
		u := &layers.UDP{SrcPort: 40000, DstPort: 9}
		u.SetNetworkLayerForChecksum(ip)
		l4 = u
	}
	pay := make([]byte, s.payload)
	for i := range pay {
		pay[i] = byte(i*7 + 3)
	}
	ls = append([]gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: et}}, ls...)
	ls = append(ls, ip, l4, gopacket.Payload(pay))
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// withHdr is frame behind vnet header h.
func withHdr(h vnethdr.Hdr, frame []byte) []byte {
	b := make([]byte, vnethdr.Len+len(frame))
	h.Encode(b)
	copy(b[vnethdr.Len:], frame)
	return b
}

// gsoFrame is a TCP super-frame of payload bytes with the vnet header a
// TAP gives it (GSO TCPv4, mss), as forward has checked it (vnethdr.Fixup).
func gsoFrame(tb testing.TB, payload, mss int) []byte {
	tb.Helper()
	f := buildFrame(tb, frameSpec{tcp: true, payload: payload})
	h := vnethdr.Hdr{GSOType: vnethdr.GSOTCPv4, GSOSize: uint16(mss)}
	if err := vnethdr.Fixup(&h, f); err != nil {
		tb.Fatal(err)
	}
	return withHdr(h, f)
}

// checkSegments checks that segs are the TCP segments of the super-frame
// of payload bytes gsoFrame builds, each with verifying checksums.
func checkSegments(tb testing.TB, segs [][]byte, payload, mss int) {
	tb.Helper()
	vnethdrtest.CheckTCPSegments(tb, segs, buildFrame(tb, frameSpec{tcp: true, payload: payload}), mss)
}

// csumOK reports whether frame's TCP/UDP checksum verifies: completing it
// from the pseudo-header changes nothing.
func csumOK(frame []byte) bool {
	h, ok := vnethdr.RecoverPartial(frame)
	if ok {
		return false // the field holds only the pseudo-header sum
	}
	l3, _, _ := vnethdr.L3Offset(frame)
	proto := frame[l3+9]
	l4 := l3 + int(frame[l3]&0xf)*4
	off := 16
	if proto == 17 {
		off = 6
	}
	// Put the pseudo-header sum in the field and complete: a correct
	// checksum comes back unchanged.
	c := bytes.Clone(frame)
	orig := [2]byte{c[l4+off], c[l4+off+1]}
	part := partialSum(c, l3, l4, proto)
	c[l4+off], c[l4+off+1] = byte(part>>8), byte(part)
	h = vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, CsumStart: uint16(l4), CsumOffset: uint16(off)}
	if vnethdr.CompleteChecksum(&h, c) != nil {
		return false
	}
	return c[l4+off] == orig[0] && c[l4+off+1] == orig[1]
}

// partialSum is the folded IPv4 pseudo-header sum of the L4 segment at l4.
func partialSum(f []byte, l3, l4 int, proto byte) uint16 {
	end := l3 + (int(f[l3+2])<<8 | int(f[l3+3]))
	acc := uint32(proto) + uint32(end-l4)
	for i := l3 + 12; i < l3+20; i += 2 {
		acc += uint32(f[i])<<8 | uint32(f[i+1])
	}
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}
