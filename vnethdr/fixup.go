package vnethdr

import "encoding/binary"

// udpMaxSegments is UDP_MAX_SEGMENTS (include/linux/udp.h): the kernel
// refuses USO frames that would make more segments than this
// (include/linux/virtio_net.h: virtio_net_hdr_to_skb). It bounds what a
// write may carry, not what GRO merges (UDP_GRO_CNT_MAX, 64).
const udpMaxSegments = 128

// gsoSizeByFrags is GSO_BY_FRAGS (include/linux/netdevice.h), an internal
// marker the kernel refuses from virtio headers.
const gsoSizeByFrags = 0xffff

// TCPMinMSS is TCP_MIN_MSS (include/net/tcp.h, "minimal accepted MSS",
// (60+60+8) - (20+20)): Linux refuses a smaller TCP_MAXSEG and its MTU
// probing never goes below it. Fixup (and CheckGSO) refuses TCP GSO frames
// with a smaller gso_size, so GRO must not make them. The kernel takes any
// gso_size from 1 up, so without a floor one write of 65,000 bytes with
// gso_size 1 becomes 65,000 frames on the wire; with it, one write makes
// at most about 745. The price: a peer that
// advertises a smaller MSS can still make Linux send segments down to
// net.ipv4.tcp_min_snd_mss (TCP_MIN_SND_MSS, 48), and such a flow's TSO
// frames are refused here. USO needs no floor: udpMaxSegments bounds it.
const TCPMinMSS = 88

// nhMinLen is the smallest transport offset virtio_net_hdr_to_skb takes
// (include/linux/virtio_net.h: nh_min_len): csum_start, counted from the
// Ethernet header (skb->data when drivers/net/tun.c: tun_get_user and
// net/packet/af_packet.c: packet_snd call it), must be at least
// sizeof(struct iphdr), or sizeof(struct ipv6hdr) for TCPv6 GSO. Fixup's
// GSO rules (csum_start at the parsed L4 header, at least 14+20 or 14+40
// bytes in) imply both; non-GSO frames are checked against nhMinLen.
const nhMinLen = 20

// csumStartMax is the largest csum_start Fixup takes.
// net/core/skbuff.c: skb_partial_csum_set refuses a frame whose headroom +
// csum_start reaches U16_MAX (skb->csum_start is 16 bits, counted from the
// head of the buffer). The headroom is the receiving side's: NET_SKB_PAD
// (64) for a TAP write, plus XDP_PACKET_HEADROOM (256) when the TAP runs
// an XDP program; LL_RESERVED_SPACE of the device for a packet socket.
// 1 KiB covers them all; no real frame has its checksum start that far in.
const csumStartMax = 0xffff - 1 - 1024

// Fixup validates h against frame (an Ethernet frame without the vnet
// header) and rewrites h so the kernel can be given both: the header comes
// from another kernel or a guest and is not trusted. Fixup is at least as
// strict as what the kernel checks when it is handed the result
// (include/linux/virtio_net.h: virtio_net_hdr_to_skb, behind
// drivers/net/tun.c: tun_get_user for a TAP write and
// net/packet/af_packet.c: packet_snd for a packet socket send; and
// net/core/skbuff.c: skb_partial_csum_set), so a frame it accepts is not
// refused there. Any error means: drop the frame.
//
//   - Unknown flag bits are cleared.
//   - Plain frames (no GSO, no FlagNeedsCsum) are not parsed; HdrLen,
//     GSOSize, CsumStart and CsumOffset become 0.
//   - FlagNeedsCsum frames: csum_start must be at least 20 (the kernel's
//     nh_min_len, sizeof(struct iphdr); ErrCsumBounds), at most
//     csumStartMax (skb_partial_csum_set), and csum_start+csum_offset+2
//     within the frame, within 64 KiB and, for IP, within the IP packet
//     (ErrCsumBounds). HdrLen becomes the end of the L4 header when
//     csum_start is where the TCP/UDP header is, else
//     csum_start+csum_offset+2 (a checksum the kernel may offload for a
//     tunnel's inner header).
//   - GSO frames: the type must be TCPv4, TCPv6 or UDP_L4 (ErrGSOType; UFO
//     and ECN on UDP_L4 too) and match the IP version and L4 protocol;
//     gso_size must not be 0 or GSO_BY_FRAGS (0xffff), for TCP not below
//     TCPMinMSS (88), and a USO frame must not make more than
//     UDP_MAX_SEGMENTS (128) segments (ErrGSOSize); the frame must not be
//     an IP fragment, and the IP length must end exactly at the end of the
//     frame (ErrMalformed). With FlagNeedsCsum, csum_start must be the L4
//     header (ErrMalformed; so at least 34, or 54 for IPv6, past the
//     kernel's nh_min_len) and csum_offset its check field (ErrCsumBounds).
//     HdrLen becomes the offset of the L4 payload.
//   - A GSO frame without FlagNeedsCsum (what a packet socket hands out for
//     a GRO'd frame from a real NIC: CHECKSUM_UNNECESSARY, FlagDataValid) is
//     turned into the FlagNeedsCsum form, as the kernel's GSO would
//     (net/ipv4/tcp_offload.c: tcp4_gso_segment sets up the pseudo-header
//     when ip_summed is not CHECKSUM_PARTIAL): Fixup writes the pseudo-header
//     sum into the check field (and the length into a UDP header) and points
//     csum_start/csum_offset at it. This is the only case where Fixup
//     writes to frame; virtio_net_hdr_to_skb refuses USO without it, and so
//     every GSO header Fixup returns goes through the kernel's NEEDS_CSUM
//     branch, whose rules are the ones above.
//
// IPv4 with options and IPv6 with hop-by-hop, routing and destination options
// headers are accepted. On error h may be partly rewritten; drop the frame.
func Fixup(h *Hdr, frame []byte) error {
	if len(frame) < ethHdrLen {
		return ErrMalformed
	}
	h.Flags &= FlagNeedsCsum | FlagDataValid
	if h.GSOType == GSONone {
		h.GSOSize = 0
		if h.Flags&FlagNeedsCsum == 0 {
			h.HdrLen, h.CsumStart, h.CsumOffset = 0, 0, 0
			return nil
		}
		return fixupCsum(h, frame)
	}
	l, err := CheckGSO(h, frame)
	if err != nil {
		return err
	}
	if h.GSOType == GSOUDPL4 {
		if pay := len(frame) - l.Payload; pay > int(h.GSOSize)*udpMaxSegments {
			return ErrGSOSize
		}
	}
	if l.Payload > 0xffff { // IPv6 extension headers filling a 64 KiB packet
		return ErrMalformed
	}
	if h.Flags&FlagNeedsCsum == 0 {
		if err := Partialize(h, frame, &l); err != nil {
			return err
		}
	}
	h.HdrLen = uint16(l.Payload)
	return nil
}

// fixupCsum checks a non-GSO FlagNeedsCsum header and sets HdrLen.
func fixupCsum(h *Hdr, frame []byte) error {
	start := int(h.CsumStart)
	need := start + int(h.CsumOffset) + 2
	if need > len(frame) || need > 0xffff || start > csumStartMax {
		return ErrCsumBounds
	}
	l, err := Parse(frame)
	switch err {
	case nil:
		if need > l.End {
			return ErrCsumBounds
		}
		if l.L4 == start && l.Payload > need && l.Payload <= 0xffff {
			need = l.Payload
		}
	case errNotIP:
	default:
		return err
	}
	// After Parse, so that a frame whose headers do not parse says so.
	if start < nhMinLen {
		return ErrCsumBounds
	}
	h.HdrLen = uint16(need)
	return nil
}

// CheckGSO is the read-only part of Fixup for a GSO header: it validates h
// against frame by Fixup's GSO rules (gso_type against the headers,
// gso_size, no fragment, no padding, a final destination it can read, and
// with FlagNeedsCsum csum_start and csum_offset at the TCP/UDP check field;
// not the UDP_MAX_SEGMENTS bound) and returns where the headers are.
// Neither h nor frame is written. It is what segmenting in userspace checks
// first: a frame it accepts has a Layout with an L4 header and no
// fragment, and AddrSum succeeds on it.
func CheckGSO(h *Hdr, frame []byte) (Layout, error) {
	var l Layout
	switch h.GSOType &^ GSOECN {
	case GSOTCPv4, GSOTCPv6:
	case GSOUDPL4:
		if h.GSOType&GSOECN != 0 {
			return l, ErrGSOType
		}
	default: // GSONone with only ECN, UFO, unknown
		return l, ErrGSOType
	}
	tcp := h.GSOType&^GSOECN != GSOUDPL4
	if h.GSOSize == 0 || h.GSOSize == gsoSizeByFrags || (tcp && h.GSOSize < TCPMinMSS) {
		return l, ErrGSOSize
	}
	l, err := Parse(frame)
	switch {
	case err == errNotIP:
		return l, ErrGSOType
	case err != nil:
		return l, err
	case l.Frag:
		return l, ErrMalformed
	case l.End != len(frame):
		// A super-frame is never padded: the IP length is the frame length.
		return l, ErrMalformed
	}
	var ok bool
	switch h.GSOType &^ GSOECN {
	case GSOTCPv4:
		ok = !l.IPv6 && l.Proto == protoTCP
	case GSOTCPv6:
		ok = l.IPv6 && l.Proto == protoTCP
	case GSOUDPL4:
		ok = l.Proto == protoUDP
	}
	if !ok {
		return l, ErrGSOType
	}
	if l.rh != 0 {
		// Segmenting needs the pseudo-header's final destination; a
		// routing header that hides it (RPL, unknown types with segments
		// left) cannot be segmented, so it is not accepted either.
		if _, ok := l.AddrSum(frame); !ok {
			return l, ErrMalformed
		}
	}
	if h.Flags&FlagNeedsCsum != 0 {
		// virtio_net_hdr_to_skb: needed = start + max(thlen, off + 2)
		// within the frame; the L4 header (thlen) is within it once start
		// is where Parse found that header.
		start := int(h.CsumStart)
		if start+int(h.CsumOffset)+2 > len(frame) {
			return l, ErrCsumBounds
		}
		if start != l.L4 {
			return l, ErrMalformed
		}
		if int(h.CsumOffset) != l.CsumOffset() {
			return l, ErrCsumBounds
		}
	}
	return l, nil
}

// CsumOffset is the offset of the TCP or UDP check field from the L4
// header (offsetof(struct tcphdr, check) or offsetof(struct udphdr,
// check)): the Hdr.CsumOffset that a header for this frame's L4 header has.
func (l *Layout) CsumOffset() int {
	if l.Proto == protoTCP {
		return tcpCsumOff
	}
	return udpCsumOff
}

// Partialize puts the GSO frame l describes into CHECKSUM_PARTIAL form:
// the check field holds the folded pseudo-header sum over the whole L4
// length, as net/ipv4/tcp_ipv4.c: __tcp_v4_send_check and net/ipv4/udp.c:
// udp_send_skb leave it (GSO later adjusts it per segment), a UDP header
// the length of the whole, and h gets FlagNeedsCsum (its only flag) with
// CsumStart and CsumOffset at the check field; its other fields are left.
// ErrMalformed, with nothing written, when AddrSum cannot read the final
// destination.
func Partialize(h *Hdr, frame []byte, l *Layout) error {
	acc, ok := l.AddrSum(frame)
	if !ok {
		return ErrMalformed
	}
	l4Len := l.End - l.L4
	if l.Proto == protoUDP {
		binary.BigEndian.PutUint16(frame[l.L4+4:], uint16(l4Len))
	}
	off := l.CsumOffset()
	binary.BigEndian.PutUint16(frame[l.L4+off:], Fold(acc+uint64(l.Proto)+uint64(l4Len)))
	h.Flags = FlagNeedsCsum
	h.CsumStart, h.CsumOffset = uint16(l.L4), uint16(off)
	return nil
}
