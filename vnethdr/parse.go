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

// layout is where the headers of a frame are, as offsets into the frame.
type layout struct {
	l3      int // IP header
	l4      int // TCP/UDP header; 0 if not reached (fragment, other protocol)
	payload int // L4 payload (end of all headers); 0 if l4 is 0
	end     int // end of the IP packet; the frame may be longer (padding)
	rh      int // IPv6 routing header, 0 if none
	ipv6    bool
	frag    bool  // IPv4 fragment or IPv6 fragment header: no L4 header to work on
	proto   uint8 // protoTCP or protoUDP if l4 != 0
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

// parse finds the IP and TCP/UDP headers of an Ethernet frame. It returns
// errNotIP for other EtherTypes and ErrMalformed when the IP or L4 headers do
// not fit the frame or the IP length. Reaching no L4 header (fragments,
// other protocols) is not an error: l4 stays 0.
func parse(frame []byte) (layout, error) {
	var l layout
	l3, et, ok := L3Offset(frame)
	if !ok {
		return l, ErrMalformed
	}
	l.l3 = l3
	switch et {
	case etherTypeIPv4:
		return parseIPv4(frame, l)
	case etherTypeIPv6:
		return parseIPv6(frame, l)
	}
	return l, errNotIP
}

func parseIPv4(frame []byte, l layout) (layout, error) {
	b := frame[l.l3:]
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
	l.end = l.l3 + tot
	if binary.BigEndian.Uint16(b[6:])&0x3fff != 0 { // MF or fragment offset
		l.frag = true
		return l, nil
	}
	return parseL4(frame, l, b[9], l.l3+ihl)
}

func parseIPv6(frame []byte, l layout) (layout, error) {
	b := frame[l.l3:]
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
	l.ipv6 = true
	l.end = l.l3 + ipv6HdrLen + plen
	next, off := b[6], l.l3+ipv6HdrLen
	for i := 0; ; i++ {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if i == maxExtHdrs || off+8 > l.end {
				return l, ErrMalformed
			}
			if next == 43 && l.rh == 0 {
				l.rh = off
			}
			next = frame[off]
			off += (int(frame[off+1]) + 1) * 8
			if off > l.end {
				return l, ErrMalformed
			}
		case 44: // fragment header
			l.frag = true
			return l, nil
		default:
			return parseL4(frame, l, next, off)
		}
	}
}

func parseL4(frame []byte, l layout, proto uint8, off int) (layout, error) {
	switch proto {
	case protoTCP:
		if off+tcpMinLen > l.end {
			return l, ErrMalformed
		}
		doff := int(frame[off+12]>>4) * 4
		if doff < tcpMinLen || off+doff > l.end {
			return l, ErrMalformed
		}
		l.payload = off + doff
	case protoUDP:
		if off+udpHdrLen > l.end {
			return l, ErrMalformed
		}
		l.payload = off + udpHdrLen
	default:
		return l, nil
	}
	l.l4, l.proto = off, proto
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

// addrSum is the one's complement sum of the pseudo-header addresses (RFC 793
// section 3.1, RFC 768; RFC 8200 section 8.1 for IPv6). When an IPv6 routing
// header still has segments left, the pseudo-header carries the final
// destination, which is in the routing header, not in the IPv6 header. ok is
// false for routing header types whose final destination cannot be read
// (RPL's compressed type 3, unknown types).
func addrSum(frame []byte, l *layout) (acc uint64, ok bool) {
	if !l.ipv6 {
		return sum(frame[l.l3+12:l.l3+20], 0), true
	}
	dst := frame[l.l3+24 : l.l3+40]
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
	return sum(dst, sum(frame[l.l3+8:l.l3+24], 0)), true
}
