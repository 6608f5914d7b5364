package offload

import (
	"encoding/binary"
	"errors"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// Tunnel GSO frames. The kernel's GRO also merges the TCP segments (and UDP
// datagrams) of a flow inside a tunnel: IP-in-IP, GRE, and UDP tunnels
// with a socket on the receiving host, as a VXLAN device has on its port
// (net/ipv4/udp_offload.c: udp_gro_receive, net/ipv4/gre_offload.c:
// gre_gro_receive, net/ipv4/af_inet.c: ipip_gro_receive). The merged skb's
// gso_type then has SKB_GSO_UDP_TUNNEL[_CSUM], SKB_GSO_GRE or
// SKB_GSO_IPXIP4/6 beside TCPV4, TCPV6 or UDP_L4, which the legacy
// virtio_net_hdr cannot express: a packet socket reports the inner type
// alone (include/linux/virtio_net.h: virtio_net_hdr_from_skb), with
// csum_start at the inner transport header when the checksum is partial.
// Written to a TAP as it is, the frame would pass for a TCP or UDP
// super-frame whose outer header is not TCP or UDP; vnethdr.Fixup refuses
// it.
// SegmentTunnel cuts it back into the packets it was made of, as the
// kernel does before a device without tunnel offloads
// (net/ipv4/udp_offload.c: skb_udp_tunnel_segment, gre_gso_segment,
// inet_gso_segment).

// ErrNotTunnel: SegmentTunnel found no tunnel it can segment in the frame.
var ErrNotTunnel = errors.New("not a GSO frame inside a tunnel")

const (
	protoIPIP = 4  // IPv4 in IP
	protoIPv6 = 41 // IPv6 in IP
	protoGRE  = 47
	// greCsum is the C bit in the first byte of a GRE header (RFC 2784):
	// a GRE checksum, which segmenting would have to redo; not supported.
	greCsum = 0x80

	// maxTunnelHdr bounds how far past the outer transport header the
	// inner IP header may start: a Geneve header with the most options
	// (8 + 252 bytes) and an inner Ethernet header with two VLAN tags.
	maxTunnelHdr = 8 + 252 + 14 + 8
)

// tunnel is where the headers of a tunnel GSO frame are.
type tunnel struct {
	outer vnethdr.Layout // the outer IP header
	udp   int            // the outer UDP header; 0 for IP-in-IP and GRE
	inner vnethdr.Layout // the inner IP and TCP or UDP headers
}

// parseTunnel finds the outer and inner headers of a GSO frame h describes
// whose TCP or UDP segments are inside a tunnel, and checks h against the
// inner headers as vnethdr.CheckGSO does for a plain frame.
func parseTunnel(h *vnethdr.Hdr, frame []byte) (tunnel, error) {
	var tn tunnel
	gso := h.GSOType &^ vnethdr.GSOECN
	switch {
	case gso != vnethdr.GSOTCPv4 && gso != vnethdr.GSOTCPv6 && gso != vnethdr.GSOUDPL4, gso == vnethdr.GSOUDPL4 && h.GSOType&vnethdr.GSOECN != 0:
		return tn, ErrNotTunnel
	}
	outer, err := vnethdr.Parse(frame)
	if err != nil || outer.Frag || outer.End != len(frame) || outer.Proto == protoTCP {
		return tn, ErrNotTunnel
	}
	tn.outer = outer
	start, ok := tunnelPayload(frame, &tn)
	if !ok {
		return tn, ErrNotTunnel
	}
	if tn.inner, ok = findInner(h, frame, start); !ok {
		return tn, ErrNotTunnel
	}
	in := &tn.inner
	tcp := gso != vnethdr.GSOUDPL4
	switch {
	case tcp && in.Proto != protoTCP, !tcp && in.Proto != protoUDP,
		gso == vnethdr.GSOTCPv4 && in.IPv6, gso == vnethdr.GSOTCPv6 && !in.IPv6:
		return tn, ErrNotTunnel
	case h.GSOSize == 0 || h.GSOSize == gsoSizeByFrags || (tcp && h.GSOSize < vnethdr.TCPMinMSS):
		return tn, vnethdr.ErrGSOSize
	case h.Flags&vnethdr.FlagNeedsCsum != 0 && int(h.CsumOffset) != in.CsumOffset():
		return tn, vnethdr.ErrCsumBounds
	}
	return tn, nil
}

// tunnelPayload returns where the tunnel's payload starts: after the outer
// UDP header (tn.udp is set), the GRE header, or the outer IP header for
// IP-in-IP.
func tunnelPayload(frame []byte, tn *tunnel) (int, bool) {
	o := &tn.outer
	if o.Proto == protoUDP {
		// A super-frame's UDP length runs to its end
		// (net/ipv4/udp_offload.c: udp_gro_complete).
		if int(binary.BigEndian.Uint16(frame[o.L4+4:])) != len(frame)-o.L4 {
			return 0, false
		}
		tn.udp = o.L4
		return o.Payload, true
	}
	// Parse reached no transport header: IP-in-IP or GRE. Extension
	// headers in an outer IPv6 header are not looked through.
	var proto uint8
	var off int
	if o.IPv6 {
		proto, off = frame[o.L3+6], o.L3+ipv6HdrLen
	} else {
		proto, off = frame[o.L3+9], o.L3+int(frame[o.L3]&0x0f)*4
	}
	switch proto {
	case protoIPIP, protoIPv6:
		return off, true
	case protoGRE:
		if off+4 > len(frame) || frame[off]&greCsum != 0 {
			return 0, false
		}
		return off + 4, true
	}
	return 0, false
}

// findInner finds the inner IP header at or after start: the first offset
// within maxTunnelHdr where an IPv4 header with a valid checksum, or an
// IPv6 header without extension headers, carries TCP or UDP and runs to
// the end of the frame, as GRO leaves the inner header of a super-frame
// (inet_gro_complete, ipv6_gro_complete). Anything between start and it
// (a VXLAN or Geneve header and an inner Ethernet header, GRE's key and
// sequence number) is copied into every segment as it is. With
// FlagNeedsCsum its transport header must be at csum_start.
func findInner(h *vnethdr.Hdr, frame []byte, start int) (vnethdr.Layout, bool) {
	end := min(start+maxTunnelHdr, len(frame)-ipv4MinLen)
	for off := start; off <= end; off++ {
		l, ok := innerAt(frame, off)
		if ok && (h.Flags&vnethdr.FlagNeedsCsum == 0 || int(h.CsumStart) == l.L4) {
			return l, true
		}
	}
	return vnethdr.Layout{}, false
}

// innerAt reports whether an inner IP header whose packet ends where the
// frame ends, and carries TCP or UDP, starts at off, and parses it. An
// IPv4 header's checksum must verify.
func innerAt(frame []byte, off int) (vnethdr.Layout, bool) {
	if frame[off]>>4 == 4 {
		ihl := int(frame[off]&0x0f) * 4
		if ihl < ipv4MinLen || off+ihl > len(frame) || vnethdr.Fold(vnethdr.Sum(frame[off:off+ihl], 0)) != 0xffff {
			return vnethdr.Layout{}, false
		}
	}
	l, err := vnethdr.ParseIP(frame, off)
	return l, err == nil && !l.Frag && l.L4 != 0 && l.End == len(frame)
}

// CheckTunnel returns nil when SegmentTunnel can split the frame h
// describes, else what SegmentTunnel would return (before its output
// buffers are looked at). It reads only.
func CheckTunnel(h vnethdr.Hdr, frame []byte) error {
	_, err := parseTunnel(&h, frame)
	return err
}

// SegmentTunnel splits a GSO frame whose TCP segments or UDP datagrams are
// inside a tunnel (see above) into the frames it was made of, each with
// every header of the input and finished checksums, for any TAP. The
// inner headers get what Segment gives a plain frame (IPv4 total length,
// ID + i and header checksum, IPv6 payload length, TCP sequence number and
// flags, UDP length, L4 checksum from scratch); the outer IP header its
// length (and ID + i and checksum); an outer UDP header its length, and a
// checksum over the whole segment when the input's was not 0. Bytes
// between the outer and inner headers are copied as they are.
//
// ErrNotTunnel when h or frame is not such a frame (a plain super-frame is
// Segment's; anything else is no GSO frame the kernel makes),
// vnethdr.ErrGSOSize and vnethdr.ErrCsumBounds as vnethdr.CheckGSO,
// ErrTooManySegments and ErrSegmentTooBig as Segment, all before anything
// is written. frame is only read;
// SegmentTunnel does not allocate.
func SegmentTunnel(h vnethdr.Hdr, frame []byte, out [][]byte, sizes []int) (int, error) {
	tn, err := parseTunnel(&h, frame)
	if err != nil {
		return 0, err
	}
	in := &tn.inner
	innerAddrs, ok1 := in.AddrSum(frame)
	outerAddrs, ok2 := tn.outer.AddrSum(frame)
	if !ok1 || !ok2 {
		return 0, ErrNotTunnel
	}
	hdrLen, mss := in.Payload, int(h.GSOSize)
	n, err := countSegments(hdrLen, mss, len(frame)-hdrLen, out, sizes)
	if err != nil {
		return 0, err
	}
	udpCsum := tn.udp != 0 && binary.BigEndian.Uint16(frame[tn.udp+udpCsumOff:]) != 0
	for i := 0; i < n; i++ {
		o := out[i]
		size := copySegment(o, frame, hdrLen, mss, i)
		fixIP(o, frame, &tn.outer, size, i)
		fixIP(o, frame, in, size, i)
		fixL4(o, frame, in, size, i, n, mss, innerAddrs)
		if tn.udp != 0 {
			u := tn.udp
			binary.BigEndian.PutUint16(o[u+4:], uint16(size-u))
			o[u+udpCsumOff], o[u+udpCsumOff+1] = 0, 0
			if udpCsum {
				acc := vnethdr.Sum(o[u:size], outerAddrs+protoUDP+uint64(size-u))
				binary.BigEndian.PutUint16(o[u+udpCsumOff:], vnethdr.Checksum(acc))
			}
		}
		sizes[i] = size
	}
	return n, nil
}
