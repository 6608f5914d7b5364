package forward

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
)

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
// guest's, the wire's) must pass besides its vnet header, one set for the
// whole forwarder: its source address, and the L2 policy.
type untrusted struct {
	tap  macs // the sources frames from the TAP may have (Config.StrictMACs); nil: any
	ours macs // the TAP side's addresses and the guests': sources no frame from the wire has
	l2   L2Policy
}

// set takes the policy and the TAP's addresses from c (addGuests adds the
// guests' to ours).
func (u *untrusted) set(c Config) error {
	u.l2 = c.L2
	if c.StrictMACs != nil {
		if err := u.tap.add("strict MAC", c.StrictMACs...); err != nil {
			return err
		}
		if len(u.tap) == 0 {
			return errors.New("no strict MAC: the TAP's frames could have no source")
		}
	}
	u.ours = slices.Clone(u.tap)
	return u.ours.add("TAP address", c.TAPMACs...)
}

// reasons appends the drop reasons the L2 policy can give to r.
func (u *untrusted) reasons(r []DropReason) []DropReason {
	if u.l2.DenyVLANs {
		r = append(r, DropGuestVLAN)
	}
	if u.l2.DropControl {
		r = append(r, DropL2Control)
	}
	return r
}

// macs is a few Ethernet addresses, each as the 48-bit number it spells:
// the TAP side's and the guests', looked up by a scan, which for a handful
// costs less than hashing one.
type macs []uint64

// mac48 is the address at b[:6] as a number.
func mac48(b []byte) uint64 {
	return uint64(binary.BigEndian.Uint16(b))<<32 | uint64(binary.BigEndian.Uint32(b[2:6]))
}

// add adds the addresses in list, each a unicast Ethernet address.
func (m *macs) add(what string, list ...net.HardwareAddr) error {
	for _, a := range list {
		if len(a) != 6 || a[0]&1 != 0 {
			return fmt.Errorf("%s %s is not a unicast Ethernet address", what, a)
		}
		*m = append(*m, mac48(a))
	}
	return nil
}

// has reports whether the address at b[:6] is one of m.
func (m macs) has(b []byte) bool {
	a := mac48(b)
	for _, x := range m {
		if x == a {
			return true
		}
	}
	return false
}
