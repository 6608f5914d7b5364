package vnethdr

import "encoding/binary"

// udpMaxSegments is UDP_MAX_SEGMENTS (include/linux/udp.h): the kernel
// refuses USO frames that would make more segments than this
// (include/linux/virtio_net.h: virtio_net_hdr_to_skb).
const udpMaxSegments = 128

// gsoSizeByFrags is GSO_BY_FRAGS (include/linux/netdevice.h), an internal
// marker the kernel refuses from virtio headers.
const gsoSizeByFrags = 0xffff

// Fixup validates h against frame (an Ethernet frame without the vnet
// header) and rewrites h so the kernel can be given both: the header comes
// from another kernel or a guest and is not trusted (include/linux/virtio_net.h:
// virtio_net_hdr_to_skb is the check the receiving side does; Fixup is at
// least as strict, so a frame it accepts is not dropped there).
//
//   - Unknown flag bits are cleared.
//   - Plain frames (no GSO, no FlagNeedsCsum) are not parsed; HdrLen,
//     GSOSize, CsumStart and CsumOffset become 0.
//   - FlagNeedsCsum frames: csum_start must be past the Ethernet header and
//     csum_start+csum_offset+2 within the frame and the IP packet. HdrLen
//     becomes the end of the L4 header when csum_start is where the TCP/UDP
//     header is, else csum_start+csum_offset+2 (a checksum the kernel may
//     offload for a tunnel's inner header).
//   - GSO frames: the type must be TCPv4, TCPv6 or UDP_L4 (ErrGSOType; UFO
//     and ECN on UDP_L4 too) and match the IP version and L4 protocol,
//     gso_size must be 1..0xfffe (ErrGSOSize), the frame must not be an IP
//     fragment, the IP length must end exactly at the end of the frame, and
//     with FlagNeedsCsum csum_start must be the L4 header (ErrMalformed) and
//     csum_offset its check field (ErrCsumBounds). HdrLen becomes the offset
//     of the L4 payload.
//   - A GSO frame without FlagNeedsCsum (what a packet socket hands out for
//     a GRO'd frame from a real NIC: CHECKSUM_UNNECESSARY, FlagDataValid) is
//     turned into the FlagNeedsCsum form, as the kernel's GSO would
//     (net/ipv4/tcp_offload.c: tcp4_gso_segment sets up the pseudo-header
//     when ip_summed is not CHECKSUM_PARTIAL): Fixup writes the pseudo-header
//     sum into the check field (and the length into a UDP header) and points
//     csum_start/csum_offset at it. This is the only case where Fixup
//     writes to frame; virtio_net_hdr_to_skb refuses USO without it.
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
	l, err := checkGSO(h, frame)
	if err != nil {
		return err
	}
	if h.GSOType == GSOUDPL4 {
		if pay := len(frame) - l.payload; pay > int(h.GSOSize)*udpMaxSegments {
			return ErrGSOSize
		}
	}
	if l.payload > 0xffff { // IPv6 extension headers filling a 64 KiB packet
		return ErrMalformed
	}
	if h.Flags&FlagNeedsCsum == 0 {
		if err := partialize(h, frame, &l); err != nil {
			return err
		}
	}
	h.HdrLen = uint16(l.payload)
	return nil
}

// fixupCsum checks a non-GSO FlagNeedsCsum header and sets HdrLen.
func fixupCsum(h *Hdr, frame []byte) error {
	start := int(h.CsumStart)
	need := start + int(h.CsumOffset) + 2
	if start < ethHdrLen || need > len(frame) || need > 0xffff {
		return ErrCsumBounds
	}
	l, err := parse(frame)
	switch err {
	case nil:
		if need > l.end {
			return ErrCsumBounds
		}
		if l.l4 == start && l.payload > need && l.payload <= 0xffff {
			need = l.payload
		}
	case errNotIP:
	default:
		return err
	}
	h.HdrLen = uint16(need)
	return nil
}

// checkGSO is the read-only part of validating a GSO frame, shared by Fixup
// and Segment.
func checkGSO(h *Hdr, frame []byte) (layout, error) {
	var l layout
	switch h.GSOType &^ GSOECN {
	case GSOTCPv4, GSOTCPv6:
	case GSOUDPL4:
		if h.GSOType&GSOECN != 0 {
			return l, ErrGSOType
		}
	default: // GSONone with only ECN, UFO, unknown
		return l, ErrGSOType
	}
	if h.GSOSize == 0 || h.GSOSize == gsoSizeByFrags {
		return l, ErrGSOSize
	}
	l, err := parse(frame)
	switch {
	case err == errNotIP:
		return l, ErrGSOType
	case err != nil:
		return l, err
	case l.frag:
		return l, ErrMalformed
	case l.end != len(frame):
		// A super-frame is never padded: the IP length is the frame length.
		return l, ErrMalformed
	}
	var ok bool
	switch h.GSOType &^ GSOECN {
	case GSOTCPv4:
		ok = !l.ipv6 && l.proto == protoTCP
	case GSOTCPv6:
		ok = l.ipv6 && l.proto == protoTCP
	case GSOUDPL4:
		ok = l.proto == protoUDP
	}
	if !ok {
		return l, ErrGSOType
	}
	if l.rh != 0 {
		// Segment needs the pseudo-header's final destination; a routing
		// header that hides it (RPL, unknown types with segments left)
		// cannot be segmented, so it is not accepted either.
		if _, ok := addrSum(frame, &l); !ok {
			return l, ErrMalformed
		}
	}
	if h.Flags&FlagNeedsCsum != 0 {
		start := int(h.CsumStart)
		if start+int(h.CsumOffset)+2 > len(frame) {
			return l, ErrCsumBounds
		}
		if start != l.l4 {
			return l, ErrMalformed
		}
		if int(h.CsumOffset) != l4CsumOff(l.proto) {
			return l, ErrCsumBounds
		}
	}
	return l, nil
}

func l4CsumOff(proto uint8) int {
	if proto == protoTCP {
		return tcpCsumOff
	}
	return udpCsumOff
}

// partialize puts a GSO frame into CHECKSUM_PARTIAL form: the check field
// holds the folded pseudo-header sum over the whole L4 length, as
// net/ipv4/tcp_ipv4.c: __tcp_v4_send_check and net/ipv4/udp.c: udp_send_skb
// leave it; GSO later adjusts it per segment.
func partialize(h *Hdr, frame []byte, l *layout) error {
	acc, ok := addrSum(frame, l)
	if !ok {
		return ErrMalformed
	}
	l4Len := l.end - l.l4
	if l.proto == protoUDP {
		binary.BigEndian.PutUint16(frame[l.l4+4:], uint16(l4Len))
	}
	off := l4CsumOff(l.proto)
	binary.BigEndian.PutUint16(frame[l.l4+off:], fold(acc+uint64(l.proto)+uint64(l4Len)))
	h.Flags = FlagNeedsCsum
	h.CsumStart, h.CsumOffset = uint16(l.l4), uint16(off)
	return nil
}
