package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/cpuprofile"
	"github.com/tapfwd/tapfwd/bench/latency"
	"github.com/tapfwd/tapfwd/bench/profile"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/cliflag"
)

// The profile command's defaults: the guard's rows, tapfwd as it ships
// and the bridge (for request/response workloads: the packet socket and
// the AF_XDP configurations that block and busy-poll, and the bridge), a
// 10 s window after 2 s of warm-up.
var (
	profileConfigs   = []string{throughput.Default, throughput.Bridge}
	profileRRConfigs = []string{latency.Block, latency.XDPBlock, latency.XDPKernel, latency.XDPKernelCPU, latency.Bridge}
	profileWindow    = 10 * time.Second
	profileWarmup    = 2 * time.Second
	profileTop       = 15
)

// profileFlags are the profile command's flags.
type profileFlags struct {
	bench *benchFlags
	iperfFlags
	leverFlags
	workloads, configs *string
	warmup             *time.Duration
	seconds, top       *int
	perf               *string
}

func profileFlagSet(stdout io.Writer) (*flag.FlagSet, *profileFlags) {
	fs := newFlagSet("profile", "profile [flags]", stdout)
	f := &profileFlags{
		bench: addReportFlags(fs, "profile.{txt,md,json}) and the raw profiles (CONFIG-WORKLOAD.pprof for go tool pprof, CONFIG-WORKLOAD.perf.data for perf report -i",
			"", "log each test bed and every failure to stderr"),
		iperfFlags: addIperfFlags(fs, false),
		leverFlags: addLeverFlags(fs),
		workloads:  fs.String("workload", "all", "comma-separated workloads to profile (see above): the guard's, all of them, or request/response points rr-RATE-DELAY"),
		configs:    fs.String("configs", "", "comma-separated configurations (tapfwd-bench throughput -h lists them; for rr workloads, tapfwd-bench latency -h); empty: "+strings.Join(profileConfigs, ",")+", or for rr workloads "+strings.Join(profileRRConfigs, ",")),
		seconds:    fs.Int("seconds", int(profileWindow/time.Second), "how long each profile samples, in seconds"),
		warmup:     fs.Duration("warmup", profileWarmup, "how long iperf3 runs before the profile starts"),
		top:        fs.Int("top", profileTop, "functions in each top list"),
		perf:       fs.String("perf", "auto", "the kernel side with perf: auto (when perf is installed and may sample) or off"),
	}
	fs.Usage = func() {
		fmt.Fprintf(stdout, `Usage: tapfwd-bench profile [flags]

Where the time goes, for each workload and configuration, on a fresh
test bed while iperf3 runs (%v of warm-up, then a window of %v by
default): tapfwd's Go CPU profile (--pprof) grouped into shares (TAP
write with the lab's receive path inside it, TAP read, packet socket
recv and send, copies, vnethdr and GRO, the worker's own code, the Go
runtime) with its top functions and the functions its system calls come
from; the machine per CPU (/proc/stat user, system, softirq, idle;
/proc/softirqs NET_RX and NET_TX); tapfwd's threads and the kernel's
ksoftirqd and NAPI kthreads (/proc/PID/task/*/stat); where the busy
threads ran and waited; tapfwd's frames per wake-up, GRO merges per
wake-up and writes per frame from its metrics; and, where perf works,
the kernel side of every CPU by path and by task. One run each: a
profile, not a measurement. Needs root and iperf3.

Workloads (--workload):
`, profileWarmup, profileWindow)
		for _, w := range throughput.PerfWorkloads() {
			fmt.Fprintf(stdout, "  %s\n", w.Name)
		}
		fmt.Fprintf(stdout, `  rr-RATE-DELAY, e.g. rr-5K-0us: the latency bench's request/response
    load at RATE requests per second (K = 1000) with DELAY after each
    reply (tapfwd-bench latency --points), for why a configuration's
    round trips take what they take; its threads are followed as rr
    sender, receiver and echo

All of the guard's under tapfwd and the bridge: about %s on a 2-CPU VM.

Flags:
`, profileTime)
		cliflag.PrintDefaults(stdout, fs)
	}
	return fs, f
}

// profileTime is how long the default profile run takes.
const profileTime = "4 minutes"

// options checks the flags and turns them into the run's options (Lab,
// the kernel's features and the binary's flags come from the bench's
// environment).
func (f *profileFlags) options() (profile.Options, error) {
	var o profile.Options
	switch {
	case *f.bench.asJSON && *f.bench.asMD:
		return o, errors.New("--json and --markdown: pick one")
	case *f.seconds < 1 || *f.seconds > 600:
		return o, fmt.Errorf("--seconds %d: want 1 to 600", *f.seconds)
	case *f.warmup < 0 || *f.warmup > time.Minute:
		return o, fmt.Errorf("--warmup %v: want 0 to 1m", *f.warmup)
	case *f.top < 1 || *f.top > 1000:
		return o, fmt.Errorf("--top %d: want 1 to 1000", *f.top)
	case *f.perf != "auto" && *f.perf != "off":
		return o, fmt.Errorf("--perf %q: want auto or off", *f.perf)
	case *f.groWindow <= 0:
		return o, errors.New("--gro-window must be positive")
	}
	iperfs, rrs, err := selectWorkloads(*f.workloads)
	if err != nil {
		return o, err
	}
	if o.Configs, err = f.selectConfigs(len(rrs) > 0); err != nil {
		return o, err
	}
	if *f.placement == throughput.PlaceBoth {
		return o, errors.New("--placement both: profile one placement at a time")
	}
	if iperfs, err = f.place(iperfs); err != nil {
		return o, err
	}
	o.Workloads = append(profile.IperfWorkloads(iperfs), rrs...)
	o.Window, o.Warmup, o.Top, o.Dir = time.Duration(*f.seconds)*time.Second, *f.warmup, *f.top, *f.bench.outDir
	return o, nil
}

// selectConfigs are the configurations of --configs: the throughput
// bench's, or with request/response workloads the latency bench's.
func (f *profileFlags) selectConfigs(rr bool) ([]report.Config, error) {
	known, names := throughput.KnownConfigs(throughput.DefaultTAPNAPI, f.levers()), profileConfigs
	if rr {
		known, names = latency.Configs(), profileRRConfigs
	}
	if *f.configs != "" {
		names = splitList(*f.configs)
	}
	cs, err := report.SelectConfigs(known, names)
	if err != nil {
		return nil, fmt.Errorf("--configs: %w", err)
	}
	return cs, nil
}

// selectWorkloads are the workloads named in s: the guard's (all of
// them for "all") and request/response points, not both in one run (their
// configurations are the throughput and the latency bench's).
func selectWorkloads(s string) (iperfs []throughput.Workload, rrs []profile.Workload, err error) {
	if s == "all" {
		return throughput.PerfWorkloads(), nil, nil
	}
	for _, name := range splitList(s) {
		if strings.HasPrefix(name, profile.RRPrefix) {
			w, err := profile.ParseRRWorkload(name)
			if err != nil {
				return nil, nil, fmt.Errorf("--workload: %w", err)
			}
			rrs = append(rrs, w)
			continue
		}
		w, err := guardWorkload(name)
		if err != nil {
			return nil, nil, err
		}
		iperfs = append(iperfs, w)
	}
	switch {
	case len(iperfs)+len(rrs) == 0:
		return nil, nil, errors.New("--workload: none given")
	case len(iperfs) > 0 && len(rrs) > 0:
		return nil, nil, errors.New("--workload: profile the guard's workloads and rr workloads in separate runs (they run under different configurations)")
	}
	return iperfs, rrs, nil
}

// guardWorkload is the guard's workload called name.
func guardWorkload(name string) (throughput.Workload, error) {
	all := throughput.PerfWorkloads()
	if i := slices.IndexFunc(all, func(w throughput.Workload) bool { return w.Name == name }); i >= 0 {
		return all[i], nil
	}
	var names []string
	for _, w := range all {
		names = append(names, w.Name)
	}
	return throughput.Workload{}, fmt.Errorf("--workload %q: unknown (known: %s, all, rr-RATE-DELAY)", name, strings.Join(names, ", "))
}

func cmdProfile(args []string, stdout, stderr io.Writer) error {
	fs, f := profileFlagSet(stdout)
	o, err := parseOptions(fs, args, f.options)
	if err != nil {
		return err
	}
	if *f.bench.from != "" {
		return reread(*f.bench.from, profile.Read, func(rep *profile.Report) error { return renderProfile(rep, f, stdout) })
	}
	var tools []string
	if o.Workloads[0].RR == nil {
		tools = append(tools, "iperf3") // rr's load is tapfwd-bench's own
	}
	env, err := startBench("profile", f.bench, o.Configs, stderr, tools...)
	if err != nil {
		return err
	}
	defer env.stop()
	o.Lab, o.TUNFeatures, o.TapfwdFlags, o.Progress, o.Log = env.lab, env.features, env.tapfwdFlags, env.prog.update, env.log
	note := "not sampled (--perf off)"
	if *f.perf == "auto" {
		if o.Perf, note = cpuprofile.ProbePerf(env.ctx); o.Perf == nil {
			fmt.Fprintf(stderr, "tapfwd-bench: %s\n", note)
		}
	}
	rep, err := profile.Run(env.ctx, o)
	if err := env.finish(err); err != nil {
		return err
	}
	rep.Perf = note
	env.skipped(rep.Skipped)
	return renderProfile(rep, f, stdout)
}

// renderProfile writes rep's files into --out (when set) and rep in the
// chosen format to stdout.
func renderProfile(rep *profile.Report, f *profileFlags, stdout io.Writer) error {
	if dir := *f.bench.outDir; dir != "" && *f.bench.from == "" {
		if err := writeOut(dir, report.Files("profile", rep)); err != nil {
			return err
		}
	}
	return printReport(stdout, rep, *f.bench.asJSON, *f.bench.asMD)
}
