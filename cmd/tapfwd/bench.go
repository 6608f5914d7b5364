package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench"
	"github.com/tapfwd/tapfwd/bench/iperf"
	"github.com/tapfwd/tapfwd/bench/naive"
	"github.com/tapfwd/tapfwd/bench/testbed"
	"github.com/tapfwd/tapfwd/tap"
)

const benchUsage = `Usage: tapfwd bench throughput|latency [flags]

throughput: iperf3 through tapfwd in several TAP configurations and through
the baselines (Linux bridge, direct veth, a naive water-based forwarder).
latency: UDP request/response round-trip times at fixed rates and
application delays (the xsk_rr method) through tapfwd's polling modes and
the Linux bridge.
Both build their network namespaces and remove them. Run
"tapfwd bench throughput -h" or "tapfwd bench latency -h" for the flags.
`

func cmdBench(args []string, stdout, stderr io.Writer) error {
	return dispatch("tapfwd bench", benchUsage, args, map[string]command{
		"throughput": func(a []string) error { return cmdBenchThroughput(a, stdout, stderr) },
		"latency":    func(a []string) error { return cmdBenchLatency(a, stdout, stderr) },
		// Hidden: the naive baseline, started by the bench in a bed.
		"naive-forwarder": func(a []string) error { return cmdNaiveForwarder(a, stderr) },
	}, stdout, stderr)
}

// Quick mode: a smoke test of the whole bench in well under a minute.
var (
	quickConfigs   = []string{bench.NAPIOff, bench.NAPIOn, bench.Bridge, bench.Direct}
	quickReps      = 2
	quickDuration  = time.Second
	quickWorkloads = func() []bench.Workload {
		w := bench.Workloads([]int{4096}, []int{1}, bench.DefaultDirs, false)
		return append(w, bench.Workloads([]int{bench.UDPLen}, nil, []string{bench.WireToLab}, true)...)
	}
)

func cmdBenchThroughput(args []string, stdout, stderr io.Writer) error {
	all := bench.Configs(bench.DefaultTAPNAPI)
	var names []string
	for _, c := range all {
		names = append(names, c.Name)
	}
	fs := newFlagSet("bench throughput", "bench throughput [flags]", stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: tapfwd bench throughput [flags]

Builds a fresh wire/fwd/lab namespace test bed for every configuration and
repetition, runs every workload on it with iperf3, and reports medians with
95%% bootstrap intervals, the ratio to the Linux bridge, and IFF_NAPI on
against off with a verdict. Configurations are interleaved (A B C, B C A, ...).
Needs root and iperf3. Everything it creates is removed, also on Ctrl-C.

Configurations (--configs):
`)
		for _, c := range all {
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
	bf := addBenchFlags(fs, "throughput.{txt,md,json,csv}) and charts (throughput.{png,svg}, napi.{png,svg}",
		"tables, --csv, --markdown, --out charts", "log each test bed (its namespaces) and every failure to stderr")
	dur := fs.Duration("duration", time.Second, "length of each iperf3 run, rounded up to whole seconds")
	quick := fs.Bool("quick", false, "smoke test under a minute (see above)")
	configs := fs.String("configs", strings.Join(names, ","), "comma-separated configurations to run, in report order")
	sizes := fs.String("sizes", "64,128,4K", "TCP write sizes (iperf3 -l) in bytes; K means 1024")
	streams := fs.String("streams", "1,4", "TCP parallel stream counts (iperf3 -P)")
	dirs := fs.String("dirs", "both", "directions: both, wire->lab (w2l) or lab->wire (l2w)")
	udp := fs.Bool("udp", true, "also run UDP 64 B at unlimited rate (delivered kpps and loss)")
	wireMTU := fs.Bool("wire-mtu", true, "also run TCP wire->lab with TSO and GSO off on the wire's veth, so MTU-sized frames reach the forwarder (where userspace GRO matters)")
	groFlush := fs.Duration("gro-flush-timeout", bench.DefaultTAPNAPI.GROFlushTimeout, "the TAP's gro_flush_timeout in the "+bench.NAPIGRO+" configuration")
	deferIRQs := fs.Int("defer-hard-irqs", bench.DefaultTAPNAPI.DeferHardIRQs, "the TAP's napi_defer_hard_irqs in the "+bench.NAPIGRO+" configuration")
	asCSV := fs.Bool("csv", false, "print one CSV line per configuration and workload")
	iperfCPUs := fs.String("iperf-cpus", "", "pin iperf3 in every run: WIRE,LAB are the CPUs of the client (wire namespace) and the server (lab namespace), e.g. 1,0; empty leaves them to the scheduler. With few CPUs, where they run decides small-packet results")
	if err := parse(fs, args); err != nil {
		return err
	}
	set, err := bf.check(fs, asCSV)
	if err != nil {
		return err
	}
	if *dur < time.Second || *dur > time.Hour {
		return fmt.Errorf("--duration %v: want 1s to 1h", *dur)
	}
	pin, err := parseIperfCPUs(*iperfCPUs)
	if err != nil {
		return err
	}
	if *groFlush <= 0 || *deferIRQs < 0 {
		return errors.New("--gro-flush-timeout must be positive and --defer-hard-irqs not negative")
	}
	cfgs, err := bench.SelectConfigs(bench.Configs(bench.TAPNAPI{GROFlushTimeout: *groFlush, DeferHardIRQs: *deferIRQs}), splitList(*configs))
	if err != nil {
		return fmt.Errorf("--configs: %w", err)
	}
	sz, err := parseInts(*sizes, true)
	if err != nil {
		return fmt.Errorf("--sizes: %w", err)
	}
	st, err := parseInts(*streams, false)
	if err != nil {
		return fmt.Errorf("--streams: %w", err)
	}
	var dl []string
	switch *dirs {
	case "both":
		dl = bench.DefaultDirs
	case bench.WireToLab, "w2l":
		dl = []string{bench.WireToLab}
	case bench.LabToWire, "l2w":
		dl = []string{bench.LabToWire}
	default:
		return fmt.Errorf("--dirs %q: want both, w2l or l2w", *dirs)
	}
	workloads := bench.Workloads(sz, st, dl, *udp)
	if *wireMTU && slices.Contains(dl, bench.WireToLab) {
		workloads = append(workloads, bench.MTUWorkload())
	}
	if *quick {
		if !set["configs"] {
			cfgs, _ = bench.SelectConfigs(bench.Configs(bench.DefaultTAPNAPI), quickConfigs)
		}
		if !set["reps"] {
			*bf.reps = quickReps
		}
		if !set["duration"] {
			*dur = quickDuration
		}
		if !set["sizes"] && !set["streams"] && !set["dirs"] && !set["udp"] && !set["wire-mtu"] {
			workloads = quickWorkloads()
		}
	}
	if len(workloads) == 0 {
		return errors.New("no workload: give --sizes and --streams, or --udp")
	}
	if *bf.from != "" {
		rep, err := bench.ReadReport(*bf.from)
		if err != nil {
			return err
		}
		return render(rep, *bf.outDir, *bf.asJSON, *asCSV, *bf.asMD, stdout)
	}

	env, err := startBench("throughput", *bf.outDir, *bf.verbose, stderr, "iperf3")
	if err != nil {
		return err
	}
	defer env.stop()
	rep, err := bench.Throughput(env.ctx, bench.Options{
		Exe: env.exe, Configs: cfgs, Workloads: workloads, Reps: *bf.reps, Duration: *dur,
		TUNFeatures: env.features, Bootstrap: bench.Bootstrap{Seed: *bf.seed, Resamples: *bf.resamples},
		IperfPin: pin, Progress: env.prog.update, Log: env.log,
	})
	if err := env.finish(err); err != nil {
		return err
	}
	rep.Settings.Quick = *quick
	for _, c := range rep.Configs {
		env.skipped(c.Name, c.Skipped)
	}
	return render(rep, *bf.outDir, *bf.asJSON, *asCSV, *bf.asMD, stdout)
}

// render writes rep's files into outDir (when set) and rep in the chosen
// format to stdout.
func render(rep *bench.Report, outDir string, asJSON, asCSV, asMD bool, stdout io.Writer) error {
	if outDir != "" {
		err := writeOut(outDir, map[string]func(io.Writer) error{
			"throughput.txt": rep.WriteText, "throughput.md": rep.WriteMarkdown,
			"throughput.json": rep.WriteJSON, "throughput.csv": rep.WriteCSV,
		})
		if err != nil {
			return err
		}
		if err := bench.WriteCharts(rep, outDir); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	switch {
	case asJSON:
		return rep.WriteJSON(stdout)
	case asCSV:
		return rep.WriteCSV(stdout)
	case asMD:
		return rep.WriteMarkdown(stdout)
	}
	return rep.WriteText(stdout)
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("--out: writing %s: %w", path, err)
	}
	return f.Close()
}

// parseIperfCPUs parses --iperf-cpus: empty, or WIRE,LAB with CPUs this
// process may run on.
func parseIperfCPUs(s string) (*iperf.Pinning, error) {
	if s == "" {
		return nil, nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("--iperf-cpus: reading this process's CPUs: %w", err)
	}
	f := strings.Split(s, ",")
	cpus := make([]int, len(f))
	for i, v := range f {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n >= 1024 || !set.IsSet(n) {
			return nil, fmt.Errorf("--iperf-cpus %q: %q is not a CPU this process may use (%d allowed)", s, v, set.Count())
		}
		cpus[i] = n
	}
	if len(cpus) != 2 {
		return nil, fmt.Errorf("--iperf-cpus %q: want WIRE,LAB, two CPU numbers", s)
	}
	return &iperf.Pinning{Wire: cpus[0], Lab: cpus[1]}, nil
}

// benchFlags are the flags both benches share.
type benchFlags struct {
	reps, resamples *int
	seed            *uint64
	asJSON, asMD    *bool
	outDir, from    *string
	verbose         *bool
}

// addBenchFlags defines the shared flags on fs; outFiles names what --out
// writes, fromAlso what --from can render besides tables, verbose what
// --verbose logs.
func addBenchFlags(fs *flag.FlagSet, outFiles, fromAlso, verbose string) *benchFlags {
	from := "render a report saved with --json (or --out) instead of measuring"
	if fromAlso != "" {
		from += ": " + fromAlso
	}
	return &benchFlags{
		reps:      fs.Int("reps", 3, "repetitions of every configuration, interleaved (at least 3 for a verdict)"),
		seed:      fs.Uint64("seed", 1, "bootstrap seed: the same seed and samples give the same intervals"),
		resamples: fs.Int("resamples", bench.DefaultResamples, "bootstrap resamples per interval"),
		asJSON:    fs.Bool("json", false, "print the report as JSON"),
		asMD:      fs.Bool("markdown", false, "print the report as Markdown"),
		outDir:    fs.String("out", "", "also write the report ("+outFiles+") into this directory; empty writes none"),
		from:      fs.String("from", "", from),
		verbose:   fs.Bool("verbose", false, verbose),
	}
}

// check checks the shared flags after parsing (asCSV is the throughput
// bench's third format, nil for none) and returns the names of the flags
// given, so that --quick leaves them alone.
func (b *benchFlags) check(fs *flag.FlagSet, asCSV *bool) (map[string]bool, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	formats, names := 0, []string{"--json", "--markdown"}
	for _, on := range []bool{*b.asJSON, *b.asMD, asCSV != nil && *asCSV} {
		if on {
			formats++
		}
	}
	if asCSV != nil {
		names = []string{"--json", "--csv", "--markdown"}
	}
	if formats > 1 {
		return nil, fmt.Errorf("%s and %s: pick one", strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	}
	if *b.reps < 1 || *b.reps > 1000 {
		return nil, fmt.Errorf("--reps %d: want 1 to 1000", *b.reps)
	}
	if *b.resamples < 100 {
		return nil, fmt.Errorf("--resamples %d: want at least 100", *b.resamples)
	}
	return set, nil
}

// benchEnv is what a measuring bench run needs once its flags are checked:
// the tapfwd binary the beds start, the kernel's TUN features, a context
// that ends on the first SIGINT or SIGTERM (a second one kills at once),
// the log and the progress line.
type benchEnv struct {
	exe      string
	features uint32
	ctx      context.Context
	stop     context.CancelFunc
	log      *slog.Logger
	prog     *progress
	stderr   io.Writer
}

// startBench checks what every bench needs (root, namespaces, the tools
// named), creates outDir now rather than fail after the run, and sets up
// signals, logging and progress. The caller defers env.stop.
func startBench(kind, outDir string, verbose bool, stderr io.Writer, tools ...string) (*benchEnv, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("bench needs root: it builds network namespaces and TAPs (CAP_NET_ADMIN, CAP_SYS_ADMIN); run it as root, e.g. sudo tapfwd bench %s", kind)
	}
	if err := testbed.Available(); err != nil {
		return nil, err
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return nil, fmt.Errorf("%s not found: install it with apt-get install %s", t, t)
		}
	}
	features, err := tap.Probe()
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the tapfwd binary: %w", err)
	}
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return nil, fmt.Errorf("--out: %w", err)
		}
	}
	env := &benchEnv{exe: exe, features: features, stderr: stderr,
		log: slog.New(slog.DiscardHandler),
		// Log lines would break a line redrawn in place.
		prog: &progress{w: stderr, tty: isTerminal(stderr) && !verbose}}
	if verbose {
		env.log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	env.ctx, env.stop = signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal the run cleans up; a second one kills at once.
	go func() { <-env.ctx.Done(); env.stop() }()
	return env, nil
}

// finish ends the progress line and turns the run's error into what the
// user reads.
func (e *benchEnv) finish(err error) error {
	e.prog.finish()
	if errors.Is(err, bench.ErrInterrupted) {
		return errors.New("bench interrupted: its namespaces, TAPs and processes are removed")
	}
	return err
}

// skipped tells the user about a configuration that did not run.
func (e *benchEnv) skipped(name, why string) {
	if why != "" {
		fmt.Fprintf(e.stderr, "tapfwd: bench: skipped %s: %s\n", name, why)
	}
}

// writeOut writes each rendering into dir under its file name.
func writeOut(dir string, files map[string]func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	for name, write := range files {
		if err := writeFile(filepath.Join(dir, name), write); err != nil {
			return err
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseInts parses "64,128,4K"; kilo allows a K suffix (x1024). Values
// must be 1 to 1<<20.
func parseInts(s string, kilo bool) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		mul := 1
		if kilo && (strings.HasSuffix(f, "K") || strings.HasSuffix(f, "k")) {
			f, mul = f[:len(f)-1], 1024
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n*mul > 1<<20 {
			return nil, fmt.Errorf("bad value %q: want whole numbers from 1", f)
		}
		out = append(out, n*mul)
	}
	return out, nil
}

// progress draws the bench's progress on stderr: a line rewritten in place
// on a terminal, else one line per configuration visit.
type progress struct {
	w    io.Writer
	tty  bool
	last string
	wide int
}

func (p *progress) update(s bench.Progress) {
	line := fmt.Sprintf("bench: [%d/%d] %s rep %d/%d: %s, %s left", s.Done+1, s.Total, s.Config, s.Rep, s.Reps, s.Workload, s.Left.Round(time.Second))
	if s.Reps == 0 {
		// A step outside the repetitions (the latency bench's calibration).
		line = fmt.Sprintf("bench: %s: %s, then %s", s.Config, s.Workload, s.Left.Round(time.Second))
	}
	if p.tty {
		pad := max(0, p.wide-len(line))
		p.wide = len(line)
		fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
		return
	}
	visit := fmt.Sprintf("%s/%d/%s", s.Config, s.Rep, s.Workload)
	if s.Reps > 0 {
		visit = fmt.Sprintf("%s/%d", s.Config, s.Rep)
	}
	if visit != p.last {
		p.last = visit
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) finish() {
	if p.tty && p.wide > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.wide))
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// cmdNaiveForwarder runs the naive baseline (package naive) until SIGINT or
// SIGTERM. The bench starts it in a bed's fwd namespace; it is not part of
// tapfwd's interface.
func cmdNaiveForwarder(args []string, stderr io.Writer) error {
	fs := newFlagSet("bench naive-forwarder", "bench naive-forwarder --nic IFACE --tap NAME [flags]", stderr)
	nic := fs.String("nic", "", "NIC (or veth) for the packet socket; required")
	tapName := fs.String("tap", "", "TAP name; empty lets the kernel pick")
	netns := fs.String("tap-netns", "", "move the TAP into this namespace; empty keeps it here")
	addr := fs.String("tap-addr", "", "address for the TAP in CIDR form; empty assigns none")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel, stderr)
	if err != nil {
		return err
	}
	if *nic == "" {
		fmt.Fprintln(stderr, "tapfwd bench naive-forwarder: --nic is required")
		fs.Usage()
		return errUsage
	}
	c := naive.Config{NIC: *nic, TAP: *tapName, Netns: *netns, Log: log}
	if *addr != "" {
		if c.Addr, err = netip.ParsePrefix(*addr); err != nil {
			return fmt.Errorf("--tap-addr: %w", err)
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

// Quick latency run: a smoke test well under a minute.
var (
	quickLatConfigs  = []string{bench.LatBlock, bench.LatBusy, bench.Bridge}
	quickLatPoints   = "12K/0us"
	quickLatReps     = 2
	quickLatDuration = 2 * time.Second
)

func cmdBenchLatency(args []string, stdout, stderr io.Writer) error {
	all := bench.LatencyConfigs()
	var defPoints []string
	for _, p := range bench.ReferencePoints {
		defPoints = append(defPoints, p.Name)
	}
	fs := newFlagSet("bench latency", "bench latency [flags]", stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: tapfwd bench latency [flags]

Request/response latency in the manner of the kernel's xsk_rr: a UDP echo
server in the lab namespace, a client in the wire namespace that sends
requests open-loop at a fixed rate (send time and sequence number in each),
busy-waits the application delay after each reply, and records round-trip
times in a histogram (1 ns up to 2 us, then 1/1024 of the value: at most
64 ns up to 131 us). Reports min, p5, p50, p95, p99, p99.9, max, the rate
achieved and the loss per configuration and rate/delay point: medians of
the repetitions with 95%% bootstrap intervals, interleaved like the
throughput bench, and verdicts for the polling modes against each other
and tapfwd against the bridge. Before the matrix, each point's rate is
probed on --calibrate and capped where this machine cannot sustain it.
Needs root. Everything it creates is removed, also on Ctrl-C.

Configurations (--configs; default all but direct):
`)
		for _, c := range all {
			fmt.Fprintf(stderr, "  %-19s %s\n", c.Name, c.Description)
		}
		fmt.Fprintf(stderr, `
Default matrix: the reference's points %s (RATE/DELAY) x the
configurations, %d repetitions of 2 s runs: about 5 minutes on a 2-CPU VM.
--quick: configurations %s; point %s; %d repetitions of %v;
no calibration: under 40 s, a smoke test, not a measurement. Flags given
explicitly override what --quick picks.

Flags:
`, strings.Join(defPoints, ", "), 3, strings.Join(quickLatConfigs, ", "), quickLatPoints, quickLatReps, quickLatDuration)
		fs.PrintDefaults()
	}
	bf := addBenchFlags(fs, "latency.{txt,md,json}", "",
		"log each test bed (its namespaces), each calibration probe and every failure to stderr")
	dur := fs.Duration("duration", 2*time.Second, "measured length of each run (after the warm-up)")
	warmup := fs.Duration("warmup", 200*time.Millisecond, "requests sent before each run's measured part and not counted")
	quick := fs.Bool("quick", false, "smoke test under 40 s (see above)")
	configs := fs.String("configs", strings.Join(bench.DefaultLatencyConfigs, ","), "comma-separated configurations to run, in report order")
	points := fs.String("points", strings.Join(defPoints, ","), "comma-separated RATE/DELAY points: requests per second (K = 1000) and the application delay (us when no unit)")
	size := fs.Int("size", bench.DefaultRRPayload, "UDP payload of a request and its reply, bytes (24 to 1400)")
	calibrate := fs.String("calibrate", bench.LatBlock, `configuration each point's rate is checked on before the matrix (capped where not sustained); "none" runs the rates as asked`)
	if err := parse(fs, args); err != nil {
		return err
	}
	set, err := bf.check(fs, nil)
	if err != nil {
		return err
	}
	if *dur < 100*time.Millisecond || *dur > time.Hour {
		return fmt.Errorf("--duration %v: want 100ms to 1h", *dur)
	}
	if *warmup < 0 || *warmup > time.Minute {
		return fmt.Errorf("--warmup %v: want 0 to 1m", *warmup)
	}
	if *size < 24 || *size > 1400 {
		return fmt.Errorf("--size %d: want 24 to 1400", *size)
	}
	cfgs, err := bench.SelectConfigs(all, splitList(*configs))
	if err != nil {
		return fmt.Errorf("--configs: %w", err)
	}
	pts, err := bench.ParsePoints(*points)
	if err != nil {
		return fmt.Errorf("--points: %w", err)
	}
	cal := *calibrate
	if *quick {
		if !set["configs"] {
			cfgs, _ = bench.SelectConfigs(all, quickLatConfigs)
		}
		if !set["points"] {
			pts, _ = bench.ParsePoints(quickLatPoints)
		}
		if !set["reps"] {
			*bf.reps = quickLatReps
		}
		if !set["duration"] {
			*dur = quickLatDuration
		}
		if !set["calibrate"] {
			cal = "none"
		}
	}
	if cal == "none" {
		cal = ""
	} else if _, err := bench.SelectConfigs(all, []string{cal}); err != nil {
		return fmt.Errorf("--calibrate: %w", err)
	}
	if *bf.from != "" {
		rep, err := bench.ReadLatencyReport(*bf.from)
		if err != nil {
			return err
		}
		return renderLatency(rep, *bf.outDir, *bf.asJSON, *bf.asMD, stdout)
	}

	env, err := startBench("latency", *bf.outDir, *bf.verbose, stderr)
	if err != nil {
		return err
	}
	defer env.stop()
	rep, err := bench.Latency(env.ctx, bench.LatencyOptions{
		Exe: env.exe, Configs: cfgs, Points: pts, Reps: *bf.reps, Duration: *dur, Warmup: *warmup, Payload: *size,
		Calibrate: cal, TUNFeatures: env.features, Bootstrap: bench.Bootstrap{Seed: *bf.seed, Resamples: *bf.resamples},
		Progress: env.prog.update, Log: env.log,
	})
	if err := env.finish(err); err != nil {
		return err
	}
	rep.Settings.Quick = *quick
	for _, c := range rep.Configs {
		env.skipped(c.Name, c.Skipped)
	}
	for _, p := range rep.Points {
		if p.Capped != "" {
			fmt.Fprintf(stderr, "tapfwd: bench: %s: %s\n", p.Name, p.Capped)
		}
	}
	return renderLatency(rep, *bf.outDir, *bf.asJSON, *bf.asMD, stdout)
}

// renderLatency writes rep's files into outDir (when set) and rep in the
// chosen format to stdout.
func renderLatency(rep *bench.LatencyReport, outDir string, asJSON, asMD bool, stdout io.Writer) error {
	if outDir != "" {
		err := writeOut(outDir, map[string]func(io.Writer) error{
			"latency.txt": rep.WriteText, "latency.md": rep.WriteMarkdown, "latency.json": rep.WriteJSON,
		})
		if err != nil {
			return err
		}
	}
	switch {
	case asJSON:
		return rep.WriteJSON(stdout)
	case asMD:
		return rep.WriteMarkdown(stdout)
	}
	return rep.WriteText(stdout)
}
