package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/inrun"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/cliflag"
)

// The napi presets: one row in about five minutes, or the QEMU patch's
// six rows with both questions (the default throughput run) within 25.
const (
	rowsOne       = "one"
	rowsSeed      = "seed"
	oneRowBudget  = 5 * time.Minute
	seedRowBudget = 23 * time.Minute
)

// napiFlags are the in-run bench's flags.
type napiFlags struct {
	*benchFlags
	rows                *string
	threaded, cost      *bool
	windows, maxRuns    *int
	omit, budget, delay *time.Duration
	target, equivalence *float64
}

func napiFlagSet(stdout io.Writer) (*flag.FlagSet, *napiFlags) {
	fs := newFlagSet("napi", "napi [flags]", stdout)
	fs.Usage = func() { napiUsage(fs, stdout) }
	reps := repsDefault{reps: inrun.DefaultStage1, help: "runs of every comparison in the first stage, whose spread fixes how many runs it needs (Stein's rule); even, half with arm B on each TAP queue"}
	return fs, &napiFlags{
		benchFlags:  addBenchFlags(fs, reps, "napi.{txt,md,json}", "", "log each test bed and every failure to stderr"),
		rows:        fs.String("rows", rowsOne, "one: TCP 64 B writes, 1 stream, wire->lab; seed: the QEMU patch's six rows (64 B, 128 B, 4 KB x 1 and 4 streams); or a comma-separated list of those rows by name, e.g. tcp-4KB-P4-w2l"),
		threaded:    fs.Bool("threaded", false, "also compare IFF_NAPI with the TAP's NAPI threaded against IFF_NAPI off (--rows seed always does)"),
		cost:        fs.Bool("cost", true, "also compare CPU per byte, in runs at 60% of the row's saturation"),
		windows:     fs.Int("windows", inrun.DefaultWindows, "windows of 100 ms per run, a multiple of 4 (ABBA blocks)"),
		maxRuns:     fs.Int("max-runs", inrun.DefaultMaxRuns, "a comparison whose first stage asks for more runs than this keeps its first stage, leaving the budget to the others; 0: no limit"),
		omit:        fs.Duration("omit", inrun.DefaultOmit, "start of each iperf3 run left out before the first window"),
		budget:      fs.Duration("budget", 0, "stop starting repetitions that would end past this much time from the start; 0: 5m with --rows one, 23m with --rows seed"),
		delay:       fs.Duration("delay", 0, "the positive control's delay for every 1,500 bytes of each frame written, a slowdown the bench must detect; 0 calibrates it: a quarter of the time IFF_NAPI off takes to deliver 1,500 bytes on the first row"),
		target:      fs.Float64("target", inrun.DefaultTarget, "half-width, in percent, each comparison takes runs for"),
		equivalence: fs.Float64("equivalence", stats.DefaultABRule.Equivalence, "margin, in percent: an interval wholly inside +-this is 'equivalent'"),
	}
}

func napiUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, `Usage: tapfwd-bench napi [flags]

Does IFF_NAPI help tapfwd on this kernel? One TAP with two queues, queue 0
without IFF_NAPI (A) and queue 1 with it (B), and one tapfwd worker writing
the wire's frames into one of them, switched every 100 ms in seeded random
ABBA/BAAB blocks while iperf3 runs: what slows the machine down slows both
arms alike. Each run's estimate is B's summed rate against A's; runs are
the replicates of a 95% interval, and each comparison takes the runs its
first stage says it needs (Stein's rule), within --budget. Every report
carries its checks: an A/A comparison (two queues without IFF_NAPI, must
cover 0), a positive control (a delay added to every frame written,
per 1,500 bytes, --delay, must be detected),
the estimate with 0, 20 and 40 ms left out after each switch, retransmits
around switches, the background load of every run, and the NAPI kthreads
the kernel shows. It ends in one sentence. Needs root, iperf3 and a tapfwd
binary (--tapfwd); everything it creates is removed, also on Ctrl-C.

Default: --rows one, IFF_NAPI on against off, throughput and cost: about 5
minutes. --rows seed (tapfwd-bench throughput's default run): six rows,
IFF_NAPI on and threaded against off: at most 25 minutes.

Flags:
`)
	cliflag.PrintDefaults(w, fs)
}

// options checks the flags and turns them into the run's options.
func (f *napiFlags) options(fs *flag.FlagSet) (inrun.Options, error) {
	o := inrun.Options{Omit: *f.omit, Windows: *f.windows, Cost: *f.cost, Delay: *f.delay, Budget: *f.budget, Seed: *f.seed, KthreadCPU: -1, MaxRuns: *f.maxRuns}
	_, err := f.check(fs, nil)
	if err != nil {
		return o, err
	}
	o.Rule = stats.DefaultABRule
	o.Rule.Stage1, o.Rule.TargetHalfWidth, o.Rule.Equivalence = *f.reps, *f.target, *f.equivalence
	o.Pairs = []string{inrun.PairOn}
	cpus := throughput.FirstCPUs(2)
	switch *f.rows {
	case rowsOne:
		o.Rows = inrun.OneRow(cpus)
		o.Budget = orDuration(o.Budget, oneRowBudget)
	case rowsSeed:
		o.Rows = inrun.SeedRows(cpus)
		o.Budget = orDuration(o.Budget, seedRowBudget)
		*f.threaded = true
	default:
		if o.Rows, err = pickRows(inrun.SeedRows(cpus), *f.rows); err != nil {
			return o, err
		}
		o.Budget = orDuration(o.Budget, oneRowBudget*time.Duration(len(o.Rows)))
	}
	if *f.threaded {
		o.Pairs = append(o.Pairs, inrun.PairThreaded)
	}
	if len(cpus) == 2 {
		o.KthreadCPU = cpus[1]
	}
	return o, f.checkValues(o)
}

// checkValues refuses values out of range, naming the flag and value.
func (f *napiFlags) checkValues(o inrun.Options) error {
	switch {
	case *f.maxRuns < 0:
		return fmt.Errorf("--max-runs %d: want 0 (no limit) or more", *f.maxRuns)
	case *f.reps < 2:
		return fmt.Errorf("--reps %d: a first stage needs at least 2 runs", *f.reps)
	case *f.windows < 8 || *f.windows%4 != 0 || *f.windows > 6000:
		return fmt.Errorf("--windows %d: want a multiple of 4 from 8 to 6000", *f.windows)
	case *f.omit < 0 || *f.omit > time.Minute:
		return fmt.Errorf("--omit %v: want 0 to 1m", *f.omit)
	case *f.delay < 0 || *f.delay > time.Millisecond:
		return fmt.Errorf("--delay %v: want 0 (calibrated) to 1ms", *f.delay)
	case *f.target <= 0 || *f.target > 100:
		return fmt.Errorf("--target %v: want above 0, at most 100 percent", *f.target)
	case *f.equivalence <= 0 || *f.equivalence > 100:
		return fmt.Errorf("--equivalence %v: want above 0, at most 100 percent", *f.equivalence)
	case o.Budget < 0 || o.Budget > 24*time.Hour:
		return fmt.Errorf("--budget %v: want 0 (the preset's) to 24h", *f.budget)
	}
	return nil
}

// pickRows are the rows of all named in list (comma-separated).
func pickRows(all []throughput.Workload, list string) ([]throughput.Workload, error) {
	var out []throughput.Workload
	for _, name := range splitList(list) {
		i := slices.IndexFunc(all, func(w throughput.Workload) bool { return w.Name == name })
		if i < 0 {
			names := make([]string, len(all))
			for j, w := range all {
				names[j] = w.Name
			}
			return nil, fmt.Errorf("--rows %q: want one, seed, or rows among %s", list, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

func orDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func cmdNAPI(args []string, stdout, stderr io.Writer) error {
	fs, f := napiFlagSet(stdout)
	o, err := parseOptions(fs, args, func() (inrun.Options, error) { return f.options(fs) })
	if err != nil {
		return err
	}
	return runNAPI(o, f.benchFlags, "napi", stdout, stderr)
}

// runNAPI runs the in-run bench (or renders --from) and writes its
// report: napi.* files into --out, and the chosen format to stdout.
func runNAPI(o inrun.Options, b *benchFlags, name string, stdout, stderr io.Writer) error {
	if *b.from != "" {
		return reread(*b.from, inrun.Read, func(rep *inrun.Report) error { return renderNAPI(rep, b, name, stdout) })
	}
	tapfwd := []report.Config{{Kind: report.KindTapfwd}}
	env, err := startBench("napi", b, tapfwd, stderr, "iperf3")
	if err != nil {
		return err
	}
	defer env.stop()
	if !env.tapfwdFlags["ab-control"] {
		return fmt.Errorf("%s has no in-run A/B mode (--ab-control): build a newer tapfwd or give --tapfwd", env.lab.Tapfwd)
	}
	o.Lab, o.Log = env.lab, env.log
	o.Progress = func(line string) { fmt.Fprintln(stderr, "tapfwd-bench:", line) }
	rep, err := inrun.Run(env.ctx, o)
	if err := env.finish(err); err != nil {
		return err
	}
	return renderNAPI(rep, b, name, stdout)
}

// renderNAPI writes rep's files (name.txt, .md, .json) into --out and rep
// in the chosen format to stdout, the answer last.
func renderNAPI(rep *inrun.Report, b *benchFlags, name string, stdout io.Writer) error {
	if *b.outDir != "" {
		if err := writeOut(*b.outDir, report.Files(name, rep)); err != nil {
			return err
		}
	}
	if err := printReport(stdout, rep, *b.asJSON, *b.asMD); err != nil {
		return err
	}
	if !*b.asJSON && !*b.asMD {
		fmt.Fprintln(stdout, rep.Answer)
	}
	return nil
}
