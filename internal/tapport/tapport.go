package tapport

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
)

// Messages here name no package: the TAP, port and namespace they name say
// where, and the caller adds what it was doing.

// Open checks what a port on TAP tap with MAC mac (nil: one picked) needs
// before the kernel is asked, and opens namespace ns, the TAP's, for it;
// the caller closes it.
func Open(tap string, mac net.HardwareAddr, ns string) (*netns.NS, error) {
	if tap == "" {
		return nil, errors.New("no TAP given")
	}
	if err := CheckMAC(mac); err != nil {
		return nil, err
	}
	return netns.Open(ns)
}

// CheckMAC refuses a MAC given (not nil) that is no unicast Ethernet
// address.
func CheckMAC(mac net.HardwareAddr) error {
	if mac != nil && (len(mac) != 6 || mac[0]&1 != 0 || string(mac) == "\x00\x00\x00\x00\x00\x00") {
		return fmt.Errorf("MAC %s is not a unicast Ethernet address (want six bytes, first byte even, e.g. 02:00:00:00:00:01)", mac)
	}
	return nil
}

// FindTAP returns the TAP named name in links, the links of h: ErrNoTAP
// when there is none, ErrNotTAP when the name is another kind of device.
func FindTAP(h *netns.NS, links []netns.Link, name string) (*netns.Link, error) {
	l := netns.LinkNamed(links, name)
	if l == nil {
		return nil, Errorf(ErrNoTAP, h, name, "no TAP %q in %s", name, h)
	}
	if !l.IsTAP() {
		return nil, Errorf(ErrNotTAP, h, name, "%q in %s is a %s device, not a TAP", name, h, l.KindName())
	}
	return l, nil
}

// PickMAC returns mac for a new port in h, or a free random one when mac is
// nil; a link in links (h's) with mac is ErrMACInUse.
func PickMAC(h *netns.NS, links []netns.Link, mac net.HardwareAddr) (net.HardwareAddr, error) {
	if mac == nil {
		return freeMAC(links)
	}
	if l := netns.LinkWithMAC(links, mac); l != nil {
		return nil, Errorf(ErrMACInUse, h, mac.String(), "MAC %s is in use by %s in %s", mac, l.Name, h)
	}
	return mac, nil
}

// freeMAC is a random locally administered unicast MAC no link has.
func freeMAC(links []netns.Link) (net.HardwareAddr, error) {
	for {
		m := make(net.HardwareAddr, 6)
		if _, err := rand.Read(m); err != nil {
			return nil, err
		}
		m[0] = m[0]&^1 | 2 // unicast, locally administered
		if netns.LinkWithMAC(links, m) == nil {
			return m, nil
		}
	}
}

// CreateErr says why creating port name, a link of type kind (macvtap or
// macvlan) on TAP tapName, failed with err; missing is the kind of error
// for a kernel without that link type.
func CreateErr(h *netns.NS, kind string, missing error, name, tapName string, err error) error {
	e := &Error{Netns: h.Name(), Name: name, err: err}
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		// net/core/rtnetlink.c: rtnl_newlink answers EOPNOTSUPP ("Unknown
		// device type") when no such link type is registered, even after
		// trying to load the module.
		e.Kind = missing
		e.msg = fmt.Sprintf("create %s %s on %s: this kernel has no %s (CONFIG_%s): load the module with modprobe %s",
			kind, name, tapName, kind, strings.ToUpper(kind), kind)
	case errors.Is(err, unix.EEXIST):
		e.Kind, e.err = ErrNameInUse, nil
		e.msg = fmt.Sprintf("create %s %s: an interface of that name exists in %s", kind, name, h)
	case errors.Is(err, unix.EADDRINUSE), errors.Is(err, unix.EADDRNOTAVAIL):
		e.Kind, e.err = ErrMACInUse, nil
		e.msg = fmt.Sprintf("create %s %s: its MAC is in use on TAP %s", kind, name, tapName)
	case errors.Is(err, unix.EPERM) && !errors.Is(err, netns.ErrNotPermitted):
		return fmt.Errorf("create %s %s: %w: %w", kind, name, err, netns.ErrNotPermitted)
	default:
		return fmt.Errorf("create %s %s on %s: %w", kind, name, tapName, err)
	}
	return e
}

// SetUp brings port name (ifindex index, address mac) on TAP tapName up.
// drivers/net/macvlan.c: macvlan_open refuses an address that the lower
// device or another port on it has: ErrMACInUse.
func SetUp(h *netns.NS, index int, name string, mac net.HardwareAddr, tapName string) error {
	err := h.SetLink(index, netns.LinkChange{Up: true})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EADDRINUSE), errors.Is(err, unix.EADDRNOTAVAIL):
		return Errorf(ErrMACInUse, h, mac.String(), "MAC %s is in use on TAP %s", mac, tapName)
	}
	return fmt.Errorf("set %s up: %w", name, err)
}

// Netns is the Netns of a port in h, whose Label is label: the name h was
// opened with, or the name of the caller's namespace when it has one.
func Netns(h *netns.NS, label string) string {
	if h.Name() == "" && label != "" && !strings.HasPrefix(label, "netns-") {
		return label
	}
	return h.Name()
}
