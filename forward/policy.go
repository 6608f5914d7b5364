package forward

import "encoding/binary"

// L2Policy says which frames from the TAP side (the lab, guests on VM
// ports) may go onto the wire besides their addresses. The zero value
// lets everything through, as a switch port does.
type L2Policy struct {
	// DenyVLANs drops frames carrying an 802.1Q, 802.1ad or QinQ tag
	// (DropGuestVLAN): a guest cannot put frames onto the wire's VLANs.
	DenyVLANs bool
	// DropControl drops frames to the IEEE 802.1D reserved group
	// addresses 01:80:C2:00:00:00 to 0F (DropL2Control): STP BPDUs,
	// PAUSE, LACP, 802.1X, LLDP, ... which a switch never forwards.
	DropControl bool
	// ControlAllow lets through, with DropControl, the reserved addresses
	// whose last byte's bit is set (bit 0x0e for LLDP, 01:80:C2:00:00:0E).
	ControlAllow uint16
}

// reservedPrefix is the first five bytes of the IEEE 802.1D reserved group
// addresses (01:80:C2:00:00:0X).
var reservedPrefix = [5]byte{0x01, 0x80, 0xc2, 0x00, 0x00}

// refuses says whether frame (at least an Ethernet header) breaks the
// policy, and for what reason.
func (p *L2Policy) refuses(frame []byte) (DropReason, bool) {
	if p.DropControl && [5]byte(frame[:5]) == reservedPrefix && frame[5] <= 0x0f && p.ControlAllow&(1<<frame[5]) == 0 {
		return DropL2Control, true
	}
	if p.DenyVLANs {
		switch binary.BigEndian.Uint16(frame[12:]) {
		case 0x8100, 0x88a8, 0x9100: // 802.1Q, 802.1ad, the old QinQ
			return DropGuestVLAN, true
		}
	}
	return 0, false
}

// untrusted is what a frame from an untrusted writer (the TAP's, a
// guest's) must pass besides its vnet header, one set for the whole
// forwarder: its source address when StrictMAC is set, and the L2 policy.
type untrusted struct {
	strict bool
	tapMAC [6]byte // the address the TAP side's frames must come from
	l2     L2Policy
}

// reasons appends the drop reasons the checks can give to r.
func (u *untrusted) reasons(r []DropReason) []DropReason {
	if u.strict {
		r = append(r, DropSpoofed)
	}
	if u.l2.DenyVLANs {
		r = append(r, DropGuestVLAN)
	}
	if u.l2.DropControl {
		r = append(r, DropL2Control)
	}
	return r
}
