package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// LatencySchema names the JSON layout of LatencyReport; it changes when a
// field changes meaning or goes away.
const LatencySchema = "tapfwd-bench-latency/1"

// LatencyReport is the outcome of Latency. Its JSON form is the --json
// output. Times are in nanoseconds.
type LatencyReport struct {
	Schema   string          `json:"schema"`
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished"`
	Host     Host            `json:"host"`
	Settings LatencySettings `json:"settings"`
	// Notes say what a reader must know to read the figures: capped
	// rates, the veth NAPI set-up, the cost of busy polling.
	Notes []string `json:"notes"`
	// Configs in report order; skipped ones carry the reason.
	Configs []LatencyConfig `json:"configs"`
	Points  []LatencyPoint  `json:"points"`
	// Cells has one entry per configuration that ran and point, in
	// Configs x Points order.
	Cells []LatencyCell `json:"cells"`
	// Comparisons are configuration A against B, per point, on p50 and
	// p99.
	Comparisons []LatencyComparison `json:"comparisons"`
	runs        []latRun
}

// LatencySettings are the method's parameters.
type LatencySettings struct {
	Reps          int     `json:"reps"`
	RunSeconds    float64 `json:"run_seconds"`    // measured part of each run
	WarmupSeconds float64 `json:"warmup_seconds"` // sent before it, not counted
	PayloadBytes  int     `json:"payload_bytes"`  // UDP payload of a request
	// CalibratedOn is the configuration the rates were probed on; empty
	// when they were not. UnloadedP50 is the median round trip it gave at
	// 1K requests/s without delay, in ns.
	CalibratedOn string  `json:"calibrated_on,omitempty"`
	UnloadedP50  float64 `json:"unloaded_p50_ns,omitempty"`
	// SenderFIFO is the SCHED_FIFO priority asked for the sender thread.
	SenderFIFO int     `json:"sender_fifo_priority"`
	Seed       uint64  `json:"bootstrap_seed"`
	Resamples  int     `json:"bootstrap_resamples"`
	Level      float64 `json:"confidence_level"`
	Quick      bool    `json:"quick,omitempty"`
}

// Percentiles of the round-trip times of one run, in ns.
type Percentiles struct {
	Min  float64 `json:"min"`
	P5   float64 `json:"p5"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
}

// Stats names the percentiles in report order.
var Stats = []string{"min", "p5", "p50", "p95", "p99", "p99.9", "max"}

// Get returns the percentile named stat (one of Stats).
func (p Percentiles) Get(stat string) float64 {
	switch stat {
	case "min":
		return p.Min
	case "p5":
		return p.P5
	case "p50":
		return p.P50
	case "p95":
		return p.P95
	case "p99":
		return p.P99
	case "p99.9":
		return p.P999
	case "max":
		return p.Max
	}
	return math.NaN()
}

// LatencySample is one run of one configuration at one point.
type LatencySample struct {
	Rep         int         `json:"rep"`
	Sent        uint64      `json:"sent"`
	Arrived     uint64      `json:"arrived"` // requests the server saw
	Received    uint64      `json:"received"`
	Reordered   uint64      `json:"reordered,omitempty"`
	Missed      uint64      `json:"missed_slots,omitempty"`
	SendErrors  uint64      `json:"send_errors,omitempty"`
	Rate        float64     `json:"rate"` // requests sent per second
	LossPercent float64     `json:"loss_percent"`
	RTT         Percentiles `json:"rtt_ns"`
	SendLagP50  float64     `json:"send_lag_p50_ns"`
	SendLagP99  float64     `json:"send_lag_p99_ns"`
	SenderFIFO  bool        `json:"sender_fifo"` // the sender thread got SCHED_FIFO
	SenderCPU   float64     `json:"sender_cpu"`  // the sender thread's CPU time, share of one CPU
	Err         string      `json:"error,omitempty"`
}

type latRun struct {
	Config, Point string
	LatencySample
}

// LatencyEstimates are the medians over the repetitions of each percentile,
// with their 95% bootstrap intervals, in ns.
type LatencyEstimates struct {
	Min  Estimate `json:"min"`
	P5   Estimate `json:"p5"`
	P50  Estimate `json:"p50"`
	P95  Estimate `json:"p95"`
	P99  Estimate `json:"p99"`
	P999 Estimate `json:"p99.9"`
	Max  Estimate `json:"max"`
}

func (e *LatencyEstimates) get(stat string) *Estimate {
	switch stat {
	case "min":
		return &e.Min
	case "p5":
		return &e.P5
	case "p50":
		return &e.P50
	case "p95":
		return &e.P95
	case "p99":
		return &e.P99
	case "p99.9":
		return &e.P999
	case "max":
		return &e.Max
	}
	return nil
}

// LatencyCell summarises one configuration at one point.
type LatencyCell struct {
	Config string `json:"config"`
	Point  string `json:"point"`
	// Reps is the number of repetitions that gave a value.
	Reps int `json:"reps"`
	// RTT is nil when no repetition gave a value (see Failures).
	RTT         *LatencyEstimates `json:"rtt_ns"`
	Rate        *Estimate         `json:"rate"`         // requests sent per second
	LossPercent *Estimate         `json:"loss_percent"` // requests without a reply
	// SendLagP99 is the median of the runs' 99th percentile of send lag:
	// how late the sender woke for its slots.
	SendLagP99 float64         `json:"send_lag_p99_ns"`
	Samples    []LatencySample `json:"samples"`
	// Failures lists runs that gave no value, as "rep N: reason".
	Failures []string `json:"failures,omitempty"`
}

// Latency verdicts on A - B: A's latency lower or higher than B's.
const (
	LowerLatency  = "lower"
	HigherLatency = "higher"
)

// LatencyComparison is configuration A against B at one point, on one
// percentile.
type LatencyComparison struct {
	Point string `json:"point"`
	Stat  string `json:"stat"` // "p50" or "p99"
	A     string `json:"a"`
	B     string `json:"b"`
	// Diff is median(A) - median(B) in ns, with its bootstrap interval.
	Diff    Estimate `json:"difference_ns"`
	Ratio   Estimate `json:"ratio"`
	Percent Estimate `json:"difference_percent"`
	// Verdict reads Diff's interval: LowerLatency, HigherLatency,
	// NoDifference or TooFewSamples.
	Verdict string `json:"verdict"`
}

// latencyComparisons: each tapfwd variant against the plain blocking
// worker, the threaded NIC NAPI against its control, and tapfwd against
// the bridge.
var latencyComparisons = [][2]string{
	{LatBusy, LatBlock}, {LatTAPThreaded, LatBlock}, {LatNICGRO, LatBlock},
	{LatNICThreaded, LatNICGRO}, {LatNICBusyPoll, LatNICGRO}, {LatBlock, Bridge},
}

// comparedStats are the percentiles compared.
var comparedStats = []string{"p50", "p99"}

// Cell returns the cell of config at point, or nil.
func (r *LatencyReport) Cell(config, point string) *LatencyCell {
	for i := range r.Cells {
		if r.Cells[i].Config == config && r.Cells[i].Point == point {
			return &r.Cells[i]
		}
	}
	return nil
}

// Comparison returns the comparison of a against b at point on stat, or
// nil.
func (r *LatencyReport) Comparison(a, b, point, stat string) *LatencyComparison {
	for i := range r.Comparisons {
		c := &r.Comparisons[i]
		if c.A == a && c.B == b && c.Point == point && c.Stat == stat {
			return c
		}
	}
	return nil
}

func (r *LatencyReport) config(name string) *LatencyConfig {
	for i := range r.Configs {
		if r.Configs[i].Name == name {
			return &r.Configs[i]
		}
	}
	return nil
}

func (r *LatencyReport) ran(name string) bool {
	c := r.config(name)
	return c != nil && c.Skipped == ""
}

// notes collects what the reader needs beside the figures.
func (r *LatencyReport) notes() {
	for _, p := range r.Points {
		if p.Capped != "" {
			r.Notes = append(r.Notes, p.Name+": "+p.Capped+".")
		}
	}
	var nicCfgs []string
	for _, c := range r.Configs {
		if len(c.Setup) > 0 && c.Skipped == "" {
			nicCfgs = append(nicCfgs, c.Name)
		}
	}
	if len(nicCfgs) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%s turn%s on GRO and rx-udp-gro-forwarding on the NIC veth before tapfwd starts "+
			"(ethtool -K w1 gro on rx-udp-gro-forwarding on, in the fwd namespace). On a veth, UDP from the wire goes through the "+
			"receiving veth's NAPI only with rx-udp-gro-forwarding (or rx-gro-list) on; otherwise it takes the per-CPU backlog "+
			"and a threaded NIC NAPI sees no work. That changes the path, so compare %s with %s (same path, NAPI in softirq), not with %s.",
			strings.Join(nicCfgs, ", "), plural(len(nicCfgs), "s", ""), LatNICThreaded, LatNICGRO, LatBlock))
	}
	if c := r.config(LatBusy); c != nil && c.Skipped == "" {
		r.Notes = append(r.Notes, fmt.Sprintf("%s spins one whole CPU (of %d here) for the whole run, "+
			"on the machine the client's sender and receiver threads and the echo server share with it.", LatBusy, r.Host.CPUs))
	}
	fifo, runs := 0, 0
	for _, run := range r.runs {
		if run.Err == "" {
			runs++
			if run.SenderFIFO {
				fifo++
			}
		}
	}
	switch {
	case fifo == runs:
		r.Notes = append(r.Notes, fmt.Sprintf("The sender thread runs SCHED_FIFO %d, as the reference ran its client under chrt -f 50, so requests leave on time "+
			"whatever else wants the CPU; the receiver and the echo server are ordinary threads. Nothing is pinned but tapfwd's worker "+
			"(queue 0 on CPU 0) and, where set, the NIC NAPI kthread.", r.Settings.SenderFIFO))
	default:
		r.Notes = append(r.Notes, fmt.Sprintf("The sender thread got SCHED_FIFO in %d of %d runs only: in the others a busy CPU could delay requests.", fifo, runs))
	}
	r.Notes = append(r.Notes,
		"A veth has no hardware interrupt: the sending CPU raises the receive softirq itself, so the reference's contrast "+
			"between interrupts and busy polling applies only in part here.",
		"The delay is a busy-wait in the client's receiver after each reply; replies that arrive meanwhile wait in its socket, "+
			"and that wait is part of their round-trip time. Requests leave open-loop from their own thread, which sleeps to each slot "+
			"(clock_nanosleep, 1 ns timer slack); when it wakes late it sends the slots due back to back, "+
			"and skips them (lowering the rate sent) only after a stall of 16 slots or more. Send lag: how late each request left.")
}

// analyze turns r.runs into r.Cells and r.Comparisons.
func (r *LatencyReport) analyze(bs Bootstrap) {
	r.Cells = nil
	for _, c := range r.Configs {
		if c.Skipped != "" {
			continue
		}
		for _, p := range r.Points {
			cell := LatencyCell{Config: c.Name, Point: p.Name, Samples: []LatencySample{}}
			for _, run := range r.runs {
				if run.Config != c.Name || run.Point != p.Name {
					continue
				}
				if run.Err != "" {
					cell.Failures = append(cell.Failures, fmt.Sprintf("rep %d: %s", run.Rep, run.Err))
					continue
				}
				cell.Samples = append(cell.Samples, run.LatencySample)
			}
			cell.Reps = len(cell.Samples)
			if cell.Reps > 0 {
				key := c.Name + "/" + p.Name + "/"
				est := func(stat string, f func(LatencySample) float64) Estimate {
					x := make([]float64, len(cell.Samples))
					for i, s := range cell.Samples {
						x[i] = f(s)
					}
					lo, hi := bs.MedianCI(key+stat, x)
					return Estimate{Median(x), lo, hi}
				}
				cell.RTT = &LatencyEstimates{}
				for _, st := range Stats {
					*cell.RTT.get(st) = est(st, func(s LatencySample) float64 { return s.RTT.Get(st) })
				}
				rate := est("rate", func(s LatencySample) float64 { return s.Rate })
				loss := est("loss", func(s LatencySample) float64 { return s.LossPercent })
				cell.Rate, cell.LossPercent = &rate, &loss
				cell.SendLagP99 = est("sendlag", func(s LatencySample) float64 { return s.SendLagP99 }).Median
			}
			r.Cells = append(r.Cells, cell)
		}
	}
	r.Comparisons = nil
	for _, ab := range latencyComparisons {
		if !r.ran(ab[0]) || !r.ran(ab[1]) {
			continue
		}
		for _, p := range r.Points {
			ca, cb := r.Cell(ab[0], p.Name), r.Cell(ab[1], p.Name)
			if ca == nil || cb == nil || ca.Reps == 0 || cb.Reps == 0 {
				continue
			}
			for _, st := range comparedStats {
				a, b := statValues(ca, st), statValues(cb, st)
				ma, mb := Median(a), Median(b)
				if mb <= 0 {
					continue
				}
				ci := bs.Pair(ab[0]+"-"+ab[1]+"/"+p.Name+"/"+st, a, b)
				q := Estimate{ma / mb, ci.RatioLow, ci.RatioHigh}
				r.Comparisons = append(r.Comparisons, LatencyComparison{Point: p.Name, Stat: st, A: ab[0], B: ab[1],
					Diff:    Estimate{ma - mb, ci.DiffLow, ci.DiffHigh},
					Ratio:   q,
					Percent: Estimate{100 * (q.Median - 1), 100 * (q.Low - 1), 100 * (q.High - 1)},
					Verdict: LatencyVerdict(ci.DiffLow, ci.DiffHigh, len(a), len(b))})
			}
		}
	}
}

func statValues(c *LatencyCell, stat string) []float64 {
	x := make([]float64, len(c.Samples))
	for i, s := range c.Samples {
		x[i] = s.RTT.Get(stat)
	}
	return x
}

// LatencyVerdict reads the interval [lo, hi] of a difference of latencies
// A - B measured with na and nb repetitions: HigherLatency when it lies
// above 0, LowerLatency when below, otherwise as Verdict.
func LatencyVerdict(lo, hi float64, na, nb int) string {
	switch v := Verdict(lo, hi, na, nb); v {
	case Faster:
		return HigherLatency
	case Slower:
		return LowerLatency
	default:
		return v
	}
}

// ReadLatencyReport reads a report written by WriteJSON, for rendering
// again. It holds the cells and comparisons, not the single runs.
func ReadLatencyReport(path string) (*LatencyReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r LatencyReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("reading report %s: %w", path, err)
	}
	if r.Schema != LatencySchema {
		return nil, fmt.Errorf("reading report %s: schema %q, want %q", path, r.Schema, LatencySchema)
	}
	return &r, nil
}

// WriteJSON writes the report as indented JSON.
func (r *LatencyReport) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// WriteText writes the report as aligned plain-text tables.
func (r *LatencyReport) WriteText(w io.Writer) error {
	return writeText(w, "tapfwd bench latency", r.summary(), r.sections())
}

// WriteMarkdown writes the report as Markdown.
func (r *LatencyReport) WriteMarkdown(w io.Writer) error {
	return writeMarkdown(w, "tapfwd bench latency", r.summary(), r.sections())
}

func (r *LatencyReport) summary() []string {
	h := r.Host
	ran := 0
	for _, c := range r.Configs {
		if c.Skipped == "" {
			ran++
		}
	}
	s := r.Settings
	lines := []string{
		fmt.Sprintf("%s, kernel %s (%s), %d CPUs %s, %s",
			r.Started.Format("2006-01-02 15:04 MST"), h.Kernel, h.Machine, h.CPUs, h.CPUModel, h.Go),
		fmt.Sprintf("%d configuration%s x %d rate/delay point%s, %d repetition%s interleaved (fresh test bed per configuration and repetition), "+
			"%s s per run after %s s of warm-up, %d-byte UDP requests, %s in all",
			ran, plural(ran, "", "s"), len(r.Points), plural(len(r.Points), "", "s"), s.Reps, plural(s.Reps, "", "s"), Num(s.RunSeconds), Num(s.WarmupSeconds), s.PayloadBytes, r.Finished.Sub(r.Started).Round(time.Second)),
		fmt.Sprintf("Round-trip times in microseconds: each run's percentiles, then their median over the repetitions with a %.0f%% "+
			"percentile-bootstrap interval (%d resamples, seed %d). A verdict needs the whole interval of the difference on one side of 0 "+
			"and at least %d repetitions each.", s.Level*100, s.Resamples, s.Seed, MinVerdictReps),
	}
	if s.CalibratedOn != "" {
		lines = append(lines, fmt.Sprintf("Rates checked on %s before the matrix (%v probes: a rate holds with at least %.0f%% of it sent, "+
			"at most %s%% lost, a median round trip at most %d times the unloaded one (%s us at %s/s), and the sender thread "+
			"using at most %.0f%% of a CPU); a point whose rate does not hold runs at %.0f%% of the highest rate that did.",
			s.CalibratedOn, probeLength, 100*sustainRate, strconv.FormatFloat(sustainLoss, 'g', -1, 64), sustainP50x, us(s.UnloadedP50), RateName(baselineRate),
			100*sustainSenderCPU, 100*capHeadroom))
	}
	if s.Quick {
		lines = append(lines, "QUICK RUN: a smoke test of the bench, not a measurement.")
	}
	return lines
}

// plural returns one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// us writes ns as microseconds, three significant digits.
func us(ns float64) string { return Num(ns / 1e3) }

// pointLabel writes a point the way the reference's table does,
// "12 Kpkt/s + 30 us", with the rate run when it was capped.
func pointLabel(p LatencyPoint) string {
	l := fmt.Sprintf("%s + %s us", ratePhrase(p.AskedRate), strconv.FormatFloat(float64(p.Delay)/1e3, 'f', -1, 64))
	if p.Rate != p.AskedRate {
		l += fmt.Sprintf(" (ran at %s)", ratePhrase(p.Rate))
	}
	return l
}

// kRate writes a measured rate in thousands, three digits: 11.9K.
func kRate(v float64) string { return Num(v/1e3) + "K" }

func ratePhrase(r int) string {
	if r >= 1000 {
		return strings.TrimSuffix(RateName(r), "K") + " Kpkt/s"
	}
	return RateName(r) + " pkt/s"
}

func (r *LatencyReport) ranConfigs() []LatencyConfig {
	var out []LatencyConfig
	for _, c := range r.Configs {
		if c.Skipped == "" {
			out = append(out, c)
		}
	}
	return out
}

func (r *LatencyReport) sections() []section {
	var out []section
	ran := r.ranConfigs()
	if len(r.Notes) > 0 {
		out = append(out, section{title: "Notes", notes: r.Notes})
	}
	// The reference's layout: a row per rate and delay, a column per
	// configuration.
	main := section{title: fmt.Sprintf("Round-trip time p50 / p99, us (medians of %d repetition%s)", r.Settings.Reps, plural(r.Settings.Reps, "", "s")),
		head: []string{"rate + delay"}}
	for _, c := range ran {
		main.head = append(main.head, c.Name)
	}
	for _, p := range r.Points {
		row := []string{pointLabel(p)}
		for _, c := range ran {
			row = append(row, p50p99(r.Cell(c.Name, p.Name), p.Rate))
		}
		main.rows = append(main.rows, row)
	}
	out = append(out, main)

	for _, p := range r.Points {
		s := section{title: pointLabel(p) + ": round-trip time, us, median [95% CI] of the repetitions; requests/s sent; loss; send lag p99, us",
			head: []string{"config", "min", "p5", "p50", "p95", "p99", "p99.9", "max", "rate", "loss %", "send lag"}}
		for _, c := range ran {
			cell := r.Cell(c.Name, p.Name)
			if cell == nil || cell.RTT == nil {
				s.rows = append(s.rows, []string{c.Name, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"})
				continue
			}
			e := cell.RTT
			s.rows = append(s.rows, []string{c.Name, us(e.Min.Median), us(e.P5.Median), usEst(e.P50), us(e.P95.Median),
				usEst(e.P99), us(e.P999.Median), us(e.Max.Median), kRate(cell.Rate.Median),
				lossStr(cell.LossPercent.Median), us(cell.SendLagP99)})
		}
		out = append(out, s)
	}

	if len(r.Comparisons) > 0 {
		s := section{title: "A against B: change of the median p50 and p99, us [95% CI], and the verdict on A's latency",
			head: []string{"point", "A vs B", "p50 change", "p50", "p99 change", "p99"}}
		for _, p := range r.Points {
			for _, ab := range latencyComparisons {
				row := []string{p.Name, ab[0] + " vs " + ab[1]}
				any := false
				for _, st := range comparedStats {
					c := r.Comparison(ab[0], ab[1], p.Name, st)
					if c == nil {
						row = append(row, "-", "-")
						continue
					}
					any = true
					row = append(row, fmt.Sprintf("%s [%s, %s] (%s)", signed(c.Diff.Median/1e3), signed(c.Diff.Low/1e3), signed(c.Diff.High/1e3), pct(c.Percent.Median)), c.Verdict)
				}
				if any {
					s.rows = append(s.rows, row)
				}
			}
		}
		out = append(out, s)
	}

	s := section{title: "Configurations", head: []string{"config", "what", "tapfwd run flags; set-up"}}
	for _, c := range r.Configs {
		how := strings.Join(c.Args, " ")
		for _, st := range c.Setup {
			how += "; " + strings.ReplaceAll(strings.Join(st, " "), NICToken, "w1")
		}
		s.rows = append(s.rows, []string{c.Name, configWhat(c.Description, c.Skipped), strings.TrimPrefix(how, "; ")})
	}
	out = append(out, s)
	var fails [][]string
	for _, c := range r.Cells {
		for _, f := range c.Failures {
			fails = append(fails, []string{c.Config, c.Point, f})
		}
	}
	return append(out, failedRuns("point", fails)...)
}

// p50p99 is a cell of the main table: "47.1 / 78.2", with the loss when
// more than 1% of the requests got no reply and the rate sent when it fell
// short of the point's by more than 5%.
func p50p99(c *LatencyCell, rate int) string {
	if c == nil || c.RTT == nil {
		return "-"
	}
	s := us(c.RTT.P50.Median) + " / " + us(c.RTT.P99.Median)
	var marks []string
	if c.LossPercent != nil && c.LossPercent.Median > 1 {
		marks = append(marks, lossStr(c.LossPercent.Median)+"% lost")
	}
	if c.Rate != nil && c.Rate.Median < sustainRate*float64(rate) {
		marks = append(marks, "sent "+kRate(c.Rate.Median)+"/s")
	}
	if len(marks) > 0 {
		s += " (" + strings.Join(marks, ", ") + ")"
	}
	return s
}

func usEst(e Estimate) string {
	return fmt.Sprintf("%s [%s, %s]", us(e.Median), us(e.Low), us(e.High))
}

func lossStr(v float64) string {
	if v != 0 && math.Abs(v) < 0.1 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
