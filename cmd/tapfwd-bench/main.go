// Command tapfwd-bench measures tapfwd against the Linux bridge on a
// built-in network-namespace test bed: throughput with iperf3, and
// request/response latency. It drives tapfwd only through the tapfwd
// binary and its flags.
package main

import (
	"flag"
	"io"
	"os"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/internal/cliflag"
)

const usage = `Usage: tapfwd-bench napi|throughput|latency|profile [flags]
       tapfwd-bench compare [flags] A.json B.json

napi: does IFF_NAPI help on this kernel? IFF_NAPI on and off on two queues
of one TAP, switched every 100 ms inside each run, a verdict in about five
minutes (--rows seed: the QEMU patch's six rows, also the TAP's NAPI
threaded; throughput's default run).
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
version (or --version, -V): this binary's version and VCS revision.
napi, throughput, latency and profile build their network namespaces and
remove them, and start tapfwd as a user would: --tapfwd PATH, by default
the tapfwd next to tapfwd-bench, else the one on $PATH. Run "tapfwd-bench
napi --help", "tapfwd-bench throughput --help", "tapfwd-bench latency
--help", "tapfwd-bench profile --help" or "tapfwd-bench compare --help"
for the flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	err := cliflag.Dispatch("tapfwd-bench", usage, args, map[string]cliflag.Command{
		"napi":       func(a []string) error { return cmdNAPI(a, stdout, stderr) },
		"throughput": func(a []string) error { return cmdThroughput(a, stdout, stderr) },
		"latency":    func(a []string) error { return cmdLatency(a, stdout, stderr) },
		"compare":    func(a []string) error { return cmdCompare(a, stdout) },
		"version":    func(a []string) error { return cliflag.Version("tapfwd-bench", a, stdout) },
		"profile":    func(a []string) error { return cmdProfile(a, stdout, stderr) },
		// Hidden: the naive baseline, started by the bench in a bed.
		forwarder.NaiveCommand: func(a []string) error { return cmdNaiveForwarder(a, stdout, stderr) },
	}, stdout, stderr)
	return cliflag.Exit("tapfwd-bench", err, stderr)
}

// newFlagSet makes a subcommand's flag set: its help goes to stdout, its
// errors are one line (cliflag.Parse).
func newFlagSet(name, synopsis string, stdout io.Writer) *flag.FlagSet {
	return cliflag.NewFlagSet("tapfwd-bench", name, synopsis, stdout)
}

func parse(fs *flag.FlagSet, args []string) error { return cliflag.Parse(fs, args) }
