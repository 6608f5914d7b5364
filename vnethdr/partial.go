package vnethdr

import "encoding/binary"

// RecoverPartial rebuilds the checksum metadata of a frame that lost its
// vnet header on the way: AF_XDP hands userspace the bytes of an skb the
// kernel held CHECKSUM_PARTIAL (a veth peer's stack offloads checksums to
// it, and neither the veth's XDP nor the socket keeps ip_summed), so the
// TCP/UDP check field holds only the folded pseudo-header sum that
// net/ipv4/tcp_ipv4.c: __tcp_v4_send_check and udp4_hwcsum leave there.
//
// When frame's check field holds exactly that sum, RecoverPartial returns a
// FlagNeedsCsum header pointing at it and true. Other frames, fragments
// and non-IP frames give false. frame is only read.
//
// Use it only on frames a stack on this host sent with the checksum left
// to the device (a veth's peer). The bytes do not say whether the field
// is a partial checksum or a wrong one: on a frame from a wire, where
// such a field is simply wrong, the header makes the receiver complete
// the checksum and accept a datagram it would have dropped. (A frame
// whose complete checksum happens to equal the pseudo-header sum is
// completed to the same value, so right checksums stay right.)
func RecoverPartial(frame []byte) (Hdr, bool) {
	l, err := Parse(frame)
	if err != nil || l.L4 == 0 {
		return Hdr{}, false
	}
	acc, ok := l.AddrSum(frame)
	if !ok {
		return Hdr{}, false
	}
	off := l.CsumOffset()
	pseudo := Fold(acc + uint64(l.Proto) + uint64(l.End-l.L4))
	if binary.BigEndian.Uint16(frame[l.L4+off:]) != pseudo {
		return Hdr{}, false
	}
	return Hdr{Flags: FlagNeedsCsum, CsumStart: uint16(l.L4), CsumOffset: uint16(off)}, true
}
