package tapport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
)

// HostPort is the lab host's own port on a TAP: a macvlan in bridge mode that
// carries the host's lab address instead of the TAP. A macvtap sends
// frames for its lower device's MAC down through the lower device's
// transmit path, never up into its stack (drivers/net/macvlan.c:
// macvlan_queue_xmit), so guests on VM ports cannot reach an address on
// the TAP itself; they reach a sibling macvlan in bridge mode, inside the
// kernel, without the frames reaching tapfwd or the wire. Frames between
// the host port and the wire take the TAP's transmit path to tapfwd as a
// VM port's do.
//
// The TAP under a host port is quietened so that the host is on the
// segment once, through its port: it answers no ARP (arp_ignore 8: the
// host's address is on the port, which answers with its own MAC), drops
// IPv4 broadcasts whose source is reached through the port (rp_filter 1:
// the port delivers them), and has no IPv6 (disable_ipv6: no link-local
// address and no multicast copies). RemoveHost gives it back the namespace's
// defaults.
type HostPort struct {
	Name     string           // the macvlan netdev, e.g. "lab0h"
	Index    int              // its ifindex in Netns
	MAC      net.HardwareAddr // the host's MAC on the segment and on the wire
	TAP      string           // the TAP it sits on
	TAPIndex int
	Netns    string       // the namespace of the TAP and the port ("" for the caller's)
	Addr     netip.Prefix // the address EnsureHost gave it; zero for none
	// Adopted says an earlier run made it (a persistent TAP keeps it).
	Adopted bool
}

// HostConfig describes the host port EnsureHost makes or adopts.
type HostConfig struct {
	TAP   string // the TAP netdev; required
	Netns string // namespace of the TAP; "" for the caller's
	// Addr is the host's lab address: it goes on the port, and off the TAP
	// if an earlier run left it there. Zero: none.
	Addr netip.Prefix
	// MAC is a new port's address; nil picks a random locally administered
	// one. An adopted port keeps its own.
	MAC net.HardwareAddr
}

// HostName is the name of TAP tapName's host port: the TAP's name and "h", the
// TAP's name cut to fit IFNAMSIZ.
func HostName(tapName string) string {
	if len(tapName) > unix.IFNAMSIZ-2 {
		tapName = tapName[:unix.IFNAMSIZ-2]
	}
	return tapName + "h"
}

// EnsureHost gives TAP c.TAP in c.Netns its host port, named by Name: one
// already there (an earlier run's on a persistent TAP) is adopted, else a
// new one is made. It quietens the TAP, moves c.Addr from the TAP to the
// port, and brings the port up. A port it made is removed again when a
// later step fails. The kernel deletes the port with the TAP.
func EnsureHost(c HostConfig) (HostPort, error) {
	h, err := Open(c.TAP, c.MAC, c.Netns)
	if err != nil {
		return HostPort{}, fmt.Errorf("host port: %w", err)
	}
	defer h.Close()
	p, err := ensureHost(h, c)
	if err != nil {
		return HostPort{}, err
	}
	if err := finishHost(h, &p, c.Addr); err != nil {
		if !p.Adopted {
			err = errors.Join(err, removeHost(h, p))
		}
		return HostPort{}, err
	}
	return p, nil
}

// ensureHost adopts the TAP's host port or makes it, down.
func ensureHost(h *netns.NS, c HostConfig) (HostPort, error) {
	links, err := h.Links()
	if err != nil {
		return HostPort{}, fmt.Errorf("host port: %w", err)
	}
	t, err := FindTAP(h, links, c.TAP)
	if err != nil {
		return HostPort{}, err
	}
	name := HostName(t.Name)
	p := HostPort{Name: name, TAP: t.Name, TAPIndex: t.Index, Netns: Netns(h, h.Label())}
	if l := netns.LinkNamed(links, name); l != nil {
		if !isHostPort(l, t) {
			return HostPort{}, Errorf(ErrNameInUse, h, name,
				"host port name %q is in use in %s (a %s device, not a macvlan on %s)", name, h, l.KindName(), t.Name)
		}
		p.Index, p.MAC, p.Adopted = l.Index, l.MAC, true
		return p, nil
	}
	mac, err := PickMAC(h, links, c.MAC)
	if err != nil {
		return HostPort{}, err
	}
	if err := h.NewMacvlan(name, t.Index, mac); err != nil {
		return HostPort{}, CreateErr(h, "macvlan", ErrNoMacvlan, name, t.Name, err)
	}
	l, err := h.Link(name)
	if err != nil {
		return HostPort{}, fmt.Errorf("host port: %s after creating it: %w", name, err)
	}
	p.Index, p.MAC = l.Index, l.MAC
	return p, nil
}

// isHostPort says whether l is a host port on TAP t: a macvlan whose lower
// device is t, in the same namespace.
func isHostPort(l, t *netns.Link) bool {
	return l.Kind == "macvlan" && l.Parent == t.Index && !l.ParentElsewhere
}

// finishHost quietens the TAP, moves addr onto the port and brings it up.
func finishHost(h *netns.NS, p *HostPort, addr netip.Prefix) error {
	if err := Quieten(h, p.TAP); err != nil {
		return fmt.Errorf("host port: the TAP under %s: %w", p.Name, err)
	}
	if addr.IsValid() {
		if err := h.AddAddr(p.Index, addr); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("host port: %s: %w", p.Name, err)
		}
		err := h.DelAddr(p.TAPIndex, addr)
		if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("host port: move %s from TAP %s to its host port: %w", addr, p.TAP, err)
		}
		p.Addr = addr
	}
	return SetUp(h, p.Index, p.Name, p.MAC, p.TAP)
}

// FindHost returns TAP tapName's host port in namespace ns ("" for the
// caller's); ok is false when it has none.
func FindHost(ns, tapName string) (p HostPort, ok bool, err error) {
	h, err := netns.Open(ns)
	if err != nil {
		return HostPort{}, false, err
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return HostPort{}, false, fmt.Errorf("host port: %w", err)
	}
	t, err := FindTAP(h, links, tapName)
	if err != nil {
		return HostPort{}, false, err
	}
	l := netns.LinkNamed(links, HostName(t.Name))
	if l == nil || !isHostPort(l, t) {
		return HostPort{}, false, nil
	}
	p = HostPort{Name: l.Name, Index: l.Index, MAC: l.MAC, TAP: t.Name, TAPIndex: t.Index,
		Netns: Netns(h, h.Label()), Adopted: true}
	return p, true, nil
}

// RemoveHost deletes host port p (if it is still there with the same ifindex),
// with its addresses, and gives its TAP back the namespace's default
// settings for ARP, reverse-path filtering and IPv6. A port gone with its
// TAP or namespace is not an error.
func RemoveHost(p HostPort) error {
	h, err := netns.Open(p.Netns)
	if errors.Is(err, netns.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer h.Close()
	return removeHost(h, p)
}

func removeHost(h *netns.NS, p HostPort) error {
	l, err := h.Link(p.Name)
	switch {
	case errors.Is(err, unix.ENODEV):
		return nil
	case err != nil:
		return fmt.Errorf("host port: %w", err)
	case l.Index != p.Index || l.Kind != "macvlan":
		return nil // not ours any more
	}
	if err := h.DelLink(l.Index); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("host port: delete %s: %w", p.Name, err)
	}
	if err := Unquieten(h, p.TAP); err != nil {
		return fmt.Errorf("host port: after removing %s: %w", p.Name, err)
	}
	return nil
}
