package hostport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/netns"
)

// Port is the lab host's own port on a TAP: a macvlan in bridge mode that
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
// address and no multicast copies). Remove gives it back the namespace's
// defaults.
type Port struct {
	Name     string           // the macvlan netdev, e.g. "lab0h"
	Index    int              // its ifindex in Netns
	MAC      net.HardwareAddr // the host's MAC on the segment and on the wire
	TAP      string           // the TAP it sits on
	TAPIndex int
	Netns    string       // the namespace of the TAP and the port ("" for the caller's)
	Addr     netip.Prefix // the address Ensure gave it; zero for none
	// Adopted says an earlier run made it (a persistent TAP keeps it).
	Adopted bool
}

// Config describes the host port Ensure makes or adopts.
type Config struct {
	TAP   string // the TAP netdev; required
	Netns string // namespace of the TAP; "" for the caller's
	// Addr is the host's lab address: it goes on the port, and off the TAP
	// if an earlier run left it there. Zero: none.
	Addr netip.Prefix
	// MAC is a new port's address; nil picks a random locally administered
	// one. An adopted port keeps its own.
	MAC net.HardwareAddr
}

// Name is the name of TAP tapName's host port: the TAP's name and "h", the
// TAP's name cut to fit IFNAMSIZ.
func Name(tapName string) string {
	if len(tapName) > unix.IFNAMSIZ-2 {
		tapName = tapName[:unix.IFNAMSIZ-2]
	}
	return tapName + "h"
}

// Ensure gives TAP c.TAP in c.Netns its host port, named by Name: one
// already there (an earlier run's on a persistent TAP) is adopted, else a
// new one is made. It quietens the TAP, moves c.Addr from the TAP to the
// port, and brings the port up. A port it made is removed again when a
// later step fails. The kernel deletes the port with the TAP.
func Ensure(c Config) (Port, error) {
	h, err := tapport.Open(c.TAP, c.MAC, c.Netns)
	if err != nil {
		return Port{}, fmt.Errorf("hostport: %w", err)
	}
	defer h.Close()
	p, err := ensure(h, c)
	if err != nil {
		return Port{}, err
	}
	if err := finish(h, &p, c.Addr); err != nil {
		if !p.Adopted {
			err = errors.Join(err, remove(h, p))
		}
		return Port{}, err
	}
	return p, nil
}

// ensure adopts the TAP's host port or makes it, down.
func ensure(h *netns.NS, c Config) (Port, error) {
	links, err := h.Links()
	if err != nil {
		return Port{}, fmt.Errorf("hostport: %w", err)
	}
	t, err := tapport.FindTAP(h, links, c.TAP)
	if err != nil {
		return Port{}, err
	}
	name := Name(t.Name)
	p := Port{Name: name, TAP: t.Name, TAPIndex: t.Index, Netns: tapport.Netns(h, h.Label())}
	if l := netns.LinkNamed(links, name); l != nil {
		if !isHostPort(l, t) {
			return Port{}, tapport.Errorf(ErrNameInUse, h, name,
				"host port name %q is in use in %s (a %s device, not a macvlan on %s)", name, h, l.KindName(), t.Name)
		}
		p.Index, p.MAC, p.Adopted = l.Index, l.MAC, true
		return p, nil
	}
	mac, err := tapport.PickMAC(h, links, c.MAC)
	if err != nil {
		return Port{}, err
	}
	if err := h.NewMacvlan(name, t.Index, mac); err != nil {
		return Port{}, tapport.CreateErr(h, "macvlan", ErrNoMacvlan, name, t.Name, err)
	}
	l, err := h.Link(name)
	if err != nil {
		return Port{}, fmt.Errorf("hostport: %s after creating it: %w", name, err)
	}
	p.Index, p.MAC = l.Index, l.MAC
	return p, nil
}

// isHostPort says whether l is a host port on TAP t: a macvlan whose lower
// device is t, in the same namespace.
func isHostPort(l, t *netns.Link) bool {
	return l.Kind == "macvlan" && l.Parent == t.Index && !l.ParentElsewhere
}

// finish quietens the TAP, moves addr onto the port and brings it up.
func finish(h *netns.NS, p *Port, addr netip.Prefix) error {
	if err := tapport.Quieten(h, p.TAP); err != nil {
		return fmt.Errorf("hostport: the TAP under %s: %w", p.Name, err)
	}
	if addr.IsValid() {
		if err := h.AddAddr(p.Index, addr); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("hostport: %s: %w", p.Name, err)
		}
		err := h.DelAddr(p.TAPIndex, addr)
		if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("hostport: move %s from TAP %s to its host port: %w", addr, p.TAP, err)
		}
		p.Addr = addr
	}
	return tapport.SetUp(h, p.Index, p.Name, p.MAC, p.TAP)
}

// Find returns TAP tapName's host port in namespace ns ("" for the
// caller's); ok is false when it has none.
func Find(ns, tapName string) (p Port, ok bool, err error) {
	h, err := netns.Open(ns)
	if err != nil {
		return Port{}, false, err
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return Port{}, false, fmt.Errorf("hostport: %w", err)
	}
	t, err := tapport.FindTAP(h, links, tapName)
	if err != nil {
		return Port{}, false, err
	}
	l := netns.LinkNamed(links, Name(t.Name))
	if l == nil || !isHostPort(l, t) {
		return Port{}, false, nil
	}
	p = Port{Name: l.Name, Index: l.Index, MAC: l.MAC, TAP: t.Name, TAPIndex: t.Index,
		Netns: tapport.Netns(h, h.Label()), Adopted: true}
	return p, true, nil
}

// Remove deletes host port p (if it is still there with the same ifindex),
// with its addresses, and gives its TAP back the namespace's default
// settings for ARP, reverse-path filtering and IPv6. A port gone with its
// TAP or namespace is not an error.
func Remove(p Port) error {
	h, err := netns.Open(p.Netns)
	if errors.Is(err, netns.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer h.Close()
	return remove(h, p)
}

func remove(h *netns.NS, p Port) error {
	l, err := h.Link(p.Name)
	switch {
	case errors.Is(err, unix.ENODEV):
		return nil
	case err != nil:
		return fmt.Errorf("hostport: %w", err)
	case l.Index != p.Index || l.Kind != "macvlan":
		return nil // not ours any more
	}
	if err := h.DelLink(l.Index); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("hostport: delete %s: %w", p.Name, err)
	}
	if err := tapport.Unquieten(h, p.TAP); err != nil {
		return fmt.Errorf("hostport: after removing %s: %w", p.Name, err)
	}
	return nil
}
