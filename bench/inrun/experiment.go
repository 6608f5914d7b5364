package inrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/abrun"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/abtap"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/napi"
)

// Options configure Run.
type Options struct {
	// Lab starts tapfwd (Lab.Tapfwd) on a fresh bed for every visit.
	Lab matrix.Lab
	// Rows are the workloads; the checks (A/A, control) run on the first.
	Rows []throughput.Workload
	// Pairs are the questions, PairOn and PairThreaded; the checks are
	// always added.
	Pairs []string
	// Windows per run (of abrun.Window each); 0 means DefaultWindows.
	Windows int
	// Omit is the start of each iperf3 run left out before the windows.
	Omit time.Duration
	// Cost adds, for every comparison, runs at CostShare of the row's
	// saturation, for CPU per byte.
	Cost bool
	// Rule decides the verdicts and the runs each comparison needs.
	Rule stats.ABRule
	// Budget bounds the run: no repetition past the first stage starts
	// that would end after it.
	Budget time.Duration
	// Seed seeds the schedules and the order of the rows.
	Seed uint64
	// Delay is the positive control's delay per 1,500 bytes of every
	// frame written (abtap.DelayUnit); 0 calibrates it (controlDelay).
	Delay time.Duration
	// KthreadCPU is where the threaded pair's NAPI kthread is pinned; -1
	// leaves it.
	KthreadCPU int
	// MaxRuns, when positive, is the most runs a comparison's first stage
	// may ask for and get: one that asks for more keeps its first stage,
	// and the budget goes to the others.
	MaxRuns int
	// BackgroundLimit is the background load, in CPUs, above which a run
	// is flagged.
	BackgroundLimit float64
	Log             *slog.Logger
	// Progress, when set, hears one line per run.
	Progress func(string)
}

// Defaults.
const (
	DefaultWindows = 40
	// DefaultStage1 is the first stage's runs: even, so that half of them
	// run in each orientation (swappedIn).
	DefaultStage1 = 6
	// DefaultMaxRuns is Options.MaxRuns unless given.
	DefaultMaxRuns = 40
	// DefaultTarget is the half-width, in percent, each comparison takes
	// runs for: an estimate within ±1.5% then lies wholly inside the ±5%
	// of an equivalence verdict.
	DefaultTarget = 3.5
	DefaultOmit   = 500 * time.Millisecond
	// ControlShare is the calibrated control's delay per 1,500 bytes, as
	// a share of the time arm A takes to deliver 1,500 bytes on the first
	// row: with 1, arm B's worker spends, spinning alone, all the time
	// arm A took for the same bytes, so B cannot keep A's rate. A smaller
	// share can hide in a worker with time to spare, and a spinning
	// worker, which never sleeps, can even be faster (on 4 KB writes a
	// quarter share read +16%).
	ControlShare = 1.0
	// DefaultDelay is the control's delay per 1,500 bytes when nothing
	// has measured the first row yet (the control runs alone): a quarter
	// of the time at 0.15 Gbit/s.
	DefaultDelay = 20 * time.Microsecond
	// CostShare is the offered rate of a cost run, as a share of the
	// row's saturation (the median rate of arm A's windows so far).
	CostShare = 0.6
	// DefaultBackgroundLimit flags runs during which other work took more
	// than a third of a CPU.
	DefaultBackgroundLimit = 0.33
)

// key names a comparison: a pair on a row, throughput or cost.
type key struct {
	Pair, Row string
	Cost      bool
}

// has says whether r is a run of k that finished: k's pair, row and
// observable, without an error.
func (k key) has(r abrun.Record) bool {
	return r.Pair == k.Pair && r.Row == k.Row && r.Cost == k.Cost && r.Err == ""
}

// experiment is a run in progress.
type experiment struct {
	o     Options
	pairs []pairDef
	runs  []abrun.Record
	start time.Time
	// runTime is the mean time a run took, visits included.
	spent    time.Duration
	made     int
	setups   []Setup
	delay    time.Duration // the control's, once decided
	rng      *rand.Rand
	stopping string
}

// Run measures every pair on every row in repetitions: each visits every
// tapfwd instance once, on a fresh bed, and makes on it a run of each of
// its pairs on each row (and a cost run), rows in a seeded random order.
// After Rule.Stage1 repetitions, a comparison takes more runs only while
// Stein's rule says it needs them (stats.ABRunsNeeded), within Budget.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	e := &experiment{o: o, start: time.Now(), rng: rand.New(rand.NewPCG(o.Seed, 0x1ab))}
	for _, p := range pairDefs(o.Delay) {
		if p.check || slices.Contains(o.Pairs, p.name) {
			e.pairs = append(e.pairs, p)
		}
	}
	r := newReport(o)
	for rep := 1; ; rep++ {
		todo := e.pending(rep)
		if len(todo) == 0 {
			e.stopping = matrix.StopTarget
			break
		}
		if rep > o.Rule.Stage1 && e.made > 0 && time.Since(e.start)+e.estimate(todo) > o.Budget {
			e.stopping = matrix.StopBudget
			break
		}
		if err := e.repetition(ctx, rep, todo); err != nil {
			return nil, err
		}
	}
	r.finish(e)
	return r, nil
}

func (o *Options) defaults() error {
	if o.Windows == 0 {
		o.Windows = DefaultWindows
	}
	if o.Rule == (stats.ABRule{}) {
		o.Rule = stats.DefaultABRule
	}
	if o.BackgroundLimit == 0 {
		o.BackgroundLimit = DefaultBackgroundLimit
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	switch {
	case len(o.Rows) == 0:
		return errors.New("inrun: no row to measure")
	case o.Windows < 8 || o.Windows%4 != 0:
		return fmt.Errorf("inrun: %d windows a run: want a multiple of 4, at least 8 (ABBA blocks)", o.Windows)
	}
	return nil
}

// task is one comparison's runs in a visit: n runs of a pair on row w,
// throughput or cost.
type task struct {
	w    throughput.Workload
	cost bool
	n    int
}

// PerVisit is the most runs a comparison makes in one visit after the
// first stage (whose runs come one a visit, each on its own bed).
const PerVisit = 3

// pending is what repetition rep runs, by pair: in the first stage a run
// of every comparison (cost too, with Options.Cost), then, for the
// throughput comparisons whose first stage asks for more runs than they
// have (and no more than Options.MaxRuns), up to PerVisit runs each.
// Cost comparisons keep their first stage: the question is throughput,
// and the budget goes to it.
func (e *experiment) pending(rep int) map[string][]task {
	todo := map[string][]task{}
	for _, p := range e.pairs {
		for i, w := range e.o.Rows {
			if p.check && i > 0 {
				break
			}
			if rep <= e.o.Rule.Stage1 {
				todo[p.name] = append(todo[p.name], task{w, false, 1})
				if e.o.Cost {
					todo[p.name] = append(todo[p.name], task{w, true, 1})
				}
				continue
			}
			if n := e.wants(key{p.name, w.Name, false}); n > 0 {
				todo[p.name] = append(todo[p.name], task{w, false, min(n, PerVisit)})
			}
		}
	}
	return todo
}

// wants is how many more runs comparison k's first stage asks for: 0
// when it has them, or when it asks for more than Options.MaxRuns (no
// budget would give them: the runs go to comparisons they can answer).
func (e *experiment) wants(k key) int {
	d := e.estimates(k, guardHeadline)
	need := stats.ABRunsNeeded(d, e.o.Rule)
	if need < 0 || (e.o.MaxRuns > 0 && need > e.o.MaxRuns) {
		return 0
	}
	return max(need-len(d), 0)
}

// estimate is how long the runs todo would take, at the mean so far.
func (e *experiment) estimate(todo map[string][]task) time.Duration {
	n := 0
	for _, ts := range todo {
		for _, t := range ts {
			n += t.n
		}
	}
	return time.Duration(n) * e.spent / time.Duration(e.made)
}

// repetition visits each instance that has pending pairs, in an order
// that turns with rep.
func (e *experiment) repetition(ctx context.Context, rep int, todo map[string][]task) error {
	insts := []string{instNAPI, instThreaded, instPlain}
	for i := range insts {
		inst := insts[(i+rep-1)%len(insts)]
		var pairs []pairDef
		for _, p := range e.pairs {
			if p.instance == inst && len(todo[p.name]) > 0 {
				pairs = append(pairs, p)
			}
		}
		if len(pairs) == 0 {
			continue
		}
		t0 := time.Now()
		n0 := len(e.runs)
		err := e.visit(ctx, inst, rep, pairs, todo)
		e.spent += time.Since(t0)
		e.made += len(e.runs) - n0
		if ctx.Err() != nil {
			return matrix.Interrupted(ctx)
		}
		if err != nil {
			return fmt.Errorf("inrun: %s instance, repetition %d: %w", inst, rep, err)
		}
	}
	return nil
}

// visit builds a bed, starts tapfwd as instance inst with a control FIFO,
// checks what the kernel shows of its queues, and makes the runs of
// pairs.
func (e *experiment) visit(ctx context.Context, inst string, rep int, pairs []pairDef, todo map[string][]task) error {
	dir, err := os.MkdirTemp("", "tapfwd-inrun-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "control")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return fmt.Errorf("inrun: control FIFO: %w", err)
	}
	// Held open for reading and writing, it never blocks and tapfwd never
	// sees it end while the bench runs.
	ctl, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("inrun: control FIFO: %w", err)
	}
	defer ctl.Close()
	swapped := swappedIn(rep)
	opts := instanceOptions(inst, e.controlDelay(), e.o.KthreadCPU, swapped)
	opts.ABControl = path
	c := report.Tapfwd(inst, "in-run A/B instance "+inst, opts)
	return e.o.Lab.Visit(ctx, &c, rep, func(bed *testbed.Bed, fws matrix.Forwarders) error {
		kthreads, _ := napi.Kthreads(bed.LabIf)
		e.setups = append(e.setups, Setup{Instance: inst, Rep: rep, Swapped: swapped, Kthreads: len(kthreads), Want: wantKthreads(inst)})
		if len(kthreads) != wantKthreads(inst) {
			return fmt.Errorf("the TAP has %d NAPI kthreads, want %d: its queues are not what the instance asked for", len(kthreads), wantKthreads(inst))
		}
		spec := abrun.Spec{Bed: bed, Tapfwd: fws.Pids()[0], Ctl: ctl, Kthreads: kthreads, Windows: e.o.Windows, Omit: e.o.Omit, Swapped: swapped}
		for _, p := range pairs {
			if err := e.pairRuns(ctx, spec, p, rep, todo[p.name], fws); err != nil {
				return err
			}
		}
		return nil
	})
}

// wantKthreads is how many NAPI kthreads instance inst's TAP has: one
// with its NAPI threaded (only queue 1 has a NAPI), none otherwise.
func wantKthreads(inst string) int {
	if inst == instThreaded {
		return 1
	}
	return 0
}

// pairRuns makes pair p's runs of tasks, in a seeded random order,
// throughput before cost on a row (a cost run offers CostShare of the
// row's saturation, known once a throughput run measured it).
func (e *experiment) pairRuns(ctx context.Context, s abrun.Spec, p pairDef, rep int, tasks []task, fws matrix.Forwarders) error {
	var order []task
	for _, t := range tasks {
		for range t.n {
			order = append(order, task{t.w, t.cost, 1})
		}
	}
	e.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	slices.SortStableFunc(order, func(a, b task) int { return cmpBool(a.cost, b.cost) })
	for _, t := range order {
		if err := fws.Alive(); err != nil {
			return err
		}
		s.Workload, s.Arms, s.Seed, s.Rate = t.w, orient(p.arms, s.Swapped), e.rng.Uint64(), 0
		if t.cost {
			if s.Rate = CostShare * e.saturation(t.w.Name); s.Rate <= 0 {
				continue
			}
		}
		r, err := abrun.Measure(ctx, s)
		r.Pair, r.Row, r.Rep, r.Swapped = p.name, t.w.Name, rep, s.Swapped
		r.Flagged = r.Background > e.o.BackgroundLimit
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.Err = matrix.ErrLine(err)
			e.o.Log.Warn("run failed", "pair", p.name, "row", t.w.Name, "rep", rep, "err", err)
		}
		e.runs = append(e.runs, r)
		e.progress(r)
	}
	return nil
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// saturation is the median rate of arm A's windows, in Gbit/s, over the
// throughput runs of row so far; 0 before there is one.
func (e *experiment) saturation(row string) float64 {
	var rates []float64
	for _, r := range e.runs {
		if r.Row == row && !r.Cost && r.Err == "" {
			a, _ := stats.ABSums(r.Windows, guardHeadline)
			if a.Seconds > 0 {
				rates = append(rates, a.Bytes*8/a.Seconds/1e9)
			}
		}
	}
	if len(rates) == 0 {
		return 0
	}
	return stats.Median(rates)
}

// progress tells o.Progress about run r.
func (e *experiment) progress(r abrun.Record) {
	if e.o.Progress == nil {
		return
	}
	what := "throughput"
	if r.Cost {
		what = fmt.Sprintf("cost at %.2f Gbit/s", r.RateGbit)
	}
	line := fmt.Sprintf("[%s] rep %d %s %s %s: ", time.Since(e.start).Round(time.Second), r.Rep, r.Pair, r.Row, what)
	if r.Err != "" {
		e.o.Progress(line + "failed: " + r.Err)
		return
	}
	f, est := stats.RunEffect, "rate"
	if r.Cost {
		f, est = stats.RunCost, "CPU per byte"
	}
	if d, ok := f(r.Windows, guardHeadline); ok {
		line += fmt.Sprintf("%s B/A %+.1f%%, background %.2f CPUs", est, 100*(expm1(d)), r.Background)
	}
	e.o.Progress(line)
}

// estimates are comparison k's per-run estimates under guard g, in the
// order the runs were made.
func (e *experiment) estimates(k key, g int) []float64 {
	return runEstimates(e.runs, k, g)
}

func runEstimates(runs []abrun.Record, k key, g int) []float64 {
	var d []float64
	for _, r := range runs {
		if !k.has(r) {
			continue
		}
		f := stats.RunEffect
		if k.Cost {
			f = stats.RunCost
		}
		if v, ok := f(r.Windows, g); ok {
			d = append(d, v)
		}
	}
	return d
}

// controlDelay is the positive control's delay per 1,500 bytes:
// Options.Delay when given, else, decided once, ControlShare of the time
// arm A took to deliver 1,500 bytes in the throughput runs of the first
// row so far, within 100 ns to 1 ms, or DefaultDelay before any.
func (e *experiment) controlDelay() time.Duration {
	switch {
	case e.delay > 0:
		return e.delay
	case e.o.Delay > 0:
		e.delay = e.o.Delay
		return e.delay
	}
	var a stats.ABSum
	for _, r := range e.runs {
		if r.Row == e.o.Rows[0].Name && !r.Cost && r.Err == "" {
			ra, _ := stats.ABSums(r.Windows, guardHeadline)
			a.Seconds, a.Bytes = a.Seconds+ra.Seconds, a.Bytes+ra.Bytes
		}
	}
	if a.Bytes == 0 {
		return DefaultDelay
	}
	d := time.Duration(ControlShare * a.Seconds / a.Bytes * abtap.DelayUnit * float64(time.Second))
	e.delay = min(max(d, 100*time.Nanosecond), time.Millisecond).Round(10 * time.Nanosecond)
	return e.delay
}
