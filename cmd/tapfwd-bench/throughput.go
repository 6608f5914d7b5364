package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/inrun"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/bench/throughputview"
	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
)

// The default run answers the QEMU patch's question inside each run
// (tapfwd-bench napi --rows seed, package inrun). Given --configs, a
// preset, a workload flag or --topology, the run compares configurations
// between runs instead: by default the QEMU patch's rows (TCP 64 B, 128 B
// and 4 KB writes, one stream and several) wire->lab, the TAP's NAPI
// modes, the bridge (ratios and cost) and the direct veth, sequential: a
// first stage of stats.Stage1Reps repetitions, then as many as the
// comparisons need for intervals within +-7.5%, within a budget
// (docs/design/bench-method.md: "The default run: why these settings").
var (
	defaultConfigs  = []string{throughput.NAPIOff, throughput.NAPIOn, throughput.NAPIThreaded, throughput.Bridge, throughput.Direct}
	defaultReps     = stats.Stage1Reps
	defaultBudget   = 25 * time.Minute
	defaultDuration = 2 * time.Second
	defaultOmit     = time.Second
	defaultTime     = "10 to 25 minutes"
)

// betweenRunFlags are the flags that make a throughput run compare
// configurations between runs rather than inside them.
var betweenRunFlags = []string{"configs", "quick", "full", "perf", "topology", "sizes", "streams", "dirs", "udp", "wire-mtu",
	"before", "against-bridge", "placement", "iperf-cpus", "gro-window", "gro-flush-timeout", "defer-hard-irqs", "trace", "csv", "duration"}

// --full: every configuration, both directions, UDP and MTU-sized frames.
var (
	fullReps = 5
	fullTime = "about 40 minutes"
)

// --perf: the guard (docs/guide/bench.md, "The guard"): tapfwd as it
// ships and Open vSwitch's userspace datapath against the bridge, paired, on the rows the targets are set for;
// a first stage of stats.Stage1Reps repetitions, then as many as the
// ratios need within perfBudget.
var (
	perfConfigs = []string{throughput.Default, throughput.OVS, throughput.Bridge}
	perfBudget  = 10 * time.Minute
	perfTime    = "7 to 10 minutes"
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
	vxlanWorkloads    = func() []throughput.Workload {
		w := throughput.Workloads([]int{4096, 128 << 10}, []int{1, 4}, []string{throughput.WireToLab}, false)
		return append(w, throughput.Workloads(nil, nil, []string{throughput.WireToLab}, true)...)
	}
)

// throughputFlags are the throughput bench's flags.
type throughputFlags struct {
	*benchFlags
	iperfFlags
	leverFlags
	dur, omit, budget                *time.Duration
	quick, full, udp, wireMTU, asCSV *bool
	perf, againstBridge              *bool
	showTrace                        *bool
	configs, sizes, streams, dirs    *string
	groFlush                         *time.Duration
	deferIRQs                        *int
	target                           *float64
	topology, before                 *string
}

func throughputFlagSet(stdout io.Writer) (*flag.FlagSet, *throughputFlags) {
	fs := newFlagSet("throughput", "throughput [flags]", stdout)
	fs.Usage = func() { throughputUsage(fs, stdout) }
	reps := repsDefault{reps: defaultReps, help: fmt.Sprintf("repetitions of every configuration, interleaved: with --budget the first stage (at least %d), else all of them (at least %d for a verdict)",
		stats.Stage1Reps, stats.MinReps)}
	return fs, &throughputFlags{
		benchFlags: addBenchFlags(fs, reps, "throughput.{txt,md,json,csv}) and charts (throughput.{png,svg}, napi.{png,svg}",
			"tables, --csv, --markdown, --out charts", "log each test bed (its namespaces) and every failure to stderr"),
		iperfFlags:    addIperfFlags(fs, true),
		leverFlags:    addLeverFlags(fs),
		dur:           fs.Duration("duration", defaultDuration, "measured length of each iperf3 run (-t), rounded up to whole seconds"),
		omit:          fs.Duration("omit", defaultOmit, "start of each iperf3 run left out of its figure (-O), whole seconds; 0 for none"),
		budget:        fs.Duration("budget", defaultBudget, "sequential run: after the first --reps repetitions go on until every comparison has the pairs it needs for an interval within --target, or until the next repetition would end past this much time from the start (e.g. 25m, 1h30m); 0 runs exactly --reps"),
		quick:         fs.Bool("quick", false, "smoke test under a minute (see above)"),
		full:          fs.Bool("full", false, "every configuration, both directions, UDP and MTU-sized frames (see above)"),
		perf:          fs.Bool("perf", false, "the guard: tapfwd as it ships against the bridge on TCP default writes both ways, MTU-sized frames, 4 streams and UDP 64 B, with the targets (see above)"),
		againstBridge: fs.Bool("against-bridge", false, "also compare every forwarder with the bridge in pairs (the sequential rule then takes pairs for those ratios too); --perf sets it"),
		configs:       fs.String("configs", strings.Join(defaultConfigs, ","), "comma-separated configurations to run, in report order"),
		before:        fs.String("before", "", "a tapfwd binary built before a change: also run it, as it ships, as configuration "+throughput.Before+", interleaved with the others (the guard's before and after in one run: --perf --before /tmp/tapfwd-before)"),
		sizes:         fs.String("sizes", "64,128,4K", "TCP write sizes (iperf3 -l) in bytes; K means 1024"),
		streams:       fs.String("streams", "1,4", "TCP parallel stream counts (iperf3 -P)"),
		dirs:          fs.String("dirs", "w2l", "directions: both, wire->lab (w2l) or lab->wire (l2w)"),
		udp:           fs.Bool("udp", false, "also run UDP 64 B at unlimited rate (delivered kpps and loss)"),
		wireMTU:       fs.Bool("wire-mtu", false, "also run TCP wire->lab with TSO and GSO off on the wire's veth, so MTU-sized frames reach the forwarder (where userspace GRO matters)"),
		target:        fs.Float64("target", stats.TargetHalfWidth, "widest interval that gets a verdict, as its half-width in percent of the median compared against; 0 for no limit"),
		groFlush:      fs.Duration("gro-flush-timeout", throughput.DefaultTAPNAPI.GROFlushTimeout, "the TAP's gro_flush_timeout in the "+throughput.NAPIGRO+" configuration"),
		deferIRQs:     fs.Int("defer-hard-irqs", throughput.DefaultTAPNAPI.DeferHardIRQs, "the TAP's napi_defer_hard_irqs in the "+throughput.NAPIGRO+" configuration"),
		asCSV:         fs.Bool("csv", false, "print one CSV line per configuration and workload"),
		showTrace:     fs.Bool("trace", false, "add every run's trace to the tables: where tapfwd's worker, iperf3 and the TAP's NAPI kthread ran, softirqs, TCP counters, the TAP's state (a report saved with --json keeps it either way)"),
		topology:      fs.String("topology", string(matrix.Veth), "the test bed: veth (one host: wire veth, forwarder, lab) or vxlan (two hosts, a lab on each, one segment over a VXLAN device per host; see above)"),
	}
}

// printConfigs lists the configurations --configs takes, the levers last.
func printConfigs(w io.Writer) {
	for _, c := range throughput.Configs(throughput.DefaultTAPNAPI) {
		fmt.Fprintf(w, "  %-15s %s\n", c.Name, c.Description)
	}
	fmt.Fprintf(w, "tapfwd as it ships, and its levers (not in --full; a tapfwd binary without a lever's flag skips it):\n")
	for _, c := range throughput.LeverConfigs(throughput.DefaultLevers()) {
		fmt.Fprintf(w, "  %-15s %s\n", c.Name, c.Description)
	}
}

// throughputPresets is the second half of throughput's usage: the
// default run and the presets, with their settings filled in.
const throughputPresets = `
Default run (no --configs, preset, workload or --topology flag): IFF_NAPI
on and off inside each run, the way tapfwd-bench napi --rows seed
compares them: TCP -l 64, 128, 4096 x -P 1, 4, wire->lab (the QEMU
patch's table, where IFF_NAPI acts), IFF_NAPI on and the TAP's NAPI
threaded against IFF_NAPI off, with the A/A check and the positive
control, throughput and CPU per byte; at most 25 minutes (see
tapfwd-bench napi --help). --reps, --budget, --target and --omit apply
to it; --from renders either kind of report.
Between runs (--configs given): configurations %s by default;
TCP -l 64, 128, 4096 x -P 1, 4, wire->lab; runs of %v after %v left
out, iperf3 pinned with one stream and placed by the scheduler with four
(--placement auto). It is sequential: a first stage of %d repetitions,
then as many as every comparison needs for an interval within +-%.1f%%
(--target), stopping when they have them and at the latest when the next
repetition would end past %v (--budget): %s on a 2-CPU VM.
--full: every configuration; TCP both directions, UDP 64 B both ways and
MTU-sized frames from the wire; %d repetitions (no budget): %s.
--perf: the guard. Configurations %s, compared in pairs
(--against-bridge); TCP iperf3 default writes wire->lab and lab->wire,
MTU-sized frames from the wire, 4 streams wire->lab, and UDP 64 B
wire->lab, each with its target against the bridge; sequential as
above within %v: %s. Compare it with a saved baseline with
tapfwd-bench compare (make perf does both). Add levers to --configs to
measure them beside tapfwd, e.g. --configs tapfwd,tap-io-uring,bridge.
--quick: configurations %s;
TCP 4 KB 1 stream both ways and UDP 64 B wire->lab; %d repetitions of %v:
under a minute, a smoke test, not a measurement. Flags given explicitly
override what --full, --perf and --quick pick.

--topology vxlan: the same method across two hosts (namespaces joined by
an underlay veth, a kernel VXLAN device on each, a lab on each; one L2
segment): tapfwd on each host's VXLAN device against a Linux bridge on
each host enslaving it. wire->lab is host 1's lab to host 2's; every frame
crosses a forwarder (or bridge) on each host and the tunnel. The direct
veth and the naive forwarder do not run there. Its default run:
configurations %s;
TCP -l 4K and 128K x -P 1, 4 and UDP 64 B, wire->lab; sequential as
above. With --quick: %s. --full: every configuration that
runs there.

Flags:
`

func throughputUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, `Usage: tapfwd-bench throughput [flags]
       tapfwd-bench compare [flags] A.json B.json

Builds a fresh wire/fwd/lab namespace test bed for every configuration and
repetition, runs every workload on it with iperf3, and reports medians with
95% bootstrap intervals, the ratio to the Linux bridge, what each path
costs the whole machine in CPU per unit delivered, and the TAP's NAPI
modes against IFF_NAPI off, compared within each repetition, with a
verdict. Configurations are interleaved (A B C, B C A, ...). Every run is
traced (--trace shows it). Needs root, iperf3 and a tapfwd binary
(--tapfwd). Everything it creates is removed, also on Ctrl-C.

Configurations (--configs):
`)
	printConfigs(w)
	fmt.Fprintf(w, throughputPresets, strings.Join(defaultConfigs, ", "), defaultDuration, defaultOmit, stats.Stage1Reps, stats.TargetHalfWidth, defaultBudget, defaultTime,
		fullReps, fullTime, strings.Join(perfConfigs, ", "), perfBudget, perfTime, strings.Join(quickConfigs, ", "), quickReps, quickDuration,
		strings.Join(vxlanConfigs, ", "), strings.Join(vxlanQuickConfigs, ", "))
	cliflag.PrintDefaults(w, fs)
}

// options checks the flags and turns them into the run's options.
func (f *throughputFlags) options(fs *flag.FlagSet) (throughput.Options, error) {
	var o throughput.Options
	set, err := f.check(fs, f.asCSV)
	if err != nil {
		return o, err
	}
	switch {
	case len(presets(f)) > 1:
		return o, fmt.Errorf("%s: pick one", strings.Join(presets(f), " and "))
	case *f.dur < time.Second || *f.dur > time.Hour:
		return o, fmt.Errorf("--duration %v: want 1s to 1h", *f.dur)
	case *f.omit < 0 || *f.omit > time.Minute:
		return o, fmt.Errorf("--omit %v: want 0 to 1m", *f.omit)
	case *f.budget < 0 || *f.budget > 24*time.Hour:
		return o, fmt.Errorf("--budget %v: want 0 (exactly --reps) to 24h", *f.budget)
	case *f.target < 0 || *f.target > 100:
		return o, fmt.Errorf("--target %v: want 0 (no limit) to 100 percent", *f.target)
	case *f.groFlush <= 0 || *f.deferIRQs < 0 || *f.groWindow <= 0:
		return o, errors.New("--gro-flush-timeout and --gro-window must be positive and --defer-hard-irqs not negative")
	}
	if o.Lab.Topology, err = matrix.ParseTopology(*f.topology); err != nil {
		return o, fmt.Errorf("--topology: %w", err)
	}
	napi := throughput.TAPNAPI{GROFlushTimeout: *f.groFlush, DeferHardIRQs: *f.deferIRQs}
	levers := f.levers()
	all := throughput.Configs(napi)
	if o.Configs, err = report.SelectConfigs(throughput.KnownConfigs(napi, levers), splitList(*f.configs)); err != nil {
		return o, fmt.Errorf("--configs: %w", err)
	}
	if *f.full {
		f.fullMatrix(set)
	}
	if o.Workloads, err = f.workloads(); err != nil {
		return o, err
	}
	o.Reps, o.Budget, o.Duration, o.Omit, o.Bootstrap = *f.reps, *f.budget, *f.dur, *f.omit, f.bootstrap()
	o.Rule = stats.Rule{MinReps: stats.MinReps, MaxHalfWidth: *f.target}
	o.AgainstBridge = *f.againstBridge
	switch {
	case *f.perf && o.Lab.Topology == matrix.VXLAN:
		return o, errors.New("--perf runs on the one-host bed (--topology veth)")
	case *f.perf:
		perfRun(&o, set, napi, levers)
	case *f.full:
		f.fullRun(&o, set, all)
	case *f.quick:
		f.quickRun(&o, set)
	case o.Lab.Topology == matrix.VXLAN:
		vxlanRun(&o, set)
	}
	if len(o.Workloads) == 0 {
		return o, errors.New("no workload: give --sizes and --streams, or --udp")
	}
	if o.Budget > 0 && o.Reps < stats.Stage1Reps {
		return o, fmt.Errorf("--reps %d with --budget: a sequential run's first stage takes at least %d repetitions; --budget 0 runs exactly --reps", o.Reps, stats.Stage1Reps)
	}
	return o, errors.Join(f.place(&o), f.addBefore(&o))
}

// place gives every workload its placement (--placement, --iperf-cpus).
func (f *throughputFlags) place(o *throughput.Options) error {
	ws, err := f.iperfFlags.place(o.Workloads)
	if err != nil {
		return err
	}
	o.Workloads = ws
	return nil
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

// fullRun sets what --full picks and no flag given overrides: every
// configuration, a fixed number of repetitions.
func (f *throughputFlags) fullRun(o *throughput.Options, set map[string]bool, all []report.Config) {
	if !set["configs"] {
		o.Configs = all
	}
	if !set["reps"] {
		o.Reps = fullReps
	}
	if !set["budget"] {
		o.Budget = 0
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
	if !set["budget"] {
		o.Budget = 0
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

// perfRun sets what --perf picks and no flag given overrides.
func perfRun(o *throughput.Options, set map[string]bool, napi throughput.TAPNAPI, levers throughput.Levers) {
	o.AgainstBridge = true
	if !set["configs"] {
		o.Configs, _ = report.SelectConfigs(throughput.KnownConfigs(napi, levers), perfConfigs)
	}
	if !set["budget"] {
		o.Budget = perfBudget
	}
	if !set["sizes"] && !set["streams"] && !set["dirs"] && !set["udp"] && !set["wire-mtu"] {
		o.Workloads = throughput.PerfWorkloads()
	}
}

// presets are the presets given: --quick, --full, --perf.
func presets(f *throughputFlags) []string {
	var out []string
	for _, p := range []struct {
		name string
		on   bool
	}{{"--quick", *f.quick}, {"--full", *f.full}, {"--perf", *f.perf}} {
		if p.on {
			out = append(out, p.name)
		}
	}
	return out
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

// parseIperfCPUs parses --iperf-cpus: "auto" (throughput.DefaultPin),
// or WIRE,LAB with CPUs this process may use.
func parseIperfCPUs(s string) (*iperf.Pinning, error) {
	switch s {
	case "auto":
		return throughput.DefaultPin(), nil
	case "", "none":
		return nil, fmt.Errorf("--iperf-cpus %q: to leave iperf3 to the scheduler, give --placement scheduler", s)
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
	fs, f := throughputFlagSet(stdout)
	if err := parse(fs, args); err != nil {
		return err
	}
	if in, ok, err := f.inRun(fs); ok || err != nil {
		if err != nil {
			return cliflag.Misuse(fs, "%w", err)
		}
		return runNAPI(in, f.benchFlags, "throughput", stdout, stderr)
	}
	o, err := f.options(fs)
	if err != nil {
		return cliflag.Misuse(fs, "%w", err)
	}
	if *f.from != "" {
		return reread(*f.from, throughput.Read, func(rep *throughput.Report) error { return renderThroughput(rep, f, stdout) })
	}
	env, err := startBench("throughput", f.benchFlags, o.Configs, stderr, "iperf3")
	if err != nil {
		return err
	}
	defer env.stop()
	if err := checkBefore(env.ctx, o.Configs); err != nil {
		return err
	}
	env.lab.Topology = o.Lab.Topology
	o.Lab, o.TUNFeatures, o.TapfwdFlags, o.Progress, o.Log = env.lab, env.features, env.tapfwdFlags, env.prog.update, env.log
	rep, err := throughput.Run(env.ctx, o)
	if err := env.finish(err); err != nil {
		return err
	}
	rep.Settings.Quick = *f.quick
	env.skipped(rep.Configs)
	return renderThroughput(rep, f, stdout)
}

// inRun is the default run's options when no flag asks for a comparison
// between runs (betweenRunFlags) and --from names no between-run report:
// tapfwd-bench napi --rows seed, with --reps, --budget, --target and
// --omit when given.
func (f *throughputFlags) inRun(fs *flag.FlagSet) (inrun.Options, bool, error) {
	set, err := f.check(fs, f.asCSV)
	if err != nil {
		return inrun.Options{}, false, err
	}
	for _, n := range betweenRunFlags {
		if set[n] {
			return inrun.Options{}, false, nil
		}
	}
	if *f.from != "" && !inrun.IsReport(*f.from) {
		return inrun.Options{}, false, nil
	}
	nf := &napiFlags{benchFlags: f.benchFlags, rows: ptr(rowsSeed), threaded: ptr(true), cost: ptr(true), windows: ptr(inrun.DefaultWindows), maxRuns: ptr(inrun.DefaultMaxRuns),
		omit: ptr(inrun.DefaultOmit), budget: ptr(time.Duration(0)), delay: ptr(time.Duration(0)),
		target: ptr(inrun.DefaultTarget), equivalence: ptr(stats.DefaultABRule.Equivalence)}
	if !set["reps"] {
		*nf.reps = inrun.DefaultStage1
	}
	if set["budget"] {
		nf.budget = f.budget
	}
	if set["target"] {
		nf.target = f.target
	}
	if set["omit"] {
		nf.omit = f.omit
	}
	o, err := nf.options(fs)
	return o, true, err
}

func ptr[T any](v T) *T { return &v }

// renderThroughput writes rep's files into --out (when set) and rep in
// the chosen format to stdout, with every run's trace when --trace asks.
func renderThroughput(rep *throughput.Report, f *throughputFlags, stdout io.Writer) error {
	rep.Trace = *f.showTrace
	view := throughputview.Report{Report: rep}
	if *f.outDir != "" {
		files := report.Files("throughput", view)
		files["throughput.csv"] = view.WriteCSV
		if err := writeOut(*f.outDir, files); err != nil {
			return err
		}
		if err := view.WriteCharts(*f.outDir); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if *f.asCSV { // the flags exclude one another
		return view.WriteCSV(stdout)
	}
	return printReport(stdout, view, *f.asJSON, *f.asMD)
}

// addBefore adds --before's configuration.
func (f *throughputFlags) addBefore(o *throughput.Options) error {
	if *f.before == "" {
		return nil
	}
	bin, err := exec.LookPath(*f.before)
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		return fmt.Errorf("--before: %w", err)
	}
	o.Configs = throughput.WithBefore(o.Configs, bin)
	return nil
}

// checkBefore refuses a --before binary that lacks a flag its
// configuration gives (one built before the bench's defaults).
func checkBefore(ctx context.Context, cs []report.Config) error {
	for i := range cs {
		c := &cs[i]
		if c.Binary == "" {
			continue
		}
		flags, err := forwarder.Supported(ctx, c.Binary)
		if err != nil {
			return fmt.Errorf("--before: %w", err)
		}
		if !matrix.CheckFlags(c, flags) {
			return fmt.Errorf("--before %s: %s", c.Binary, c.Skipped)
		}
	}
	return nil
}
