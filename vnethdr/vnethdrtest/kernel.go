package vnethdrtest

// Hdr is struct virtio_net_hdr as include/uapi/linux/virtio_net.h has it,
// field for field what vnethdr.Hdr is, so that either converts to the
// other (vnethdr.Hdr(h), vnethdrtest.Hdr(h)). It is its own type because
// this package does not import vnethdr: vnethdr's own tests use it.
type Hdr struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16
	GSOSize    uint16
	CsumStart  uint16
	CsumOffset uint16
}

// kernelHeadroom is the most headroom a skb built from tapfwd's write has
// when virtio_net_hdr_to_skb sees it: drivers/net/tun.c: tun_build_skb
// reserves NET_SKB_PAD (64) + NET_IP_ALIGN (0 on x86) and, with an XDP
// program on the TAP, XDP_PACKET_HEADROOM (256); tun_alloc_skb reserves 64;
// net/packet/af_packet.c: packet_snd reserves LL_RESERVED_SPACE (16 for
// Ethernet).
const kernelHeadroom = 64 + 256

// KernelRefusal says why the kernel would refuse the vnet header h in front
// of a frame of frameLen bytes that tapfwd writes into a TAP or sends on a
// packet socket, or "" if both would take it. It is written from the
// kernel's code, not from vnethdr.Fixup's:
//
//   - drivers/net/tun_vnet.h: tun_vnet_hdr_get and net/packet/af_packet.c:
//     __packet_snd_vnet_parse: with NEEDS_CSUM, hdr_len becomes
//     max(csum_start + csum_offset + 2, hdr_len) as a u16, and must not
//     exceed the frame;
//   - drivers/net/tun.c: tun_get_user (IFF_TAP): the frame has an Ethernet
//     header, and a nonzero hdr_len covers at least that;
//   - include/linux/virtio_net.h: __virtio_net_hdr_to_skb, called by both
//     with skb->data at the Ethernet header, and net/core/skbuff.c:
//     skb_partial_csum_set, with the largest headroom either side has.
//
// It does not look at the frame's bytes: nor do those functions, on the
// NEEDS_CSUM path. A GSO header without NEEDS_CSUM makes a packet socket run
// the flow dissector over the frame, which this does not model: it counts
// as refused (vnethdr.Fixup never hands one out).
func KernelRefusal(h Hdr, frameLen int) string {
	const (
		gsoTCPv4, gsoTCPv6, gsoUDP, gsoUDPL4, gsoECN = 1, 4, 3, 5, 0x80
		needsCsum                                    = 1
		ethHLen, iphdr, ipv6hdr, tcphdr, udphdr      = 14, 20, 40, 20, 8
		udpMaxSegs, gsoByFrags, u16Max               = 128, 0xffff, 0xffff
		tcpCheck, udpCheck                           = 16, 6
	)
	start, off := int(h.CsumStart), int(h.CsumOffset)

	// tun_vnet_hdr_get, __packet_snd_vnet_parse.
	hdrLen := int(h.HdrLen)
	if h.Flags&needsCsum != 0 {
		hdrLen = max(start+off+2, hdrLen) & 0xffff
	}
	if hdrLen > frameLen {
		return "hdr_len past the frame"
	}
	// tun_get_user.
	if frameLen < ethHLen || (hdrLen != 0 && hdrLen < ethHLen) {
		return "shorter than an Ethernet header"
	}

	// __virtio_net_hdr_to_skb.
	nhMinLen, thlen, gso := iphdr, 0, h.GSOType != 0
	if gso {
		switch h.GSOType &^ gsoECN {
		case gsoTCPv4:
			thlen = tcphdr
		case gsoTCPv6:
			thlen, nhMinLen = tcphdr, ipv6hdr
		case gsoUDP, gsoUDPL4:
			thlen = udphdr
		default:
			return "gso_type"
		}
		if h.GSOSize == 0 {
			return "gso_size 0"
		}
	}
	pOff := 0
	if h.Flags&needsCsum != 0 {
		if start+max(thlen, off+2) > frameLen {
			return "needed past the frame (pskb_may_pull)"
		}
		// skb_partial_csum_set; the checksum field is in the linear
		// part once pskb_may_pull(needed) succeeded.
		if kernelHeadroom+start >= u16Max || start+off+2 > frameLen {
			return "skb_partial_csum_set"
		}
		if start < nhMinLen {
			return "transport offset below nh_min_len"
		}
		pOff = start + thlen
		if pOff > frameLen {
			return "transport header past the frame"
		}
	} else if gso {
		return "GSO without NEEDS_CSUM: the flow dissector, not modelled"
	}
	if !gso {
		return ""
	}
	switch h.GSOType &^ gsoECN {
	case gsoUDPL4:
		switch {
		case h.Flags&needsCsum == 0:
			return "USO without NEEDS_CSUM"
		case off != udpCheck:
			return "USO csum_offset"
		case frameLen-pOff > int(h.GSOSize)*udpMaxSegs:
			return "USO over UDP_MAX_SEGMENTS"
		case h.GSOType&gsoECN != 0:
			return "USO with ECN"
		}
	case gsoTCPv4, gsoTCPv6:
		if h.Flags&needsCsum != 0 && off != tcpCheck {
			return "TCP csum_offset"
		}
	}
	if h.GSOSize == gsoByFrags {
		return "GSO_BY_FRAGS"
	}
	return ""
}
