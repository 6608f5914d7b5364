// Command tapfwd-bench measures tapfwd against the Linux bridge on a
// built-in network-namespace test bed: throughput with iperf3, and
// request/response latency. It drives tapfwd only through the tapfwd
// binary and its flags.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/internal/cliflag"
)

const usage = `Usage: tapfwd-bench throughput|latency|profile [flags]
       tapfwd-bench compare [flags] A.json B.json

throughput: iperf3 through tapfwd in several TAP configurations and through
the baselines (Linux bridge, direct veth, a naive water-based forwarder).
latency: UDP request/response round-trip times at fixed rates and
application delays (the xsk_rr method) through tapfwd's polling modes and
the Linux bridge.
compare: two saved throughput reports, cell by cell: the ratio of the
medians with its interval and a verdict.
profile: where the time goes on the guard's workloads: tapfwd's Go CPU
profile in shares, the machine per CPU and thread, tapfwd's batches, and
the kernel side from perf where it works.
throughput, latency and profile build their network namespaces and
remove them, and start tapfwd as a user would: --tapfwd PATH, by default
the tapfwd next to tapfwd-bench, else the one on $PATH. Run "tapfwd-bench throughput
-h", "tapfwd-bench latency -h", "tapfwd-bench profile -h" or "tapfwd-bench
compare -h" for the flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks errors already explained by the flag package.
var errUsage = cliflag.ErrUsage

func run(args []string, stdout, stderr io.Writer) int {
	err := cliflag.Dispatch("tapfwd-bench", usage, args, map[string]cliflag.Command{
		"throughput": func(a []string) error { return cmdThroughput(a, stdout, stderr) },
		"latency":    func(a []string) error { return cmdLatency(a, stdout, stderr) },
		"compare":    func(a []string) error { return cmdCompare(a, stdout, stderr) },
		"profile":    func(a []string) error { return cmdProfile(a, stdout, stderr) },
		// Hidden: the naive baseline, started by the bench in a bed.
		forwarder.NaiveCommand: func(a []string) error { return cmdNaiveForwarder(a, stderr) },
	}, stdout, stderr)
	return cliflag.Exit("tapfwd-bench", err, stderr)
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("--log-level: want debug, info, warn or error, got %q", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// newFlagSet makes a subcommand's flag set: errors are reported, not
// exits, and -h prints the flags as --name.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	return cliflag.NewFlagSet("tapfwd-bench", name, synopsis, stderr)
}

func parse(fs *flag.FlagSet, args []string) error { return cliflag.Parse("tapfwd-bench", fs, args) }
