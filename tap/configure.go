package tap

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
)

// configure applies MTU, MAC and NAPI settings where the TAP was created,
// moves it into there (nil: it stays), then brings it up and adds c.Addr
// where it ends up.
func configure(d *Device, c Config, there *netns.NS) error {
	here, err := netns.Open("")
	if err != nil {
		return err
	}
	defer here.Close()
	l, err := here.Link(d.name)
	if err != nil {
		return fmt.Errorf("configure TAP %s: %w", d.name, err)
	}
	mac := c.MAC
	if mac == nil && c.MACKey != nil {
		mac = StableMAC(c.MACKey, c.Netns, d.name)
	}
	if err := here.SetLink(l.Index, netns.LinkChange{MTU: c.MTU, MAC: mac}); err != nil {
		return fmt.Errorf("configure TAP %s: %w", d.name, err)
	}
	// Read the MAC back while the TAP is still visible here: the NIC side
	// asks for frames to it (PACKET_MR_UNICAST).
	if l, err = here.Link(d.name); err != nil {
		return fmt.Errorf("read back TAP %s: %w", d.name, err)
	}
	d.mac = l.MAC
	// The TAP's sysfs is visible only from its own namespace: write
	// before the move (the settings survive it).
	if err := writeNAPI(here, d.name, c.NAPISettings); err != nil {
		return err
	}
	ns := here
	if there != nil {
		if err := here.SetLink(l.Index, netns.LinkChange{Netns: there}); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("name %q is in use in %s: %w (%w)", d.name, there, ErrNameInUse, err)
			}
			return fmt.Errorf("move TAP %s: %w", d.name, err)
		}
		d.netns = there.Name()
		ns = there
		// The index is kept unless taken in the new namespace.
		if l, err = there.Link(d.name); err != nil {
			return fmt.Errorf("TAP %s after the move: %w", d.name, err)
		}
	}
	d.groIPv4, d.groIPv6 = l.GROIPv4MaxSize, l.GROMaxSize
	if err := ns.SetLink(l.Index, netns.LinkChange{Up: true}); err != nil {
		return fmt.Errorf("configure TAP %s: %w", d.name, err)
	}
	if c.Addr.IsValid() {
		if err := ns.AddAddr(l.Index, c.Addr); err != nil {
			return fmt.Errorf("configure TAP %s: %w", d.name, err)
		}
	}
	return nil
}

// writeNAPI writes s to the sysfs attributes of the TAP name in ns.
func writeNAPI(ns *netns.NS, name string, s NAPISettings) error {
	attrs := s.attrs()
	if len(attrs) == 0 {
		return nil
	}
	mnt, err := ns.Sysfs(true)
	if err != nil {
		return fmt.Errorf("NAPI settings of TAP %s: %w", name, err)
	}
	defer unix.Close(mnt)
	for _, a := range attrs {
		p := filepath.Join("class/net", name, a[0])
		fd, err := unix.Openat(mnt, p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("write /sys/%s = %s: %w", p, a[1], os.NewSyscallError("openat", err))
		}
		_, err = unix.Write(fd, []byte(a[1]))
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("write /sys/%s = %s: %w", p, a[1], os.NewSyscallError("write", err))
		}
	}
	return nil
}

// MoveToNetns moves the existing interface name (a TAP that other code
// opened, such as the bench's songgao/water baseline) into the network
// namespace ns (/run/netns/NAME; "" leaves it here), brings it up there
// and assigns addr when it is valid: what Open does for its own TAP.
func MoveToNetns(name, ns string, addr netip.Prefix) error {
	var there *netns.NS
	if ns != "" {
		var err error
		if there, err = netns.Open(ns); err != nil {
			return err
		}
		defer there.Close()
	}
	return configure(&Device{name: name}, Config{Netns: ns, Addr: addr}, there)
}
