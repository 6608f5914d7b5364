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
	start, off := int(h.CsumStart), int(h.CsumOffset)

	// tun_vnet_hdr_get, __packet_snd_vnet_parse.
	hdrLen := int(h.HdrLen)
	if h.Flags&kNeedsCsum != 0 {
		hdrLen = max(start+off+2, hdrLen) & 0xffff
	}
	if hdrLen > frameLen {
		return "hdr_len past the frame"
	}
	// tun_get_user.
	if frameLen < kEthHLen || (hdrLen != 0 && hdrLen < kEthHLen) {
		return "shorter than an Ethernet header"
	}

	// __virtio_net_hdr_to_skb.
	gso := h.GSOType != 0
	nhMinLen, thlen, why := gsoTransport(h)
	if why != "" {
		return why
	}
	pOff := 0
	if h.Flags&kNeedsCsum != 0 {
		if start+max(thlen, off+2) > frameLen {
			return "needed past the frame (pskb_may_pull)"
		}
		// skb_partial_csum_set; the checksum field is in the linear
		// part once pskb_may_pull(needed) succeeded.
		if kernelHeadroom+start >= kU16Max || start+off+2 > frameLen {
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
	return gsoRefusal(h, frameLen-pOff)
}

// The kernel's values KernelRefusal reads headers against.
const (
	kGSOTCPv4, kGSOTCPv6, kGSOUDP, kGSOUDPL4, kGSOECN = 1, 4, 3, 5, 0x80
	kNeedsCsum                                        = 1
	kEthHLen, kIPHdr, kIPv6Hdr, kTCPHdr, kUDPHdr      = 14, 20, 40, 20, 8
	kUDPMaxSegs, kGSOByFrags, kU16Max                 = 128, 0xffff, 0xffff
	kTCPCheck, kUDPCheck                              = 16, 6
)

// gsoTransport is what __virtio_net_hdr_to_skb takes from h's GSO type:
// the least network header and the transport header's length (0 without
// GSO), or why it refuses the header.
func gsoTransport(h Hdr) (nhMinLen, thlen int, why string) {
	if h.GSOType == 0 {
		return kIPHdr, 0, ""
	}
	switch h.GSOType &^ kGSOECN {
	case kGSOTCPv4:
		nhMinLen, thlen = kIPHdr, kTCPHdr
	case kGSOTCPv6:
		nhMinLen, thlen = kIPv6Hdr, kTCPHdr
	case kGSOUDP, kGSOUDPL4:
		nhMinLen, thlen = kIPHdr, kUDPHdr
	default:
		return 0, 0, "gso_type"
	}
	if h.GSOSize == 0 {
		return 0, 0, "gso_size 0"
	}
	return nhMinLen, thlen, ""
}

// gsoRefusal is the rest of __virtio_net_hdr_to_skb's checks of a GSO
// header whose checksum and transport header passed: payload is the
// frame's length past the transport header.
func gsoRefusal(h Hdr, payload int) string {
	off := int(h.CsumOffset)
	switch h.GSOType &^ kGSOECN {
	case kGSOUDPL4:
		switch {
		case h.Flags&kNeedsCsum == 0:
			return "USO without NEEDS_CSUM"
		case off != kUDPCheck:
			return "USO csum_offset"
		case payload > int(h.GSOSize)*kUDPMaxSegs:
			return "USO over UDP_MAX_SEGMENTS"
		case h.GSOType&kGSOECN != 0:
			return "USO with ECN"
		}
	case kGSOTCPv4, kGSOTCPv6:
		if h.Flags&kNeedsCsum != 0 && off != kTCPCheck {
			return "TCP csum_offset"
		}
	}
	if h.GSOSize == kGSOByFrags {
		return "GSO_BY_FRAGS"
	}
	return ""
}
