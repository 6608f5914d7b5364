package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/cpulist"
	"github.com/tapfwd/tapfwd/testbed/iperf"
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

// throughputFlags are the throughput bench's flags.
type throughputFlags struct {
	*benchFlags
	dur                           *time.Duration
	quick, udp, wireMTU, asCSV    *bool
	configs, sizes, streams, dirs *string
	groFlush                      *time.Duration
	deferIRQs                     *int
	iperfCPUs                     *string
}

func throughputFlagSet(stderr io.Writer) (*flag.FlagSet, *throughputFlags) {
	fs := newFlagSet("throughput", "throughput [flags]", stderr)
	fs.Usage = func() { throughputUsage(fs, stderr) }
	var names []string
	for _, c := range throughput.Configs(throughput.DefaultTAPNAPI) {
		names = append(names, c.Name)
	}
	return fs, &throughputFlags{
		benchFlags: addBenchFlags(fs, "throughput.{txt,md,json,csv}) and charts (throughput.{png,svg}, napi.{png,svg}",
			"tables, --csv, --markdown, --out charts", "log each test bed (its namespaces) and every failure to stderr"),
		dur:       fs.Duration("duration", time.Second, "length of each iperf3 run, rounded up to whole seconds"),
		quick:     fs.Bool("quick", false, "smoke test under a minute (see above)"),
		configs:   fs.String("configs", strings.Join(names, ","), "comma-separated configurations to run, in report order"),
		sizes:     fs.String("sizes", "64,128,4K", "TCP write sizes (iperf3 -l) in bytes; K means 1024"),
		streams:   fs.String("streams", "1,4", "TCP parallel stream counts (iperf3 -P)"),
		dirs:      fs.String("dirs", "both", "directions: both, wire->lab (w2l) or lab->wire (l2w)"),
		udp:       fs.Bool("udp", true, "also run UDP 64 B at unlimited rate (delivered kpps and loss)"),
		wireMTU:   fs.Bool("wire-mtu", true, "also run TCP wire->lab with TSO and GSO off on the wire's veth, so MTU-sized frames reach the forwarder (where userspace GRO matters)"),
		groFlush:  fs.Duration("gro-flush-timeout", throughput.DefaultTAPNAPI.GROFlushTimeout, "the TAP's gro_flush_timeout in the "+throughput.NAPIGRO+" configuration"),
		deferIRQs: fs.Int("defer-hard-irqs", throughput.DefaultTAPNAPI.DeferHardIRQs, "the TAP's napi_defer_hard_irqs in the "+throughput.NAPIGRO+" configuration"),
		asCSV:     fs.Bool("csv", false, "print one CSV line per configuration and workload"),
		iperfCPUs: fs.String("iperf-cpus", "", "pin iperf3 in every run: WIRE,LAB are the CPUs of the client (wire namespace) and the server (lab namespace), e.g. 1,0; empty leaves them to the scheduler. With few CPUs, where they run decides small-packet results"),
	}
}

func throughputUsage(fs *flag.FlagSet, stderr io.Writer) {
	fmt.Fprintf(stderr, `Usage: tapfwd-bench throughput [flags]

Builds a fresh wire/fwd/lab namespace test bed for every configuration and
repetition, runs every workload on it with iperf3, and reports medians with
95%% bootstrap intervals, the ratio to the Linux bridge, and IFF_NAPI on
against off with a verdict. Configurations are interleaved (A B C, B C A, ...).
Needs root, iperf3 and a tapfwd binary (--tapfwd). Everything it creates is
removed, also on Ctrl-C.

Configurations (--configs):
`)
	for _, c := range throughput.Configs(throughput.DefaultTAPNAPI) {
		fmt.Fprintf(stderr, "  %-15s %s\n", c.Name, c.Description)
	}
	fmt.Fprintf(stderr, `
Default matrix: every configuration; TCP -l 64, 128, 4096 x -P 1, 4 x both
directions, and UDP 64 B at unlimited rate both ways; 3 repetitions of 1 s
runs: about %s on a 2-CPU VM (--reps 5: about 12 minutes).
--quick: configurations %s;
TCP 4 KB 1 stream both ways and UDP 64 B wire->lab; %d repetitions of %v:
under a minute, a smoke test, not a measurement. Flags given explicitly
override what --quick picks.

Flags:
`, "7 minutes", strings.Join(quickConfigs, ", "), quickReps, quickDuration)
	fs.PrintDefaults()
}

// options checks the flags and turns them into the run's options.
func (f *throughputFlags) options(fs *flag.FlagSet) (throughput.Options, error) {
	var o throughput.Options
	set, err := f.check(fs, f.asCSV)
	if err != nil {
		return o, err
	}
	if *f.dur < time.Second || *f.dur > time.Hour {
		return o, fmt.Errorf("--duration %v: want 1s to 1h", *f.dur)
	}
	if o.IperfPin, err = parseIperfCPUs(*f.iperfCPUs); err != nil {
		return o, err
	}
	if *f.groFlush <= 0 || *f.deferIRQs < 0 {
		return o, errors.New("--gro-flush-timeout must be positive and --defer-hard-irqs not negative")
	}
	all := throughput.Configs(throughput.TAPNAPI{GROFlushTimeout: *f.groFlush, DeferHardIRQs: *f.deferIRQs})
	if o.Configs, err = report.SelectConfigs(all, splitList(*f.configs)); err != nil {
		return o, fmt.Errorf("--configs: %w", err)
	}
	if o.Workloads, err = f.workloads(); err != nil {
		return o, err
	}
	o.Reps, o.Duration, o.Bootstrap = *f.reps, *f.dur, f.bootstrap()
	if *f.quick {
		if !set["configs"] {
			o.Configs, _ = report.SelectConfigs(throughput.Configs(throughput.DefaultTAPNAPI), quickConfigs)
		}
		if !set["reps"] {
			o.Reps = quickReps
		}
		if !set["duration"] {
			o.Duration = quickDuration
		}
		if !set["sizes"] && !set["streams"] && !set["dirs"] && !set["udp"] && !set["wire-mtu"] {
			o.Workloads = quickWorkloads()
		}
	}
	if len(o.Workloads) == 0 {
		return o, errors.New("no workload: give --sizes and --streams, or --udp")
	}
	return o, nil
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

// parseIperfCPUs parses --iperf-cpus: empty, or WIRE,LAB with CPUs this
// process may run on.
func parseIperfCPUs(s string) (*iperf.Pinning, error) {
	if s == "" {
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
	switch {
	case *f.asJSON:
		return rep.WriteJSON(stdout)
	case *f.asCSV:
		return rep.WriteCSV(stdout)
	case *f.asMD:
		return rep.WriteMarkdown(stdout)
	}
	return rep.WriteText(stdout)
}
