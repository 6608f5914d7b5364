package main

import (
	"context"
	"io"
	"net/netip"
	"os/signal"
	"syscall"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/naive"
	"github.com/tapfwd/tapfwd/internal/cliflag"
)

// cmdNaiveForwarder runs the naive baseline (package naive) until SIGINT or
// SIGTERM. The bench starts it in a bed's fwd namespace; it is not part of
// the bench's interface.
func cmdNaiveForwarder(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(forwarder.NaiveCommand, forwarder.NaiveCommand+" --nic IFACE --tap NAME [flags]", stdout)
	nic := fs.String("nic", "", "NIC (or veth) for the packet socket; required")
	tapName := fs.String("tap", "", "TAP name; empty lets the kernel pick")
	netns := fs.String("tap-netns", "", "move the TAP into this namespace; empty keeps it here")
	addr := fs.String("tap-addr", "", "address for the TAP in CIDR form; empty assigns none")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := cliflag.Logger(*logLevel, "text", stderr)
	if err != nil {
		return cliflag.Misuse(fs, "%w", err)
	}
	if *nic == "" {
		return cliflag.Misuse(fs, "--nic is required")
	}
	c := naive.Config{NIC: *nic, TAP: *tapName, Netns: *netns, Log: log}
	if *addr != "" {
		if c.Addr, err = netip.ParsePrefix(*addr); err != nil {
			return cliflag.Misuse(fs, "--tap-addr %s: want an address with its prefix length, e.g. 198.18.1.2/24", cliflag.Quote(*addr))
		}
	}
	f, err := naive.Open(c)
	if err != nil {
		return err
	}
	log.Info("naive forwarder", "tap", f.TAPName(), "tap_netns", *netns, "nic", *nic)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = f.Run(ctx)
	log.Info("naive totals", "nic_frames", f.C.NICFrames.Load(), "tap_writes", f.C.TAPWrites.Load(),
		"tap_frames", f.C.TAPFrames.Load(), "nic_writes", f.C.NICWrites.Load(),
		"drops", f.C.Drops.Load(), "write_errors", f.C.WriteErrors.Load())
	return err
}
