package vnethdr

import (
	"encoding/binary"
)

const (
	ethHdrLen   = 14
	vlanTagLen  = 4
	maxVLANTags = 2 // 802.1ad outer + 802.1Q inner

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	tpid8021Q     = 0x8100
	tpid8021AD    = 0x88a8

	ipv4MinLen = 20
	ipv6HdrLen = 40
	tcpMinLen  = 20
	udpHdrLen  = 8

	protoTCP = 6
	protoUDP = 17

	// csum_offset of the check field (offsetof(struct tcphdr, check),
	// offsetof(struct udphdr, check)), what virtio_net_hdr_to_skb demands
	// for GSO frames.
	tcpCsumOff = 16
	udpCsumOff = 6

	// maxExtHdrs bounds the IPv6 extension header walk; real stacks send
	// one or two.
	maxExtHdrs = 8
)

// Layout is where the headers of an Ethernet frame are, as offsets into
// the frame: what Parse and ParseIP find. Code that GROs or segments
// frames works from it; a Layout built from its fields describes a packet
// without a routing header.
type Layout struct {
	L3      int   // IP header
	L4      int   // TCP/UDP header; 0 if not reached (fragment, other protocol)
	Payload int   // L4 payload (end of all headers); 0 if L4 is 0
	End     int   // end of the IP packet; the frame may be longer (padding)
	rh      int   // IPv6 routing header, 0 if none
	IPv6    bool  // an IPv6 header at L3, else IPv4
	Frag    bool  // IPv4 fragment or IPv6 fragment header: no L4 header to work on
	Proto   uint8 // 6 (TCP) or 17 (UDP) if L4 != 0
}

// L3Offset is where the frame's L3 header starts, past the Ethernet header
// and up to two VLAN tags (802.1ad outer, 802.1Q inner), and the EtherType
// that names it. A third tag is not skipped: etherType is then its TPID. ok
// is false when the frame is too short for the headers it announces. The
// frame is as the wire has it (a tag the kernel stripped into tp_vlan_tci is
// not there until InsertVLAN puts it back).
func L3Offset(frame []byte) (off int, etherType uint16, ok bool) {
	if len(frame) < ethHdrLen {
		return 0, 0, false
	}
	off = 12
	et := binary.BigEndian.Uint16(frame[off:])
	for i := 0; i < maxVLANTags && (et == tpid8021Q || et == tpid8021AD); i++ {
		if len(frame) < off+vlanTagLen+2 {
			return 0, 0, false
		}
		off += vlanTagLen
		et = binary.BigEndian.Uint16(frame[off:])
	}
	return off + 2, et, true
}

// Parse finds the IP and TCP/UDP headers of an Ethernet frame, past up to
// two VLAN tags (L3Offset). IPv4 options and IPv6 hop-by-hop, routing and
// destination options headers are walked. It returns ErrMalformed when the
// IP or L4 headers do not fit the frame or the IP length, and another
// error for EtherTypes other than IPv4 and IPv6. Reaching no L4 header
// (fragments, other protocols) is not an error: L4 stays 0. frame is only
// read.
func Parse(frame []byte) (Layout, error) {
	var l Layout
	l3, et, ok := L3Offset(frame)
	if !ok {
		return l, ErrMalformed
	}
	l.L3 = l3
	switch et {
	case etherTypeIPv4:
		return parseIPv4(frame, l)
	case etherTypeIPv6:
		return parseIPv6(frame, l)
	}
	return l, errNotIP
}

// ParseIP is Parse for an IP header at off, not behind an Ethernet header
// (an inner header in a tunnel): IPv4 or IPv6 by its version field, any
// other version an error (not ErrMalformed), and L3 = off. Its IPv4 header
// checksum is not verified.
func ParseIP(frame []byte, off int) (Layout, error) {
	if off < 0 || off >= len(frame) {
		return Layout{}, ErrMalformed
	}
	l := Layout{L3: off}
	switch frame[off] >> 4 {
	case 4:
		return parseIPv4(frame, l)
	case 6:
		return parseIPv6(frame, l)
	}
	return l, errNotIP
}

func parseIPv4(frame []byte, l Layout) (Layout, error) {
	b := frame[l.L3:]
	if len(b) < ipv4MinLen || b[0]>>4 != 4 {
		return l, ErrMalformed
	}
	ihl := int(b[0]&0x0f) * 4
	tot := int(binary.BigEndian.Uint16(b[2:]))
	// tot_len 0 is BIG TCP (net/ipv4/ip_input.c); a virtio header cannot
	// describe more than 64 KiB anyway, so it is refused with the rest.
	if ihl < ipv4MinLen || tot < ihl || tot > len(b) {
		return l, ErrMalformed
	}
	l.End = l.L3 + tot
	if binary.BigEndian.Uint16(b[6:])&0x3fff != 0 { // MF or fragment offset
		l.Frag = true
		return l, nil
	}
	return parseL4(frame, l, b[9], l.L3+ihl)
}

func parseIPv6(frame []byte, l Layout) (Layout, error) {
	b := frame[l.L3:]
	if len(b) < ipv6HdrLen || b[0]>>4 != 6 {
		return l, ErrMalformed
	}
	plen := int(binary.BigEndian.Uint16(b[4:]))
	// payload_len 0 is a jumbogram (RFC 2675) or BIG TCP, which strips the
	// hop-by-hop jumbo option before packet sockets see it
	// (include/net/ipv6.h: ipv6_hopopt_jumbo_remove): not supported.
	if plen == 0 || ipv6HdrLen+plen > len(b) {
		return l, ErrMalformed
	}
	l.IPv6 = true
	l.End = l.L3 + ipv6HdrLen + plen
	next, off := b[6], l.L3+ipv6HdrLen
	for i := 0; ; i++ {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if i == maxExtHdrs || off+8 > l.End {
				return l, ErrMalformed
			}
			if next == 43 && l.rh == 0 {
				l.rh = off
			}
			next = frame[off]
			off += (int(frame[off+1]) + 1) * 8
			if off > l.End {
				return l, ErrMalformed
			}
		case 44: // fragment header
			l.Frag = true
			return l, nil
		default:
			return parseL4(frame, l, next, off)
		}
	}
}

func parseL4(frame []byte, l Layout, proto uint8, off int) (Layout, error) {
	switch proto {
	case protoTCP:
		if off+tcpMinLen > l.End {
			return l, ErrMalformed
		}
		doff := int(frame[off+12]>>4) * 4
		if doff < tcpMinLen || off+doff > l.End {
			return l, ErrMalformed
		}
		l.Payload = off + doff
	case protoUDP:
		if off+udpHdrLen > l.End {
			return l, ErrMalformed
		}
		l.Payload = off + udpHdrLen
	default:
		return l, nil
	}
	l.L4, l.Proto = off, proto
	return l, nil
}

// ipEnd is where the IP packet in frame ends, or len(frame) when the frame is
// not IP or its length field is not usable. Only the L3 header is read.
func ipEnd(frame []byte) int {
	l3, et, ok := L3Offset(frame)
	if !ok {
		return len(frame)
	}
	b := frame[l3:]
	switch {
	case et == etherTypeIPv4 && len(b) >= ipv4MinLen && b[0]>>4 == 4:
		if tot := int(binary.BigEndian.Uint16(b[2:])); tot >= ipv4MinLen && tot <= len(b) {
			return l3 + tot
		}
	case et == etherTypeIPv6 && len(b) >= ipv6HdrLen && b[0]>>4 == 6:
		if plen := int(binary.BigEndian.Uint16(b[4:])); plen != 0 && ipv6HdrLen+plen <= len(b) {
			return l3 + ipv6HdrLen + plen
		}
	}
	return len(frame)
}

// AddrSum is the one's complement sum (Sum, not folded) of the addresses in
// the pseudo-header of the TCP or UDP header l describes in frame (RFC 793
// section 3.1, RFC 768; RFC 8200 section 8.1 for IPv6); the protocol and
// L4 length are the caller's to add. When an IPv6 routing header still has
// segments left, the pseudo-header carries the final destination, which
// is in the routing header, not in the IPv6 header. ok is false for
// routing header types whose final destination cannot be read (RPL's
// compressed type 3, unknown types).
func (l *Layout) AddrSum(frame []byte) (acc uint64, ok bool) {
	if !l.IPv6 {
		return Sum(frame[l.L3+12:l.L3+20], 0), true
	}
	dst := frame[l.L3+24 : l.L3+40]
	if l.rh != 0 {
		rh := frame[l.rh:]
		extLen, typ, left := int(rh[1]), rh[2], rh[3]
		if left != 0 {
			var at int
			switch {
			case typ == 0 && extLen >= 2: // RFC 2460 type 0: the last address
				at = 8 + (extLen/2-1)*16
			case typ == 2 && extLen == 2: // RFC 6275 type 2: the home address
				at = 8
			case typ == 4 && extLen >= 2: // RFC 8754 SRH: Segment List[0]
				at = 8
			default:
				return 0, false
			}
			dst = rh[at : at+16]
		}
	}
	return Sum(dst, Sum(frame[l.L3+8:l.L3+24], 0)), true
}
