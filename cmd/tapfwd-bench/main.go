// Command tapfwd-bench measures tapfwd against the Linux bridge on a
// built-in network-namespace test bed: throughput with iperf3, and
// request/response latency. It drives tapfwd only through the tapfwd
// binary and its flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/tapfwd/tapfwd/bench/forwarder"
)

const usage = `Usage: tapfwd-bench throughput|latency [flags]
       tapfwd-bench compare [flags] A.json B.json

throughput: iperf3 through tapfwd in several TAP configurations and through
the baselines (Linux bridge, direct veth, a naive water-based forwarder).
latency: UDP request/response round-trip times at fixed rates and
application delays (the xsk_rr method) through tapfwd's polling modes and
the Linux bridge.
compare: two saved throughput reports, cell by cell: the ratio of the
medians with its interval and a verdict.
throughput and latency build their network namespaces and remove them,
and start tapfwd as a user would: --tapfwd PATH, by default the tapfwd
next to tapfwd-bench, else the one on $PATH. Run "tapfwd-bench throughput
-h", "tapfwd-bench latency -h" or "tapfwd-bench compare -h" for the flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks errors already explained by the flag package.
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, map[string]func([]string) error{
		"throughput": func(a []string) error { return cmdThroughput(a, stdout, stderr) },
		"latency":    func(a []string) error { return cmdLatency(a, stdout, stderr) },
		"compare":    func(a []string) error { return cmdCompare(a, stdout, stderr) },
		// Hidden: the naive baseline, started by the bench in a bed.
		forwarder.NaiveCommand: func(a []string) error { return cmdNaiveForwarder(a, stderr) },
	}, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "tapfwd-bench: %v\n", err)
	return 1
}

// dispatch runs the command of cmds that args[0] names. Without one, or
// with an unknown one, it prints usage to stderr and returns errUsage; for
// help, usage goes to stdout and it returns flag.ErrHelp.
func dispatch(args []string, cmds map[string]func([]string) error, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if cmd, ok := cmds[args[0]]; ok {
			return cmd(args[1:])
		}
		switch args[0] {
		case "-h", "-help", "--help", "help":
			fmt.Fprint(stdout, usage)
			return flag.ErrHelp
		}
		fmt.Fprintf(stderr, "tapfwd-bench: unknown command %q\n\n", args[0])
	}
	fmt.Fprint(stderr, usage)
	return errUsage
}

// newFlagSet makes a subcommand's flag set that reports errors, not exits.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tapfwd-bench %s\n\nFlags:\n", synopsis)
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
		fmt.Fprintf(fs.Output(), "tapfwd-bench: unexpected argument %q\n", fs.Arg(0))
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
