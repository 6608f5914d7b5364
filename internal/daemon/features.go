package daemon

import (
	"github.com/mdlayher/genetlink"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afpacket"
	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/tap"
)

// KernelFeatures is what this kernel offers a forwarder. A probe that
// failed says why in its _error field.
type KernelFeatures struct {
	Kernel      string            `json:"kernel"`
	TUNFeatures uint32            `json:"tun_features"`
	TUNFlags    []string          `json:"tun_flags"`
	Offloads    string            `json:"tap_offloads"`
	OffloadsErr string            `json:"tap_offloads_error,omitempty"`
	Packet      []afpacket.Option `json:"af_packet"`
	PacketErr   string            `json:"af_packet_error,omitempty"`
	NetdevNL    bool              `json:"netdev_netlink"`
	NetdevVer   int               `json:"netdev_netlink_version,omitempty"`
	NetdevErr   string            `json:"netdev_netlink_error,omitempty"`
	// XDP is what AF_XDP offers, probed on lo (no XDP program attached).
	XDP afxdp.Features `json:"af_xdp"`
}

// ProbeFeatures asks the kernel: TUNGETFEATURES (an error when that
// fails), the TAP offloads it takes, the AF_PACKET options, and the
// netdev generic netlink family that controls NAPI, and AF_XDP.
func ProbeFeatures() (KernelFeatures, error) {
	var r KernelFeatures
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		r.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	feat, err := tap.Probe()
	if err != nil {
		return r, err
	}
	r.TUNFeatures, r.TUNFlags = feat, tap.FlagNames(feat)
	if o, err := tap.ProbeOffloads(); err != nil {
		r.OffloadsErr = err.Error()
	} else {
		r.Offloads = tap.Features{Offloads: o}.OffloadNames()
	}
	if r.Packet, err = afpacket.Probe(); err != nil {
		r.PacketErr = err.Error()
	}
	r.XDP = afxdp.Probe("lo")
	c, err := genetlink.Dial(nil)
	if err != nil {
		r.NetdevErr = err.Error()
		return r, nil
	}
	defer c.Close()
	if f, err := c.GetFamily("netdev"); err != nil {
		r.NetdevErr = err.Error()
	} else {
		r.NetdevNL, r.NetdevVer = true, int(f.Version)
	}
	return r, nil
}
