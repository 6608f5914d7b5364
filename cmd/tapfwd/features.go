package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/mdlayher/genetlink"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afpacket"
	"github.com/tapfwd/tapfwd/tap"
)

type featureReport struct {
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
}

func cmdFeatures(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("features", "features [--json]", stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	var r featureReport
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		r.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	feat, err := tap.Probe()
	if err != nil {
		return err
	}
	r.TUNFeatures = feat
	r.TUNFlags = tap.FlagNames(feat)
	if o, err := tap.ProbeOffloads(); err != nil {
		r.OffloadsErr = err.Error()
	} else {
		r.Offloads = tap.Features{Offloads: o}.OffloadNames()
	}
	if r.Packet, err = afpacket.Probe(); err != nil {
		r.PacketErr = err.Error()
	}
	if c, err := genetlink.Dial(nil); err != nil {
		r.NetdevErr = err.Error()
	} else {
		f, err := c.GetFamily("netdev")
		c.Close()
		if err != nil {
			r.NetdevErr = err.Error()
		} else {
			r.NetdevNL = true
			r.NetdevVer = int(f.Version)
		}
	}
	if *asJSON {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		return e.Encode(r)
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "kernel\t%s\n", r.Kernel)
	fmt.Fprintf(w, "TUNGETFEATURES\t%#x: %s\n", r.TUNFeatures, strings.Join(r.TUNFlags, " "))
	if r.OffloadsErr != "" {
		fmt.Fprintf(w, "TUNSETOFFLOAD\tnot probed: %s\n", r.OffloadsErr)
	} else {
		fmt.Fprintf(w, "TUNSETOFFLOAD\t%s\n", r.Offloads)
	}
	if r.PacketErr != "" {
		fmt.Fprintf(w, "AF_PACKET\tnot probed: %s\n", r.PacketErr)
	}
	for _, o := range r.Packet {
		v := "yes"
		if !o.OK {
			v = "no: " + o.Err
		}
		fmt.Fprintf(w, "AF_PACKET %s\t%s\n", o.Name, v)
	}
	if r.NetdevNL {
		fmt.Fprintf(w, "netdev netlink\tyes (family version %d)\n", r.NetdevVer)
	} else {
		fmt.Fprintf(w, "netdev netlink\tno: %s\n", r.NetdevErr)
	}
	return w.Flush()
}
