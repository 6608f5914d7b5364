package offload

import (
	"encoding/binary"
	"errors"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// TCP flag bits in byte 13 of the TCP header.
const (
	tcpFIN = 0x01
	tcpPSH = 0x08
	tcpCWR = 0x80
)

// Header lengths, protocol numbers and field offsets that frames are read
// by (IEEE 802.3, RFC 791, RFC 8200, RFC 768).
const (
	ethHdrLen  = 14 // Ethernet header without VLAN tags
	ipv4MinLen = 20
	ipv6HdrLen = 40
	protoTCP   = 6
	protoUDP   = 17
	udpCsumOff = 6 // offsetof(struct udphdr, check)

	// gsoSizeByFrags is GSO_BY_FRAGS (include/linux/netdevice.h), a
	// gso_size the kernel refuses from virtio headers.
	gsoSizeByFrags = 0xffff
)

// Segment's and SegmentTunnel's own errors, beside vnethdr's: the output
// buffers cannot take the segments. Both are found before anything is
// written.
var (
	// ErrTooManySegments: fewer output buffers than segments.
	ErrTooManySegments = errors.New("GSO: too many segments for output buffers")
	// ErrSegmentTooBig: a segment does not fit its output buffer.
	ErrSegmentTooBig = errors.New("GSO: segment larger than output buffer")
)

// Segment does in userspace what the kernel's GSO does before a device
// without offloads (net/core/gso.c: skb_gso_segment, net/ipv4/tcp_offload.c:
// tcp_gso_segment, net/ipv4/udp_offload.c: __udp_gso_segment,
// net/ipv4/af_inet.c: inet_gso_segment): it splits the GSO super-frame h
// describes into frames of at most h.GSOSize bytes of L4 payload each, for a
// TAP that has no vnet header.
//
// Frame i is written to out[i][:sizes[i]] with all headers of the input
// (Ethernet, VLAN tags, IP with options or extension headers, TCP/UDP) and
// finished checksums; it has no vnet header. IPv4: total length per segment,
// ID incremented per segment, header checksum. IPv6: payload length. TCP:
// sequence number advanced by the payload offset, CWR kept only on the first
// segment, FIN and PSH only on the last. UDP: length per segment. The L4
// checksum is computed from scratch (pseudo-header included), so the frame's
// check field may hold anything, partial or not.
//
// h is validated by vnethdr.CheckGSO, Fixup's GSO rules (its HdrLen and
// csum fields are checked, not used), whose errors Segment returns: a
// non-GSO h is vnethdr.ErrGSOType. ErrTooManySegments if out or sizes
// has fewer entries than segments, ErrSegmentTooBig if a segment is longer
// than len(out[i]); both are checked before anything is written. frame is
// only read. Segment does not allocate.
func Segment(h vnethdr.Hdr, frame []byte, out [][]byte, sizes []int) (int, error) {
	l, err := vnethdr.CheckGSO(&h, frame)
	if err != nil {
		return 0, err
	}
	addrs, ok := l.AddrSum(frame)
	if !ok {
		return 0, vnethdr.ErrMalformed
	}
	hdrLen, mss := l.Payload, int(h.GSOSize)
	n, err := countSegments(hdrLen, mss, len(frame)-hdrLen, out, sizes)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		o := out[i]
		size := copySegment(o, frame, hdrLen, mss, i)
		fixIP(o, frame, &l, size, i)
		fixL4(o, frame, &l, size, i, n, mss, addrs)
		sizes[i] = size
	}
	return n, nil
}

// countSegments is the number of segments a payload of payloadLen bytes
// makes at mss bytes each (at least one), after checking that out and
// sizes have room for them: ErrTooManySegments, or ErrSegmentTooBig when
// a segment with its hdrLen bytes of headers is longer than its out[i].
func countSegments(hdrLen, mss, payloadLen int, out [][]byte, sizes []int) (int, error) {
	n := max(1, (payloadLen+mss-1)/mss)
	if n > len(out) || n > len(sizes) {
		return 0, ErrTooManySegments
	}
	for i := 0; i < n; i++ {
		if hdrLen+min(mss, payloadLen-i*mss) > len(out[i]) {
			return 0, ErrSegmentTooBig
		}
	}
	return n, nil
}

// copySegment writes segment i into o: the hdrLen bytes of frame's headers
// and its share of the payload behind them. It returns its size.
func copySegment(o, frame []byte, hdrLen, mss, i int) int {
	seg := frame[hdrLen+i*mss : min(hdrLen+(i+1)*mss, len(frame))]
	copy(o, frame[:hdrLen])
	return hdrLen + copy(o[hdrLen:], seg)
}

// fixIP sets the length of segment i (size bytes in o) in the IP header l
// describes: the payload length for IPv6; for IPv4 the total length, the
// input's ID + i and the header checksum.
func fixIP(o, frame []byte, l *vnethdr.Layout, size, i int) {
	if l.IPv6 {
		binary.BigEndian.PutUint16(o[l.L3+4:], uint16(size-l.L3-ipv6HdrLen))
		return
	}
	ihl := int(o[l.L3]&0x0f) * 4
	binary.BigEndian.PutUint16(o[l.L3+2:], uint16(size-l.L3))
	binary.BigEndian.PutUint16(o[l.L3+4:], binary.BigEndian.Uint16(frame[l.L3+4:])+uint16(i))
	o[l.L3+10], o[l.L3+11] = 0, 0
	binary.BigEndian.PutUint16(o[l.L3+10:], ^vnethdr.Fold(vnethdr.Sum(o[l.L3:l.L3+ihl], 0)))
}

// fixL4 finishes the TCP or UDP header of segment i of n (size bytes in o,
// mss of payload each but the last): TCP sequence number and flags (CWR on
// the first, FIN and PSH on the last), UDP length, and the checksum from
// scratch with the pseudo-header sum addrs.
func fixL4(o, frame []byte, l *vnethdr.Layout, size, i, n, mss int, addrs uint64) {
	l4Len := size - l.L4
	if l.Proto == protoTCP {
		binary.BigEndian.PutUint32(o[l.L4+4:], binary.BigEndian.Uint32(frame[l.L4+4:])+uint32(i*mss))
		f := frame[l.L4+13]
		if i > 0 {
			f &^= tcpCWR
		}
		if i < n-1 {
			f &^= tcpFIN | tcpPSH
		}
		o[l.L4+13] = f
	} else {
		binary.BigEndian.PutUint16(o[l.L4+4:], uint16(l4Len))
	}
	off := l.L4 + l.CsumOffset()
	o[off], o[off+1] = 0, 0
	acc := vnethdr.Sum(o[l.L4:size], addrs+uint64(l.Proto)+uint64(l4Len))
	binary.BigEndian.PutUint16(o[off:], vnethdr.Checksum(acc))
}
