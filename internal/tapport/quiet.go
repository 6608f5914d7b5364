package tapport

import (
	"errors"
	"fmt"

	"github.com/tapfwd/tapfwd/netns"
)

// quiet are the per-device IP settings (Documentation/networking/
// ip-sysctl.rst) that keep the namespace's own stack off a device that
// frames reach but the host must not answer or speak through: the TAP
// under a host port, and a VM port's macvtap netdev, which takes the
// frames for its guest into the stack while no one holds its character
// device.
var quiet = []struct{ version, key, value string }{
	{netns.IPv4, "arp_ignore", "8"}, // reply for no local address
	{netns.IPv4, "rp_filter", "1"},  // strict reverse-path check: drop IPv4 broadcasts from elsewhere
	// No IPv6: no link-local address, so no neighbour, router or
	// multicast-listener messages of its own, and IPv6 frames dropped.
	{netns.IPv6, "disable_ipv6", "1"},
}

// Quieten makes device dev in h answer no ARP, drop IPv4 whose source is
// reached through another device, and have no IPv6. Set before the device
// goes up, it sends nothing of the host's at all. A namespace without IPv6
// (ipv6.disable=1) is not an error.
func Quieten(h *netns.NS, dev string) error {
	for _, s := range quiet {
		err := h.SetDevConf(s.version, dev, s.key, s.value)
		if err != nil && !(s.version == netns.IPv6 && errors.Is(err, netns.ErrNoDevConf)) {
			return fmt.Errorf("quieten %s: %w", dev, err)
		}
	}
	return nil
}

// Unquieten gives dev back the namespace's defaults for what Quieten set.
func Unquieten(h *netns.NS, dev string) error {
	var errs []error
	for _, s := range quiet {
		def, err := h.DevConf(s.version, "default", s.key)
		if err == nil {
			err = h.SetDevConf(s.version, dev, s.key, def)
		}
		if err != nil && !errors.Is(err, netns.ErrNoDevConf) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restore %s's settings: %w", dev, err)
	}
	return nil
}
