package vnethdr

import "encoding/binary"

// TCP flag bits in byte 13 of the TCP header.
const (
	tcpFIN = 0x01
	tcpPSH = 0x08
	tcpCWR = 0x80
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
// h is validated as by Fixup (its HdrLen and csum fields are checked, not
// used), and a non-GSO h is ErrGSOType. ErrTooManySegments if out or sizes
// has fewer entries than segments, ErrSegmentTooBig if a segment is longer
// than len(out[i]); both are checked before anything is written. frame is
// only read. Segment does not allocate.
func Segment(h Hdr, frame []byte, out [][]byte, sizes []int) (int, error) {
	l, err := checkGSO(&h, frame)
	if err != nil {
		return 0, err
	}
	addrs, ok := addrSum(frame, &l)
	if !ok {
		return 0, ErrMalformed
	}
	hdrLen, mss := l.payload, int(h.GSOSize)
	payload := frame[hdrLen:]
	n := 1
	if len(payload) > mss {
		n = (len(payload) + mss - 1) / mss
	}
	if n > len(out) || n > len(sizes) {
		return 0, ErrTooManySegments
	}
	for i := 0; i < n; i++ {
		if hdrLen+min(mss, len(payload)-i*mss) > len(out[i]) {
			return 0, ErrSegmentTooBig
		}
	}

	var (
		ihl   = int(frame[l.l3]&0x0f) * 4 // IPv4 only
		id    = binary.BigEndian.Uint16(frame[l.l3+4:])
		seq   uint32
		flags byte
	)
	if l.proto == protoTCP {
		seq = binary.BigEndian.Uint32(frame[l.l4+4:])
		flags = frame[l.l4+13]
	}
	csumOff := l.l4 + l4CsumOff(l.proto)
	for i := 0; i < n; i++ {
		seg := payload[i*mss : min((i+1)*mss, len(payload))]
		o := out[i]
		copy(o, frame[:hdrLen])
		copy(o[hdrLen:], seg)
		size := hdrLen + len(seg)

		if l.ipv6 {
			binary.BigEndian.PutUint16(o[l.l3+4:], uint16(size-l.l3-ipv6HdrLen))
		} else {
			binary.BigEndian.PutUint16(o[l.l3+2:], uint16(size-l.l3))
			binary.BigEndian.PutUint16(o[l.l3+4:], id+uint16(i))
			o[l.l3+10], o[l.l3+11] = 0, 0
			binary.BigEndian.PutUint16(o[l.l3+10:], ^fold(sum(o[l.l3:l.l3+ihl], 0)))
		}

		l4Len := size - l.l4
		if l.proto == protoTCP {
			binary.BigEndian.PutUint32(o[l.l4+4:], seq+uint32(i*mss))
			f := flags
			if i > 0 {
				f &^= tcpCWR
			}
			if i < n-1 {
				f &^= tcpFIN | tcpPSH
			}
			o[l.l4+13] = f
		} else {
			binary.BigEndian.PutUint16(o[l.l4+4:], uint16(l4Len))
		}
		o[csumOff], o[csumOff+1] = 0, 0
		acc := sum(o[l.l4:size], addrs+uint64(l.proto)+uint64(l4Len))
		binary.BigEndian.PutUint16(o[csumOff:], csumResult(acc))
		sizes[i] = size
	}
	return n, nil
}
