package inrun

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"time"

	"github.com/tapfwd/tapfwd/bench/abrun"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
)

// Schema names the JSON layout of a Report.
const Schema = "tapfwd-bench-inrun/1"

// guardHeadline is the guard of the headline figures: the first 20 ms
// of every window left out (stats.ABGuards[1]).
const guardHeadline = 1

// Report is an in-run experiment's result.
type Report struct {
	report.Header
	Settings Settings `json:"settings"`
	// Pairs say what each pair compares.
	Pairs []PairInfo `json:"pairs"`
	// Workloads are the rows, with their iperf3 placement.
	Workloads []throughput.Workload `json:"workloads"`
	// Comparisons, throughput then cost, in row order; the checks last.
	// Each keeps the throughput bench's fields: workload, a (the pair,
	// the setting compared), b (Baseline), verdict, the interval, and
	// when its runs started and finished.
	Comparisons []Comparison `json:"comparisons"`
	Checks      Checks       `json:"checks"`
	// Answer is the report in one sentence.
	Answer string `json:"answer"`
	// Setups are what the kernel showed of each visit's TAP queues.
	Setups []Setup        `json:"setups"`
	Runs   []abrun.Record `json:"runs"`
}

// Settings are how the experiment ran.
type Settings struct {
	WindowMillis   int          `json:"window_ms"`
	Windows        int          `json:"windows_per_run"`
	OmitSeconds    float64      `json:"omit_seconds"`
	GuardsMillis   []int        `json:"guards_ms"`
	HeadlineGuard  int          `json:"headline_guard_ms"`
	Rule           stats.ABRule `json:"rule"`
	BudgetSeconds  float64      `json:"budget_seconds"`
	StoppedBy      string       `json:"stopped_by"`
	Cost           bool         `json:"cost"`
	CostShare      float64      `json:"cost_offered_share,omitempty"`
	DelayMicros    float64      `json:"control_delay_us"`
	KthreadCPU     int          `json:"kthread_cpu"`
	Seed           uint64       `json:"seed"`
	Background     float64      `json:"background_limit_cpus"`
	Multiple       string       `json:"multiple_comparisons"`
	ExpectedFalse  float64      `json:"expected_false_verdicts"`
	ExpectedFalseC float64      `json:"expected_false_verdicts_cost,omitempty"`
}

// PairInfo says what a pair compares.
type PairInfo struct {
	Name  string   `json:"name"`
	What  string   `json:"what"`
	Check bool     `json:"check,omitempty"`
	Args  []string `json:"tapfwd_args"`
}

// Setup is what the kernel showed of one visit's TAP: its NAPI kthreads
// (napi/TAP-N), against what the instance's queues should give.
type Setup struct {
	Instance string `json:"instance"`
	Rep      int    `json:"rep"`
	Swapped  bool   `json:"swapped,omitempty"`
	Kthreads int    `json:"kthreads"`
	Want     int    `json:"want"`
}

// Observables.
const (
	Throughput = "throughput"
	Cost       = "cost"
)

// Comparison is one pair on one row, throughput or cost.
type Comparison struct {
	Workload   string `json:"workload"`
	A          string `json:"a"`
	B          string `json:"b"`
	Observable string `json:"observable"`
	Unit       string `json:"unit"`
	Check      bool   `json:"check,omitempty"`
	Verdict    string `json:"verdict"`
	Sentence   string `json:"sentence"`
	// Percent is B's arm against A's, 100 * (ratio - 1), from the mean
	// of the runs' log ratios; Ratio the same as a ratio.
	Percent   stats.Estimate `json:"difference_percent"`
	Ratio     stats.Estimate `json:"ratio"`
	HalfWidth float64        `json:"half_width_percent"`
	Runs      int            `json:"runs"`
	Stage1    int            `json:"stage1_runs"`
	Needed    int            `json:"runs_needed"`
	P         float64        `json:"p"`
	Held      bool           `json:"held"`
	// Jackknife is the median within-run jackknife standard error, in
	// percent: a diagnostic of each run's precision, not the interval.
	Jackknife float64 `json:"jackknife_percent"`
	// Guards are the estimate in percent with each guard (0, 20, 40 ms).
	Guards []stats.Estimate `json:"guards"`
	// BaselineFigure is arm A's figure (the geometric mean over the runs
	// of its rate, or CPU per Gbit); ChangedFigure is BaselineFigure times
	// Ratio: the two columns and the effect come from one estimator.
	BaselineFigure float64   `json:"baseline"`
	ChangedFigure  float64   `json:"changed"`
	Flagged        int       `json:"runs_flagged_background"`
	Started        time.Time `json:"started"`
	Finished       time.Time `json:"finished"`
}

// Checks are what every report shows of its own trustworthiness.
type Checks struct {
	// AACovers0: the A/A interval contains 0; ControlDetected: the
	// control's interval lies wholly below 0 (a slowdown shown, whether
	// or not narrow enough for a verdict).
	AACovers0       bool `json:"aa_covers_0"`
	ControlDetected bool `json:"control_detected"`
	// GuardsAgree counts the comparisons whose estimates with guards 0
	// and 40 ms lie inside the 20 ms interval, of GuardsOf.
	GuardsAgree int `json:"guards_agree"`
	GuardsOf    int `json:"guards_of"`
	// Per window, in switched windows (after a window of the other arm)
	// and in the others: the sender's retransmitted segments and the
	// receiver's out-of-order queueings, over every throughput run.
	RetransSwitched float64 `json:"retrans_per_window_switched"`
	RetransSame     float64 `json:"retrans_per_window_same"`
	OFOSwitched     float64 `json:"ofo_per_window_switched"`
	OFOSame         float64 `json:"ofo_per_window_same"`
	// Background load, in CPUs: the median and the largest over the runs,
	// and how many runs passed the limit.
	BackgroundMedian float64 `json:"background_median_cpus"`
	BackgroundMax    float64 `json:"background_max_cpus"`
	Flagged          int     `json:"runs_flagged"`
	// KthreadShareB is the share of the threaded pair's NAPI kthread CPU
	// that fell in arm B's windows: near 1 when only queue 1 feeds it.
	KthreadShareB float64 `json:"kthread_share_b"`
	// SetupsOK says whether every visit's TAP had the kthreads its
	// queues should give.
	SetupsOK bool `json:"setups_ok"`
}

func newReport(o Options) *Report {
	r := &Report{
		Header: report.Header{Schema: Schema, Started: time.Now().UTC(), Host: matrix.ProbeHost(0, true)},
		Settings: Settings{WindowMillis: int(abrun.Window / time.Millisecond), Windows: o.Windows, OmitSeconds: o.Omit.Seconds(),
			HeadlineGuard: int(stats.ABGuards[guardHeadline] / time.Millisecond), Rule: o.Rule, BudgetSeconds: o.Budget.Seconds(),
			Cost: o.Cost, KthreadCPU: o.KthreadCPU, Seed: o.Seed,
			Background: o.BackgroundLimit,
			Multiple:   "each verdict from its own 95% interval; the expected number of false verdicts is 5% of the comparisons (throughput and cost apart), and a faster or slower verdict that Holm's step-down rule at 5% across the report would not keep says so"},
		Workloads: o.Rows,
	}
	if o.Cost {
		r.Settings.CostShare = CostShare
	}
	for _, g := range stats.ABGuards {
		r.Settings.GuardsMillis = append(r.Settings.GuardsMillis, int(g/time.Millisecond))
	}
	return r
}

// finish fills the comparisons and checks from e's runs.
func (r *Report) finish(e *experiment) {
	r.Finished = time.Now().UTC()
	r.Runs, r.Setups = e.runs, e.setups
	r.Settings.StoppedBy = e.stopping
	r.Settings.DelayMicros = float64(e.delay) / float64(time.Microsecond)
	for _, p := range pairDefs(e.delay) {
		if slices.ContainsFunc(e.pairs, func(q pairDef) bool { return q.name == p.name }) {
			args := instanceOptions(p.instance, e.delay, e.o.KthreadCPU, false)
			args.ABControl = "FIFO"
			r.Pairs = append(r.Pairs, PairInfo{Name: p.name, What: p.what, Check: p.check, Args: args.Args()})
		}
	}
	for _, cost := range []bool{false, true} {
		if cost && !e.o.Cost {
			continue
		}
		var fam []int
		for _, p := range e.pairs {
			for i, w := range e.o.Rows {
				if p.check && i > 0 {
					break
				}
				c, ok := r.compare(e, key{p.name, w.Name, cost}, p.check)
				if !ok {
					continue
				}
				if !p.check {
					fam = append(fam, len(r.Comparisons))
				}
				r.Comparisons = append(r.Comparisons, c)
			}
		}
		r.holm(fam, cost, e.o.Rule)
	}
	r.checks(e)
	r.Answer = r.answer()
}

// compare is comparison k over e's runs.
func (r *Report) compare(e *experiment, k key, check bool) (Comparison, bool) {
	d := e.estimates(k, guardHeadline)
	if len(d) == 0 {
		return Comparison{}, false
	}
	words := throughputWords
	c := Comparison{Workload: k.Row, A: k.Pair, B: Baseline, Observable: Throughput, Unit: throughput.Gbps, Check: check}
	if k.Cost {
		words, c.Observable, c.Unit = costWords, Cost, throughput.PerGbit
	}
	res := stats.ABInterval(d, e.o.Rule, words)
	res.Jackknife = jackknife(e.runs, k, res.Runs)
	c.fromResult(res, e.o.Rule, words)
	for g := range stats.ABGuards {
		gr := stats.ABInterval(e.estimates(k, g), e.o.Rule, words)
		c.Guards = append(c.Guards, gr.Percent)
	}
	c.figures(e.runs, k, res.Runs)
	return c, true
}

var (
	throughputWords = stats.ABWords{Above: stats.ABFaster, Below: stats.ABSlower}
	costWords       = stats.ABWords{Above: "dearer", Below: "cheaper"}
)

func (c *Comparison) fromResult(res stats.ABResult, rule stats.ABRule, words stats.ABWords) {
	c.Verdict, c.Sentence = res.Verdict, res.Sentence(rule, words)
	c.Percent, c.HalfWidth = res.Percent, res.HalfWidth
	c.Ratio = stats.Estimate{Median: 1 + res.Percent.Median/100, Low: 1 + res.Percent.Low/100, High: 1 + res.Percent.High/100}
	c.Runs, c.Stage1, c.Needed, c.P, c.Held, c.Jackknife = res.Runs, res.Stage1, res.Needed, res.P, res.Held, res.Jackknife
}

// jackknife is the median within-run jackknife standard error of the
// first n runs of k, in percent.
func jackknife(runs []abrun.Record, k key, n int) float64 {
	var se []float64
	for _, run := range runs {
		if !k.has(run) || len(se) == n {
			continue
		}
		if v, ok := stats.RunJackknife(run.Windows, guardHeadline, k.Cost); ok {
			se = append(se, 100*math.Expm1(v))
		}
	}
	if len(se) == 0 {
		return 0
	}
	return stats.Median(se)
}

// figures sets the arms' figures, the flagged runs and the times from
// the first n runs of k.
func (c *Comparison) figures(runs []abrun.Record, k key, n int) {
	var logs []float64
	for _, run := range runs {
		if !k.has(run) || len(logs) == n {
			continue
		}
		a, _ := stats.ABSums(run.Windows, guardHeadline)
		v := a.Bytes * 8 / 1e9 / a.Seconds
		if k.Cost {
			v = a.CPU / (a.Bytes * 8 / 1e9)
		}
		if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		logs = append(logs, math.Log(v))
		if c.Started.IsZero() {
			c.Started = run.Started
		}
		c.Finished = run.Finished
		if run.Flagged {
			c.Flagged++
		}
	}
	if len(logs) == 0 {
		return
	}
	m := 0.0
	for _, l := range logs {
		m += l
	}
	c.BaselineFigure = math.Exp(m / float64(len(logs)))
	c.ChangedFigure = c.BaselineFigure * c.Ratio.Median
}

// holm marks the family fam of comparisons with what Holm's step-down
// rule would keep: the verdicts stand as their intervals give them (the
// report states the expected number of false verdicts, 5% of the
// family's differences, instead of widening every interval), and a
// faster or slower one the rule would not keep says so.
func (r *Report) holm(fam []int, cost bool, rule stats.ABRule) {
	res := make([]stats.ABResult, len(fam))
	for i, j := range fam {
		c := r.Comparisons[j]
		res[i] = stats.ABResult{Percent: c.Percent, HalfWidth: c.HalfWidth, Runs: c.Runs, Stage1: c.Stage1, Needed: c.Needed, P: c.P, Verdict: c.Verdict, Held: true}
	}
	stats.ABHolm(res, rule)
	exp := (1 - stats.Level) * float64(len(fam))
	if cost {
		r.Settings.ExpectedFalseC = exp
	} else {
		r.Settings.ExpectedFalse = exp
	}
	for i, j := range fam {
		c := &r.Comparisons[j]
		if c.Held = res[i].Held; !c.Held {
			c.Sentence += "; not kept by Holm's rule across the report"
		}
	}
}

// Verdicts counts the family's throughput comparisons that got a
// verdict (faster, slower or equivalent), of all of them.
func (r *Report) Verdicts() (got, of int) {
	for _, c := range r.Comparisons {
		if c.Check || c.Observable != Throughput {
			continue
		}
		of++
		if slices.Contains([]string{stats.ABFaster, stats.ABSlower, stats.ABEquivalent}, c.Verdict) {
			got++
		}
	}
	return got, of
}

func expm1(x float64) float64 { return math.Expm1(x) }

// Read reads a report saved as JSON, for rendering again.
func Read(path string) (*Report, error) {
	return report.ReadJSON[Report](path, Schema)
}

// IsReport says whether the file at path is a report of this package
// (its schema), rather than another bench's.
func IsReport(path string) bool {
	var h struct {
		Schema string `json:"schema"`
	}
	b, err := os.ReadFile(path)
	return err == nil && json.Unmarshal(b, &h) == nil && h.Schema == Schema
}
