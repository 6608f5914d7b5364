package testbed

import "encoding/binary"

// EchoRequest builds an ICMPv4 echo request (RFC 792) with identifier id
// and sequence number seq, and 16 bytes of data.
func EchoRequest(id, seq uint16) []byte {
	m := make([]byte, 8, 8+16)
	m[0] = 8 // echo request
	binary.BigEndian.PutUint16(m[4:], id)
	binary.BigEndian.PutUint16(m[6:], seq)
	m = append(m, "tapfwd testbed.."...)
	binary.BigEndian.PutUint16(m[2:], Checksum(m))
	return m
}

// EchoReply parses p, an ICMPv4 message possibly preceded by its IPv4
// header (a raw socket may hand both): ok says whether it is an echo
// reply, id and seq are its identifier and sequence number.
func EchoReply(p []byte) (id, seq uint16, ok bool) {
	if len(p) >= 20 && p[0]>>4 == 4 {
		p = p[int(p[0]&0x0f)*4:]
	}
	if len(p) < 8 || p[0] != 0 || p[1] != 0 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint16(p[4:]), binary.BigEndian.Uint16(p[6:]), true
}

// Checksum is the Internet checksum of p (RFC 1071): the complement of its
// ones' complement sum, what the check field of an IPv4, ICMP, UDP or TCP
// header holds. Summed over data that includes a correct check field, it
// is 0.
func Checksum(p []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(p); i += 2 {
		s += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	if len(p)%2 == 1 {
		s += uint32(p[len(p)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
