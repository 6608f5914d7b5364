// Command tapfwd forwards frames between a multiqueue TAP device and a NIC
// through AF_PACKET, and benchmarks that path against the Linux bridge.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

const usage = `tapfwd: put a multiqueue TAP device on a wire from userspace.

Usage:
  tapfwd run --nic IFACE [flags]     forward between a new TAP and IFACE
  tapfwd features [--json]           what this kernel offers tapfwd
  tapfwd napi list|set [flags]       NIC NAPI instances: threaded, busy-poll, kthread CPU
  tapfwd vm-port add|list|del ...    VM ports (macvtap) on a TAP for QEMU/libvirt guests
  tapfwd bench throughput [flags]    IFF_NAPI and TAP modes vs the Linux bridge (iperf3)
                                     on a built-in namespace test bed
  tapfwd bench latency [flags]       request/response latency at fixed rates (xsk_rr style)

Run "tapfwd COMMAND -h" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks errors already explained by the flag package.
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(args[1:], stderr)
	case "features":
		err = cmdFeatures(args[1:], stdout, stderr)
	case "bench":
		err = cmdBench(args[1:], stdout, stderr)
	case "vm-port":
		err = cmdVMPort(args[1:], stdout, stderr)
	case "napi":
		err = cmdNapi(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tapfwd: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "tapfwd: %v\n", err)
	return 1
}

// newFlagSet makes a subcommand's flag set that reports errors, not exits.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tapfwd %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "tapfwd: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("--log-level: want debug, info, warn or error, got %q", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
