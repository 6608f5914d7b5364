package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/internal/cpulist"
	"github.com/tapfwd/tapfwd/internal/testbed/iperf"
)

// The default run answers the QEMU patch's question: its table's rows
// (TCP 64 B, 128 B and 4 KB writes, one stream and several) in the
// direction where IFF_NAPI acts (wire->lab: frames written into the TAP),
// the TAP's NAPI modes, the bridge (ratios and cost) and the direct veth
// (where the sender, not the path, is the limit), with enough repetitions
// for intervals of about +-7.5% (docs/bench.md: "The default run: why these
// settings").
var (
	defaultConfigs  = []string{throughput.NAPIOff, throughput.NAPIOn, throughput.NAPIThreaded, throughput.Bridge, throughput.Direct}
	defaultReps     = 9
	defaultDuration = 2 * time.Second
	defaultOmit     = time.Second
	defaultTime     = "about 15 minutes"
)

// --full: every configuration, both directions, UDP and MTU-sized frames.
var (
	fullReps = 5
	fullTime = "about 40 minutes"
)

// Quick mode: a smoke test of the whole bench in well under a minute.
var (
	quickConfigs   = []string{throughput.NAPIOff, throughput.NAPIOn, throughput.Bridge, throughput.Direct}
	quickReps      = 2
	quickDuration  = time.Second
	quickWorkloads = func() []throughput.Workload {
		w := throughput.Workloads([]int{4096}, []int{1}, throughput.DefaultDirs, false)
		return append(w, throughput.Workloads([]int{throughput.UDPLen}, nil, []string{throughput.WireToLab}, true)...)
	}
)

// --topology vxlan: the two-host bed. What differs between tapfwd and the
// bridge there is the path through each host (the tunnel's work is the
// kernel's in both), so the default run asks what that costs: bulk TCP
// (GSO super-frames end to end) and small writes, one and four streams,
// and UDP 64 B (a frame per datagram), host 1's lab to host 2's (the bed
// is symmetric), tapfwd with IFF_NAPI off and on against the bridges.
var (
	vxlanConfigs      = []string{throughput.NAPIOff, throughput.NAPIOn, throughput.Bridge}
	vxlanQuickConfigs = []string{throughput.NAPIOn, throughput.Bridge}
	vxlanTime         = "about 10 minutes"
	vxlanWorkloads    = func() []throughput.Workload {
		w := throughput.Workloads([]int{4096, 128 << 10}, []int{1, 4}, []string{throughput.WireToLab}, false)
		return append(w, throughput.Workloads(nil, nil, []string{throughput.WireToLab}, true)...)
	}
)

// throughputFlags are the throughput bench's flags.
type throughputFlags struct {
	*benchFlags
	dur, omit                        *time.Duration
	quick, full, udp, wireMTU, asCSV *bool
	configs, sizes, streams, dirs    *string
	groFlush                         *time.Duration
	deferIRQs                        *int
	target                           *float64
	iperfCPUs                        *string
	topology                         *string
}

func throughputFlagSet(stderr io.Writer) (*flag.FlagSet, *throughputFlags) {
	fs := newFlagSet("throughput", "throughput [flags]", stderr)
	fs.Usage = func() { throughputUsage(fs, stderr) }
	return fs, &throughputFlags{
		benchFlags: addBenchFlags(fs, repsDefault{reps: defaultReps, verdict: stats.MinReps}, "throughput.{txt,md,json,csv}) and charts (throughput.{png,svg}, napi.{png,svg}",
			"tables, --csv, --markdown, --out charts", "log each test bed (its namespaces) and every failure to stderr"),
		dur:       fs.Duration("duration", defaultDuration, "measured length of each iperf3 run (-t), rounded up to whole seconds"),
		omit:      fs.Duration("omit", defaultOmit, "start of each iperf3 run left out of its figure (-O), whole seconds; 0 for none"),
		quick:     fs.Bool("quick", false, "smoke test under a minute (see above)"),
		full:      fs.Bool("full", false, "every configuration, both directions, UDP and MTU-sized frames (see above)"),
		configs:   fs.String("configs", strings.Join(defaultConfigs, ","), "comma-separated configurations to run, in report order"),
		sizes:     fs.String("sizes", "64,128,4K", "TCP write sizes (iperf3 -l) in bytes; K means 1024"),
		streams:   fs.String("streams", "1,4", "TCP parallel stream counts (iperf3 -P)"),
		dirs:      fs.String("dirs", "w2l", "directions: both, wire->lab (w2l) or lab->wire (l2w)"),
		udp:       fs.Bool("udp", false, "also run UDP 64 B at unlimited rate (delivered kpps and loss)"),
		wireMTU:   fs.Bool("wire-mtu", false, "also run TCP wire->lab with TSO and GSO off on the wire's veth, so MTU-sized frames reach the forwarder (where userspace GRO matters)"),
		target:    fs.Float64("target", stats.TargetHalfWidth, "widest interval that gets a verdict, as its half-width in percent of the median compared against; 0 for no limit"),
		groFlush:  fs.Duration("gro-flush-timeout", throughput.DefaultTAPNAPI.GROFlushTimeout, "the TAP's gro_flush_timeout in the "+throughput.NAPIGRO+" configuration"),
		deferIRQs: fs.Int("defer-hard-irqs", throughput.DefaultTAPNAPI.DeferHardIRQs, "the TAP's napi_defer_hard_irqs in the "+throughput.NAPIGRO+" configuration"),
		asCSV:     fs.Bool("csv", false, "print one CSV line per configuration and workload"),
		topology:  fs.String("topology", string(matrix.Veth), "the test bed: veth (one host: wire veth, forwarder, lab) or vxlan (two hosts, a lab on each, one segment over a VXLAN device per host; see above)"),
		iperfCPUs: fs.String("iperf-cpus", "auto", "pin iperf3 in every run: WIRE,LAB are the CPUs of the client (wire namespace) and the server (lab namespace), e.g. 1,0; auto puts the client beside tapfwd's worker on the first CPU and the server on the second; none leaves them to the scheduler. With few CPUs, where they run decides the figures"),
	}
}

func throughputUsage(fs *flag.FlagSet, stderr io.Writer) {
	fmt.Fprintf(stderr, `Usage: tapfwd-bench throughput [flags]
       tapfwd-bench compare [flags] A.json B.json

Builds a fresh wire/fwd/lab namespace test bed for every configuration and
repetition, runs every workload on it with iperf3, and reports medians with
95%% bootstrap intervals, the ratio to the Linux bridge, what each path
costs the whole machine in CPU per unit delivered, and the TAP's NAPI
modes against IFF_NAPI off, compared within each repetition, with a
verdict. Configurations are interleaved (A B C, B C A, ...). Needs root,
iperf3 and a tapfwd binary (--tapfwd). Everything it creates is removed,
also on Ctrl-C.

Configurations (--configs):
`)
	for _, c := range throughput.Configs(throughput.DefaultTAPNAPI) {
		fmt.Fprintf(stderr, "  %-15s %s\n", c.Name, c.Description)
	}
	fmt.Fprintf(stderr, `
Default run: configurations %s;
TCP -l 64, 128, 4096 x -P 1, 4, wire->lab (the QEMU patch's table, where
IFF_NAPI acts); %d repetitions of %v runs after %v left out: %s
on a 2-CPU VM. A verdict needs %d repetitions and an interval within
+-%.1f%% (--target).
--full: every configuration; TCP both directions, UDP 64 B both ways and
MTU-sized frames from the wire; %d repetitions: %s.
--quick: configurations %s;
TCP 4 KB 1 stream both ways and UDP 64 B wire->lab; %d repetitions of %v:
under a minute, a smoke test, not a measurement. Flags given explicitly
override what --full and --quick pick.

--topology vxlan: the same method across two hosts (namespaces joined by
an underlay veth, a kernel VXLAN device on each, a lab on each; one L2
segment): tapfwd on each host's VXLAN device against a Linux bridge on
each host enslaving it. wire->lab is host 1's lab to host 2's; every frame
crosses a forwarder (or bridge) on each host and the tunnel. The direct
veth and the naive forwarder do not run there. Its default run:
configurations %s;
TCP -l 4K and 128K x -P 1, 4 and UDP 64 B, wire->lab; %d repetitions:
%s. With --quick: %s. --full: every configuration
that runs there.

Flags:
`, strings.Join(defaultConfigs, ", "), defaultReps, defaultDuration, defaultOmit, defaultTime, stats.MinReps, stats.TargetHalfWidth,
		fullReps, fullTime, strings.Join(quickConfigs, ", "), quickReps, quickDuration,
		strings.Join(vxlanConfigs, ", "), defaultReps, vxlanTime, strings.Join(vxlanQuickConfigs, ", "))
	cliflag.PrintDefaults(stderr, fs)
}

// options checks the flags and turns them into the run's options.
func (f *throughputFlags) options(fs *flag.FlagSet) (throughput.Options, error) {
	var o throughput.Options
	set, err := f.check(fs, f.asCSV)
	if err != nil {
		return o, err
	}
	switch {
	case *f.quick && *f.full:
		return o, errors.New("--quick and --full: pick one")
	case *f.dur < time.Second || *f.dur > time.Hour:
		return o, fmt.Errorf("--duration %v: want 1s to 1h", *f.dur)
	case *f.omit < 0 || *f.omit > time.Minute:
		return o, fmt.Errorf("--omit %v: want 0 to 1m", *f.omit)
	case *f.target < 0 || *f.target > 100:
		return o, fmt.Errorf("--target %v: want 0 (no limit) to 100 percent", *f.target)
	case *f.groFlush <= 0 || *f.deferIRQs < 0:
		return o, errors.New("--gro-flush-timeout must be positive and --defer-hard-irqs not negative")
	}
	if o.IperfPin, err = parseIperfCPUs(*f.iperfCPUs); err != nil {
		return o, err
	}
	if o.Lab.Topology, err = matrix.ParseTopology(*f.topology); err != nil {
		return o, fmt.Errorf("--topology: %w", err)
	}
	all := throughput.Configs(throughput.TAPNAPI{GROFlushTimeout: *f.groFlush, DeferHardIRQs: *f.deferIRQs})
	if o.Configs, err = report.SelectConfigs(all, splitList(*f.configs)); err != nil {
		return o, fmt.Errorf("--configs: %w", err)
	}
	if *f.full {
		f.fullMatrix(set)
	}
	if o.Workloads, err = f.workloads(); err != nil {
		return o, err
	}
	o.Reps, o.Duration, o.Omit, o.Bootstrap = *f.reps, *f.dur, *f.omit, f.bootstrap()
	o.Rule = stats.Rule{MinReps: stats.MinReps, MaxHalfWidth: *f.target}
	switch {
	case *f.full:
		if !set["configs"] {
			o.Configs = all
		}
		if !set["reps"] {
			o.Reps = fullReps
		}
	case *f.quick:
		f.quickRun(&o, set)
	case o.Lab.Topology == matrix.VXLAN:
		vxlanRun(&o, set)
	}
	if len(o.Workloads) == 0 {
		return o, errors.New("no workload: give --sizes and --streams, or --udp")
	}
	return o, nil
}

// fullMatrix points the workload flags not given at the full matrix:
// both directions, UDP, MTU-sized frames.
func (f *throughputFlags) fullMatrix(set map[string]bool) {
	if !set["dirs"] {
		*f.dirs = "both"
	}
	if !set["udp"] {
		*f.udp = true
	}
	if !set["wire-mtu"] {
		*f.wireMTU = true
	}
}

// quickRun sets what --quick picks and no flag given overrides.
func (f *throughputFlags) quickRun(o *throughput.Options, set map[string]bool) {
	if !set["configs"] {
		names := quickConfigs
		if o.Lab.Topology == matrix.VXLAN {
			names = vxlanQuickConfigs
		}
		o.Configs, _ = report.SelectConfigs(throughput.Configs(throughput.DefaultTAPNAPI), names)
	}
	if !set["reps"] {
		o.Reps = quickReps
	}
	if !set["duration"] {
		o.Duration = quickDuration
	}
	if !set["omit"] {
		o.Omit = 0
	}
	if !set["sizes"] && !set["streams"] && !set["dirs"] && !set["udp"] && !set["wire-mtu"] {
		o.Workloads = quickWorkloads()
	}
}

// vxlanRun sets what --topology vxlan picks for a default run and no flag
// given overrides.
func vxlanRun(o *throughput.Options, set map[string]bool) {
	if !set["configs"] {
		o.Configs, _ = report.SelectConfigs(throughput.Configs(throughput.DefaultTAPNAPI), vxlanConfigs)
	}
	if !set["sizes"] && !set["streams"] && !set["dirs"] && !set["udp"] && !set["wire-mtu"] {
		o.Workloads = vxlanWorkloads()
	}
}

// workloads is the matrix --sizes, --streams, --dirs, --udp and --wire-mtu
// ask for.
func (f *throughputFlags) workloads() ([]throughput.Workload, error) {
	sz, err := parseInts(*f.sizes, true)
	if err != nil {
		return nil, fmt.Errorf("--sizes: %w", err)
	}
	st, err := parseInts(*f.streams, false)
	if err != nil {
		return nil, fmt.Errorf("--streams: %w", err)
	}
	var dl []string
	switch *f.dirs {
	case "both":
		dl = throughput.DefaultDirs
	case throughput.WireToLab, "w2l":
		dl = []string{throughput.WireToLab}
	case throughput.LabToWire, "l2w":
		dl = []string{throughput.LabToWire}
	default:
		return nil, fmt.Errorf("--dirs %q: want both, w2l or l2w", *f.dirs)
	}
	w := throughput.Workloads(sz, st, dl, *f.udp)
	if *f.wireMTU && slices.Contains(dl, throughput.WireToLab) {
		w = append(w, throughput.MTUWorkload())
	}
	return w, nil
}

// parseIperfCPUs parses --iperf-cpus: "auto" (autoIperfPin), "none" or
// empty (the scheduler places them), or WIRE,LAB with CPUs this process
// may run on.
func parseIperfCPUs(s string) (*iperf.Pinning, error) {
	switch s {
	case "auto":
		return autoIperfPin(), nil
	case "", "none":
		return nil, nil
	}
	cpus, err := cpulist.ParseAllowed(s)
	if err != nil {
		return nil, fmt.Errorf("--iperf-cpus %q: %w", s, err)
	}
	if len(cpus) != 2 {
		return nil, fmt.Errorf("--iperf-cpus %q: want WIRE,LAB, two CPU numbers", s)
	}
	return &iperf.Pinning{Wire: cpus[0], Lab: cpus[1]}, nil
}

func cmdThroughput(args []string, stdout, stderr io.Writer) error {
	fs, f := throughputFlagSet(stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	o, err := f.options(fs)
	if err != nil {
		return err
	}
	if *f.from != "" {
		rep, err := throughput.Read(*f.from)
		if err != nil {
			return err
		}
		return renderThroughput(rep, f, stdout)
	}
	env, err := startBench("throughput", f.benchFlags, o.Configs, stderr, "iperf3")
	if err != nil {
		return err
	}
	defer env.stop()
	env.lab.Topology = o.Lab.Topology
	o.Lab, o.TUNFeatures, o.Progress, o.Log = env.lab, env.features, env.prog.update, env.log
	rep, err := throughput.Run(env.ctx, o)
	if err := env.finish(err); err != nil {
		return err
	}
	rep.Settings.Quick = *f.quick
	env.skipped(rep.Configs)
	return renderThroughput(rep, f, stdout)
}

// renderThroughput writes rep's files into --out (when set) and rep in
// the chosen format to stdout.
func renderThroughput(rep *throughput.Report, f *throughputFlags, stdout io.Writer) error {
	if *f.outDir != "" {
		err := writeOut(*f.outDir, map[string]func(io.Writer) error{
			"throughput.txt": rep.WriteText, "throughput.md": rep.WriteMarkdown,
			"throughput.json": rep.WriteJSON, "throughput.csv": rep.WriteCSV,
		})
		if err != nil {
			return err
		}
		if err := rep.WriteCharts(*f.outDir); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if *f.asCSV { // the flags exclude one another
		return rep.WriteCSV(stdout)
	}
	return printReport(stdout, rep, *f.asJSON, *f.asMD)
}

// autoIperfPin is the placement --iperf-cpus auto picks: the iperf3
// client on the first CPU this process may use, beside tapfwd's worker
// (tapfwd pins queue 0 there), the server alone on the second; nil, the
// scheduler's placement, with fewer than two CPUs.
func autoIperfPin() *iperf.Pinning {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	var cpus []int
	for c := 0; c < cpulist.Max && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		return nil
	}
	return &iperf.Pinning{Wire: cpus[0], Lab: cpus[1]}
}
