package vnethdr

import "encoding/binary"

// InsertVLAN puts an 802.1Q tag back into the frame at buf[off:off+n]. A
// packet socket sees frames with the tag already stripped into
// tp_vlan_tci / PACKET_AUXDATA (net/core/dev.c: skb_vlan_untag), and a TAP
// needs it in the frame. The 12 bytes of MAC addresses move 4 bytes towards
// the front, into headroom the caller left (off >= 4, else ErrNoHeadroom),
// and TPID (0x8100 if tpid is 0) and TCI follow them, so nothing after the
// addresses is copied. It returns the new offset, off-4; the frame is n+4
// bytes long.
//
// If h is not nil its offsets move with the frame: CsumStart grows by 4 when
// FlagNeedsCsum is set and HdrLen when it is not 0 (ErrCsumBounds if that
// would overflow 16 bits). A frame shorter than an Ethernet header is
// ErrMalformed; off and n outside buf are ErrShort.
func InsertVLAN(buf []byte, off, n int, tpid, tci uint16, h *Hdr) (int, error) {
	if off < vlanTagLen {
		return off, ErrNoHeadroom
	}
	if n < 0 || off > len(buf) || n > len(buf)-off {
		return off, ErrShort
	}
	if n < ethHdrLen {
		return off, ErrMalformed
	}
	if h != nil {
		if (h.Flags&FlagNeedsCsum != 0 && h.CsumStart > 0xffff-vlanTagLen) || h.HdrLen > 0xffff-vlanTagLen {
			return off, ErrCsumBounds
		}
		if h.Flags&FlagNeedsCsum != 0 {
			h.CsumStart += vlanTagLen
		}
		if h.HdrLen != 0 {
			h.HdrLen += vlanTagLen
		}
	}
	if tpid == 0 {
		tpid = tpid8021Q
	}
	noff := off - vlanTagLen
	copy(buf[noff:noff+12], buf[off:off+12])
	binary.BigEndian.PutUint16(buf[noff+12:], tpid)
	binary.BigEndian.PutUint16(buf[noff+14:], tci)
	return noff, nil
}
