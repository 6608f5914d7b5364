package vnethdrtest

import "net"

// RefSum is RFC 1071 done the slow, obvious way, over the concatenation of
// bs: the folded one's complement sum, 0xffff over data whose checksum
// verifies.
func RefSum(bs ...[]byte) uint16 {
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

// Pseudo is the pseudo-header as bytes (RFC 793, RFC 8200 section 8.1).
func Pseudo(src, dst net.IP, proto byte, l4Len int) []byte {
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
