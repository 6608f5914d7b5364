package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/tapfwd/tapfwd/internal/daemon"
)

func cmdFeatures(args []string, stdout io.Writer) error {
	fs := newFlagSet("features", "features [--json]", stdout)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	r, err := daemon.ProbeFeatures()
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, r)
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
	fmt.Fprintf(w, "AF_XDP\t%s\n", r.XDP)
	if r.NetdevNL {
		fmt.Fprintf(w, "netdev netlink\tyes (family version %d)\n", r.NetdevVer)
	} else {
		fmt.Fprintf(w, "netdev netlink\tno: %s\n", r.NetdevErr)
	}
	return w.Flush()
}
