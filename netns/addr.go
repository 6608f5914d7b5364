package netns

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Addrs lists the addresses of the link with index (RTM_GETADDR), IPv4
// and IPv6, link-local ones included.
func (n *NS) Addrs(index int) ([]netip.Prefix, error) {
	msgs, err := n.execute(unix.RTM_GETADDR, netlink.Request|netlink.Dump, make([]byte, unix.SizeofIfAddrmsg), nil)
	if err != nil {
		return nil, n.opErr(fmt.Sprintf("list addresses of link %d", index), err)
	}
	var out []netip.Prefix
	for _, m := range msgs {
		b := m.Data
		if m.Header.Type != unix.RTM_NEWADDR || len(b) < unix.SizeofIfAddrmsg || int(binary.NativeEndian.Uint32(b[4:])) != index {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(b[unix.SizeofIfAddrmsg:])
		if err != nil {
			return nil, fmt.Errorf("list the addresses of link %d in %s: %w", index, n, err)
		}
		// IFA_LOCAL is the interface's own address; IFA_ADDRESS is the
		// peer's on a point-to-point link, and the same otherwise.
		var local, addr netip.Addr
		for ad.Next() {
			switch ad.Type() {
			case unix.IFA_LOCAL:
				local, _ = netip.AddrFromSlice(ad.Bytes())
			case unix.IFA_ADDRESS:
				addr, _ = netip.AddrFromSlice(ad.Bytes())
			}
		}
		if local.IsValid() {
			addr = local
		}
		if addr.IsValid() {
			out = append(out, netip.PrefixFrom(addr, int(b[1])))
		}
	}
	return out, nil
}

// DelAddr removes p from the link with index (RTM_DELADDR); one that is
// not there is unix.EADDRNOTAVAIL.
func (n *NS) DelAddr(index int, p netip.Prefix) error {
	msg, ae := addrMsg(index, p)
	_, err := n.execute(unix.RTM_DELADDR, netlink.Request|netlink.Acknowledge, msg, ae)
	if err != nil {
		return n.opErr(fmt.Sprintf("remove address %s from link %d", p, index), err)
	}
	return nil
}

// addrMsg is the ifaddrmsg and IFA_LOCAL/IFA_ADDRESS of p on the link with
// index.
func addrMsg(index int, p netip.Prefix) ([]byte, *netlink.AttributeEncoder) {
	fam, ip := unix.AF_INET, p.Addr().AsSlice()
	if p.Addr().Is6() && !p.Addr().Is4In6() {
		fam = unix.AF_INET6
	} else {
		ip = p.Addr().Unmap().AsSlice()
	}
	msg := make([]byte, unix.SizeofIfAddrmsg)
	msg[0] = byte(fam)
	msg[1] = byte(p.Bits())
	binary.NativeEndian.PutUint32(msg[4:], uint32(index))
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(unix.IFA_LOCAL, ip)
	ae.Bytes(unix.IFA_ADDRESS, ip)
	return msg, ae
}
