package latency

import (
	"fmt"
	"math"
	"strings"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
)

// Schema names the JSON layout of Report; it changes when a field changes
// meaning or goes away. SchemaV1, the first layout, named a comparison's
// difference "difference_ns"; Read reads it too.
const (
	Schema   = "tapfwd-bench-latency/2"
	SchemaV1 = "tapfwd-bench-latency/1"
)

// Report is the outcome of Run. Its JSON form is the --json output. Times
// are in nanoseconds.
type Report struct {
	report.Header
	Settings Settings `json:"settings"`
	// Notes say what a reader must know to read the figures: capped
	// rates, the veth NAPI set-up, the cost of busy polling.
	Notes []string `json:"notes"`
	// Configs in report order; skipped ones carry the reason.
	Configs []report.Config `json:"configs"`
	Points  []Point         `json:"points"`
	// Cells has one entry per configuration that ran and point, in
	// Configs x Points order.
	Cells []Cell `json:"cells"`
	// Comparisons are configuration A against B, per point, on p50 and
	// p99 (differences in ns).
	Comparisons []report.Comparison `json:"comparisons"`
	runs        []record
}

// Settings are the method's parameters.
type Settings struct {
	report.Method
	RunSeconds    float64 `json:"run_seconds"`    // measured part of each run
	WarmupSeconds float64 `json:"warmup_seconds"` // sent before it, not counted
	PayloadBytes  int     `json:"payload_bytes"`  // UDP payload of a request
	// CalibratedOn is the configuration the rates were probed on; empty
	// when they were not. UnloadedP50 is the median round trip it gave at
	// 1K requests/s without delay, in ns.
	CalibratedOn string  `json:"calibrated_on,omitempty"`
	UnloadedP50  float64 `json:"unloaded_p50_ns,omitempty"`
	// SenderFIFO is the SCHED_FIFO priority asked for the sender thread.
	SenderFIFO int `json:"sender_fifo_priority"`
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

// Sample is one run of one configuration at one point.
type Sample struct {
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
}

// Estimates are the medians over the repetitions of each percentile, with
// their 95% bootstrap intervals, in ns.
type Estimates struct {
	Min  stats.Estimate `json:"min"`
	P5   stats.Estimate `json:"p5"`
	P50  stats.Estimate `json:"p50"`
	P95  stats.Estimate `json:"p95"`
	P99  stats.Estimate `json:"p99"`
	P999 stats.Estimate `json:"p99.9"`
	Max  stats.Estimate `json:"max"`
}

func (e *Estimates) get(stat string) *stats.Estimate {
	return map[string]*stats.Estimate{"min": &e.Min, "p5": &e.P5, "p50": &e.P50, "p95": &e.P95, "p99": &e.P99, "p99.9": &e.P999, "max": &e.Max}[stat]
}

// Cell summarises one configuration at one point.
type Cell struct {
	Config string `json:"config"`
	Point  string `json:"point"`
	// Reps is the number of repetitions that gave a value.
	Reps int `json:"reps"`
	// RTT is nil when no repetition gave a value (see Failures).
	RTT         *Estimates      `json:"rtt_ns"`
	Rate        *stats.Estimate `json:"rate"`         // requests sent per second
	LossPercent *stats.Estimate `json:"loss_percent"` // requests without a reply
	// SendLagP99 is the median of the runs' 99th percentile of send lag:
	// how late the sender woke for its slots.
	SendLagP99 float64  `json:"send_lag_p99_ns"`
	Samples    []Sample `json:"samples"`
	// Failures lists runs that gave no value, as "rep N: reason".
	Failures []string `json:"failures,omitempty"`
}

// comparisons: each tapfwd variant against the plain blocking worker, the
// threaded NIC NAPI against its control, and tapfwd against the bridge.
var comparisons = [][2]string{
	{Busy, Block}, {TAPThreaded, Block}, {NICGRO, Block},
	{NICThreaded, NICGRO}, {NICBusyPoll, NICGRO}, {Block, Bridge},
}

// comparedStats are the percentiles compared.
var comparedStats = []string{"p50", "p99"}

// Read reads a report written as JSON (in this layout or SchemaV1's), for
// rendering again. It holds the cells and comparisons, not the single runs.
func Read(path string) (*Report, error) { return report.ReadJSON[Report](path, Schema, SchemaV1) }

// Cell returns the cell of config at point, or nil.
func (r *Report) Cell(config, point string) *Cell {
	return report.Find(r.Cells, func(c *Cell) bool { return c.Config == config && c.Point == point })
}

// Comparison returns the comparison of a against b at point on stat, or
// nil.
func (r *Report) Comparison(a, b, point, stat string) *report.Comparison {
	return report.Find(r.Comparisons, func(c *report.Comparison) bool { return c.A == a && c.B == b && c.Point == point && c.Stat == stat })
}

// Config returns the configuration named name, or nil.
func (r *Report) Config(name string) *report.Config { return report.FindConfig(r.Configs, name) }

func (r *Report) ran(name string) bool { return report.Ran(r.Configs, name) }

// notes collects what the reader needs beside the figures.
func (r *Report) notes() {
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
			strings.Join(nicCfgs, ", "), report.Plural(len(nicCfgs), "s", ""), NICThreaded, NICGRO, Block))
	}
	if r.ran(Busy) {
		r.Notes = append(r.Notes, fmt.Sprintf("%s spins one whole CPU (of %d here) for the whole run, "+
			"on the machine the client's sender and receiver threads and the echo server share with it.", Busy, r.Host.CPUs))
	}
	fifo, runs := 0, 0
	for _, run := range r.runs {
		if run.Err == "" {
			runs++
			if run.Sample.SenderFIFO {
				fifo++
			}
		}
	}
	if fifo == runs {
		r.Notes = append(r.Notes, fmt.Sprintf("The sender thread runs SCHED_FIFO %d, as the reference ran its client under chrt -f 50, so requests leave on time "+
			"whatever else wants the CPU; the receiver and the echo server are ordinary threads. Nothing is pinned but tapfwd's worker "+
			"(queue 0 on CPU 0) and, where set, the NIC NAPI kthread.", r.Settings.SenderFIFO))
	} else {
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
func (r *Report) analyze(bs stats.Bootstrap) {
	r.Cells = nil
	for _, c := range report.RanConfigs(r.Configs) {
		for _, p := range r.Points {
			r.Cells = append(r.Cells, r.cell(bs, c.Name, p.Name))
		}
	}
	r.Comparisons = nil
	for _, ab := range comparisons {
		if !r.ran(ab[0]) || !r.ran(ab[1]) {
			continue
		}
		for _, p := range r.Points {
			ca, cb := r.Cell(ab[0], p.Name), r.Cell(ab[1], p.Name)
			if ca == nil || cb == nil || ca.Reps == 0 || cb.Reps == 0 {
				continue
			}
			for _, st := range comparedStats {
				d, ok := bs.Compare(ab[0]+"-"+ab[1]+"/"+p.Name+"/"+st, statValues(ca, st), statValues(cb, st), stats.Latency)
				if ok {
					r.Comparisons = append(r.Comparisons, report.Comparison{Point: p.Name, Stat: st, A: ab[0], B: ab[1], Unit: "ns", Difference: d})
				}
			}
		}
	}
}

// cell summarises config's runs at point.
func (r *Report) cell(bs stats.Bootstrap, config, point string) Cell {
	cell := Cell{Config: config, Point: point, Samples: []Sample{}}
	for _, run := range r.runs {
		if run.Config != config || run.Row != point {
			continue
		}
		if run.Err != "" {
			cell.Failures = append(cell.Failures, fmt.Sprintf("rep %d: %s", run.Rep, run.Err))
			continue
		}
		cell.Samples = append(cell.Samples, run.Sample)
	}
	cell.Reps = len(cell.Samples)
	if cell.Reps == 0 {
		return cell
	}
	key := config + "/" + point + "/"
	est := func(stat string, f func(Sample) float64) stats.Estimate {
		x := make([]float64, len(cell.Samples))
		for i, s := range cell.Samples {
			x[i] = f(s)
		}
		lo, hi := bs.MedianCI(key+stat, x)
		return stats.Estimate{Median: stats.Median(x), Low: lo, High: hi}
	}
	cell.RTT = &Estimates{}
	for _, st := range Stats {
		*cell.RTT.get(st) = est(st, func(s Sample) float64 { return s.RTT.Get(st) })
	}
	rate := est("rate", func(s Sample) float64 { return s.Rate })
	loss := est("loss", func(s Sample) float64 { return s.LossPercent })
	cell.Rate, cell.LossPercent = &rate, &loss
	cell.SendLagP99 = est("sendlag", func(s Sample) float64 { return s.SendLagP99 }).Median
	return cell
}

func statValues(c *Cell, stat string) []float64 {
	x := make([]float64, len(c.Samples))
	for i, s := range c.Samples {
		x[i] = s.RTT.Get(stat)
	}
	return x
}
