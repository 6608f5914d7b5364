package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/latency"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/rr"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/internal/cliflag"
)

// Quick latency run: a smoke test well under a minute.
var (
	quickLatConfigs  = []string{latency.Block, latency.Busy, latency.Bridge}
	quickLatPoints   = "12K/0us"
	quickLatReps     = 2
	quickLatDuration = 2 * time.Second
)

// latencyFlags are the latency bench's flags.
type latencyFlags struct {
	*benchFlags
	dur, warmup                *time.Duration
	quick                      *bool
	configs, points, calibrate *string
	size                       *int
}

func latencyFlagSet(stdout io.Writer) (*flag.FlagSet, *latencyFlags) {
	fs := newFlagSet("latency", "latency [flags]", stdout)
	fs.Usage = func() { latencyUsage(fs, stdout) }
	return fs, &latencyFlags{
		benchFlags: addBenchFlags(fs, repsDefault{reps: 3, help: fmt.Sprintf("repetitions of every configuration, interleaved (at least %d for a verdict)", stats.MinVerdictReps)}, "latency.{txt,md,json}", "",
			"log each test bed (its namespaces), each calibration probe and every failure to stderr"),
		dur:       fs.Duration("duration", 2*time.Second, "measured length of each run (after the warm-up)"),
		warmup:    fs.Duration("warmup", 200*time.Millisecond, "requests sent before each run's measured part and not counted"),
		quick:     fs.Bool("quick", false, "smoke test under 40 s (see above)"),
		configs:   fs.String("configs", strings.Join(latency.DefaultConfigs, ","), "comma-separated configurations to run, in report order"),
		points:    fs.String("points", strings.Join(pointNames(latency.ReferencePoints), ","), "comma-separated RATE/DELAY points: requests per second (K = 1000) and the application delay (us when no unit)"),
		size:      fs.Int("size", rr.DefaultPayload, "UDP payload of a request and its reply, bytes (24 to 1400)"),
		calibrate: fs.String("calibrate", latency.Block, `configuration each point's rate is checked on before the matrix (capped where not sustained); "none" runs the rates as asked`),
	}
}

func pointNames(ps []latency.Point) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func latencyUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, `Usage: tapfwd-bench latency [flags]

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
Needs root and a tapfwd binary (--tapfwd). Everything it creates is
removed, also on Ctrl-C.

Configurations (--configs; default all but direct):
`)
	for _, c := range latency.Configs() {
		fmt.Fprintf(w, "  %-19s %s\n", c.Name, c.Description)
	}
	fmt.Fprintf(w, `
Default matrix: the reference's points %s (RATE/DELAY) x the
configurations, %d repetitions of 2 s runs: about 5 minutes on a 2-CPU VM.
--quick: configurations %s; point %s; %d repetitions of %v;
no calibration: under 40 s, a smoke test, not a measurement. Flags given
explicitly override what --quick picks.

Flags:
`, strings.Join(pointNames(latency.ReferencePoints), ", "), 3, strings.Join(quickLatConfigs, ", "), quickLatPoints, quickLatReps, quickLatDuration)
	cliflag.PrintDefaults(w, fs)
}

// options checks the flags and turns them into the run's options.
func (f *latencyFlags) options(fs *flag.FlagSet) (latency.Options, error) {
	var o latency.Options
	set, err := f.check(fs, nil)
	if err != nil {
		return o, err
	}
	switch {
	case *f.dur < 100*time.Millisecond || *f.dur > time.Hour:
		return o, fmt.Errorf("--duration %v: want 100ms to 1h", *f.dur)
	case *f.warmup < 0 || *f.warmup > time.Minute:
		return o, fmt.Errorf("--warmup %v: want 0 to 1m", *f.warmup)
	case *f.size < 24 || *f.size > 1400:
		return o, fmt.Errorf("--size %d: want 24 to 1400", *f.size)
	}
	all := latency.Configs()
	if o.Configs, err = report.SelectConfigs(all, splitList(*f.configs)); err != nil {
		return o, fmt.Errorf("--configs: %w", err)
	}
	if o.Points, err = latency.ParsePoints(*f.points); err != nil {
		return o, fmt.Errorf("--points: %w", err)
	}
	o.Reps, o.Duration, o.Warmup, o.Payload, o.Calibrate = *f.reps, *f.dur, *f.warmup, *f.size, *f.calibrate
	o.Bootstrap = f.bootstrap()
	if *f.quick {
		if !set["configs"] {
			o.Configs, _ = report.SelectConfigs(all, quickLatConfigs)
		}
		if !set["points"] {
			o.Points, _ = latency.ParsePoints(quickLatPoints)
		}
		if !set["reps"] {
			o.Reps = quickLatReps
		}
		if !set["duration"] {
			o.Duration = quickLatDuration
		}
		if !set["calibrate"] {
			o.Calibrate = "none"
		}
	}
	if o.Calibrate == "none" {
		o.Calibrate = ""
	} else if _, err := report.SelectConfigs(all, []string{o.Calibrate}); err != nil {
		return o, fmt.Errorf("--calibrate: %w", err)
	}
	return o, nil
}

func cmdLatency(args []string, stdout, stderr io.Writer) error {
	fs, f := latencyFlagSet(stdout)
	o, err := parseOptions(fs, args, func() (latency.Options, error) { return f.options(fs) })
	if err != nil {
		return err
	}
	if *f.from != "" {
		return reread(*f.from, latency.Read, func(rep *latency.Report) error { return renderLatency(rep, f, stdout) })
	}
	env, err := startBench("latency", f.benchFlags, o.Configs, stderr)
	if err != nil {
		return err
	}
	defer env.stop()
	o.Lab, o.TUNFeatures, o.Progress, o.Log = env.lab, env.features, env.prog.update, env.log
	rep, err := latency.Run(env.ctx, o)
	if err := env.finish(err); err != nil {
		return err
	}
	rep.Settings.Quick = *f.quick
	env.skipped(rep.Configs)
	for _, p := range rep.Points {
		if p.Capped != "" {
			fmt.Fprintf(stderr, "tapfwd-bench: %s: %s\n", p.Name, p.Capped)
		}
	}
	return renderLatency(rep, f, stdout)
}

// renderLatency writes rep's files into --out (when set) and rep in the
// chosen format to stdout.
func renderLatency(rep *latency.Report, f *latencyFlags, stdout io.Writer) error {
	if *f.outDir != "" {
		if err := writeOut(*f.outDir, report.Files("latency", rep)); err != nil {
			return err
		}
	}
	return printReport(stdout, rep, *f.asJSON, *f.asMD)
}
