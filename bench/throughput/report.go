package throughput

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/trace"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
)

// Schema names the JSON layout of Report; it changes when a field changes
// meaning or goes away. Schema 3 compares in pairs by the mean log-ratio
// with Stein's two-stage interval (stats.Paired) instead of the median
// difference's bootstrap, may run sequentially (Settings.Sequential),
// places each workload (Workload.Placement) and keeps every run with its
// trace (Runs).
const Schema = "tapfwd-bench-throughput/3"

// Earlier layouts, which Read still takes. Schema 2 paired the
// comparisons by repetition (the median of the differences, its
// bootstrap interval), applied stats.Rule to their verdicts and added
// each cell's Cost; schema 1 compared independently resampled medians,
// gave verdicts from 3 repetitions and had no Cost.
const (
	SchemaV2 = "tapfwd-bench-throughput/2"
	SchemaV1 = "tapfwd-bench-throughput/1"
)

// Report is the outcome of Run: what ran, where, and the statistics. Its
// JSON form is the --json output.
type Report struct {
	report.Header
	Settings Settings `json:"settings"`
	// Configs in report order; skipped ones carry the reason.
	Configs   []report.Config `json:"configs"`
	Workloads []Workload      `json:"workloads"`
	// Cells has one entry per configuration that ran and workload, in
	// Configs x Workloads order.
	Cells []Cell `json:"cells"`
	// Comparisons are the TAP NAPI variants against NAPIOff, per workload.
	Comparisons []report.Comparison `json:"comparisons"`
	// Runs are the single iperf3 runs the cells summarise, each with its
	// trace; absent before schema 3.
	Runs []RunRecord `json:"runs,omitempty"`
	// Trace, when set, adds every run's trace to the text and Markdown
	// renderings.
	Trace bool `json:"-"`
	// runs are Runs as Run measured them, with what the cells take.
	runs []record
}

// RunRecord is one iperf3 run: its figure (Value, in the workload's unit) or
// why it gave none, and its trace.
type RunRecord struct {
	Config   string     `json:"config"`
	Workload string     `json:"workload"`
	Rep      int        `json:"rep"`
	Value    float64    `json:"value,omitempty"`
	Err      string     `json:"error,omitempty"`
	Trace    *trace.Run `json:"trace,omitempty"`
}

// Settings are the method's parameters.
type Settings struct {
	// Method: Reps is the number of repetitions made.
	report.Method
	// CopyBandwidth is what one thread copied here at the start of the
	// run, in bytes per second (cost.CopyBandwidth): the price of the two
	// copies per byte of the floor row (cost.Floor). 0 in reports from
	// before it.
	CopyBandwidth float64 `json:"copy_bytes_per_second,omitempty"`
	RunSeconds    int     `json:"run_seconds"` // length of each iperf3 run
	// OmitSeconds is the start of each run left out of its figure
	// (iperf3 -O); the run took OmitSeconds + RunSeconds.
	OmitSeconds int `json:"omit_seconds"`
	// Paired says the comparisons are within repetitions; false in schema
	// 1 reports. Interval is how: SteinInterval, or empty (schema 2) for
	// the bootstrap of the median difference.
	Paired   bool   `json:"paired_comparisons,omitempty"`
	Interval string `json:"paired_interval,omitempty"`
	// MinReps and TargetHalfWidth are the verdict rule (stats.Rule);
	// absent in schema 1 reports.
	MinReps         int     `json:"verdict_min_reps,omitempty"`
	TargetHalfWidth float64 `json:"verdict_target_half_width_percent,omitempty"`
	// Sequential is the stopping rule of a sequential run; nil for a run
	// of a fixed number of repetitions.
	Sequential *Sequential `json:"sequential,omitempty"`
	// IperfPin is where the iperf3 processes were pinned in every run of
	// a report from before Workload.Placement; nil when the scheduler
	// placed them.
	IperfPin *iperf.Pinning `json:"iperf_cpus,omitempty"`
	// WorkerCPU is the CPU tapfwd pins its (first) worker to: the first
	// this process may use.
	WorkerCPU *int `json:"worker_cpu,omitempty"`
	// Topology is the test bed (matrix.Topology): "veth", the one-host
	// bed, or "vxlan", two hosts over VXLAN, where the wire is host 1's
	// lab and the lab host 2's. Empty in reports from before it existed:
	// veth.
	Topology string `json:"topology,omitempty"`
	// HostCPUs are, on vxlan, the CPUs of host 1's and host 2's tapfwd
	// workers; absent when tapfwd placed them (both on the first CPU).
	HostCPUs []int `json:"host_cpus,omitempty"`
	// AgainstBridge compares every forwarder configuration with the
	// bridge in pairs as well (Options.AgainstBridge): the guard's ratios.
	AgainstBridge bool `json:"paired_against_bridge,omitempty"`
}

// SteinInterval names the paired interval of schema 3: the mean of the
// per-repetition log-ratios with Stein's two-stage interval
// (stats.Paired).
const SteinInterval = "stein-log-ratio"

// Sequential is how a sequential run decided how far to go.
type Sequential struct {
	// Stage1Reps are the first repetitions, whose pairs' spread fixed how
	// many pairs each comparison needs.
	Stage1Reps    int     `json:"stage1_reps"`
	BudgetSeconds float64 `json:"budget_seconds"`
	// Stopped is why it made no more repetitions: matrix.StopTarget
	// (every comparison had the pairs it needs), StopBudget or StopMax.
	Stopped string `json:"stopped_by"`
}

// Cell summarises one configuration on one workload.
type Cell struct {
	Config   string `json:"config"`
	Workload string `json:"workload"`
	Unit     string `json:"unit"`
	// Reps is the number of repetitions that gave a value.
	Reps int `json:"reps"`
	// Value is the median and interval of the figure; nil when no
	// repetition gave one (see Failures).
	Value *stats.Estimate `json:"value"`
	// RatioToBridge is median / the bridge's median on the same workload,
	// with the bootstrap interval of that ratio; nil without a bridge figure.
	RatioToBridge *stats.Estimate `json:"ratio_to_bridge"`
	// RatioToPeer is, for tapfwd's configurations, median / the median of
	// the best userspace peer that ran (Peer: the naive forwarder or Open
	// vSwitch, whichever delivered more on the workload), with the
	// bootstrap interval; nil without a peer figure.
	RatioToPeer *stats.Estimate `json:"ratio_to_peer,omitempty"`
	Peer        string          `json:"peer,omitempty"`
	Samples     []float64       `json:"samples"`
	// Medians of what iperf3 also reports: TCP retransmits (sender), CPU
	// use in percent of one core, UDP loss in percent.
	Retransmits float64 `json:"retransmits_median"`
	SenderCPU   float64 `json:"sender_cpu_median"`
	ReceiverCPU float64 `json:"receiver_cpu_median"`
	LossPercent float64 `json:"loss_percent_median,omitempty"`
	// RcvbufPercent is the median share of the datagrams reaching the
	// receiving socket that it dropped with its buffer full (Udp
	// RcvbufErrors against InDatagrams in the receiver's namespace, over
	// the whole run): loss caused by the receiver falling behind, not by
	// the path. Close to LossPercent, the receiver lost them; UDP only.
	RcvbufPercent float64 `json:"rcvbuf_drop_percent_median,omitempty"`
	// ForwarderCPUPerGbit is the median CPU time the forwarding process
	// (tapfwd or the naive forwarder) used per gigabit it delivered, in
	// seconds, from /proc/PID/stat; 0 for the bridge and direct veth.
	ForwarderCPUPerGbit float64 `json:"forwarder_cpu_seconds_per_gbit,omitempty"`
	// Cost is what the runs cost the whole machine per unit delivered;
	// nil in schema 1 reports and when no run measured it.
	Cost *Cost `json:"cost,omitempty"`
	// Failures lists runs that gave no value, as "rep N: reason".
	Failures []string `json:"failures,omitempty"`
	// Modes, when the runs fall in two clusters (stats.TwoModes), are
	// the slow and the fast one: a median over them describes neither.
	Modes []Mode `json:"modes,omitempty"`
}

// Mode is a cluster of a cell's runs.
type Mode struct {
	Median float64 `json:"median"`
	Runs   int     `json:"runs"`
	// Reps are the repetitions whose runs it holds.
	Reps []int `json:"reps"`
}

// Cost is the CPU time a configuration spent on a workload per unit
// delivered: the whole machine's from /proc/stat (every CPU, so the
// kernel's forwarding in softirqs counts as much as a forwarder process),
// over each whole iperf3 run, divided by what the receiving namespace's
// IP layer took in over the same time.
type Cost struct {
	// Unit is PerGbit (CPU seconds per gigabit of TCP payload) or PerMpkt
	// (per million UDP datagrams delivered to the socket).
	Unit string `json:"unit"`
	// Machine is user + system + softirq of all CPUs per unit: the median
	// of the repetitions and its 95% interval.
	Machine stats.Estimate `json:"machine"`
	// User (with nice), System (with hard interrupts) and Softirq are the
	// medians of the parts; they need not add up to Machine's median.
	User    float64 `json:"user_median"`
	System  float64 `json:"system_median"`
	Softirq float64 `json:"softirq_median"`
	// Forwarder is the forwarding processes' own CPU per unit (both
	// hosts' on vxlan), median; 0 for the bridge and the direct veth.
	// ForwarderUser and ForwarderSystem are the medians of its parts
	// (/proc/PID/stat utime and stime): the forwarder's own code, and the
	// kernel inside its system calls (copies, and the paths a TAP write
	// or a packet socket send runs).
	Forwarder       float64 `json:"forwarder_median,omitempty"`
	ForwarderUser   float64 `json:"forwarder_user_median,omitempty"`
	ForwarderSystem float64 `json:"forwarder_system_median,omitempty"`
	// RatioToBridge is Machine's median over the bridge's, with the
	// bootstrap interval of that ratio; nil without a bridge figure.
	RatioToBridge *stats.Estimate `json:"ratio_to_bridge,omitempty"`
	// Samples are Machine's figure per repetition.
	Samples []float64 `json:"samples"`
}

// NAPIPairs are the comparisons of the TAP NAPI variants, each against
// IFF_NAPI off.
var NAPIPairs = [][2]string{{NAPIOn, NAPIOff}, {NAPIThreaded, NAPIOff}, {NAPIGRO, NAPIOff}}

// Read reads a report written as JSON (schema 1 to 3), for rendering
// again. It holds the cells, the comparisons and, from schema 3, the runs
// with their traces.
func Read(path string) (*Report, error) {
	return report.ReadJSON[Report](path, Schema, SchemaV2, SchemaV1)
}

// Rule is the verdict rule the report's comparisons were made under.
func (s Settings) Rule() stats.Rule {
	if s.MinReps == 0 {
		// Schema 1: 3 repetitions, no target.
		return stats.Rule{MinReps: stats.MinVerdictReps}
	}
	return stats.Rule{MinReps: s.MinReps, MaxHalfWidth: s.TargetHalfWidth}
}

// Stage1 is the first stage of the comparisons' intervals: a sequential
// run's, else every repetition.
func (s Settings) Stage1() int {
	if s.Sequential != nil {
		return s.Sequential.Stage1Reps
	}
	return s.Reps
}

// Cell returns the cell of config on workload, or nil.
func (r *Report) Cell(config, workload string) *Cell {
	return report.Find(r.Cells, func(c *Cell) bool { return c.Config == config && c.Workload == workload })
}

// Comparison returns the comparison of a against b on workload, or nil.
func (r *Report) Comparison(a, b, workload string) *report.Comparison {
	return report.Find(r.Comparisons, func(c *report.Comparison) bool { return c.A == a && c.B == b && c.Workload == workload })
}

// Config returns the configuration named name, or nil.
func (r *Report) Config(name string) *report.Config { return report.FindConfig(r.Configs, name) }

func (r *Report) ran(name string) bool { return report.Ran(r.Configs, name) }

// values are the figures of config's successful runs on workload.
func (r *Report) values(config, workload string) []float64 {
	var v []float64
	for _, run := range r.runs {
		if run.Config == config && run.Row == workload && run.Err == "" {
			v = append(v, run.Sample.Value)
		}
	}
	return v
}

// byRep are the figures of config's runs on workload in reps
// repetitions, one per repetition (index rep-1), NaN where the run failed
// or is missing.
func byRep(runs []record, config, workload string, reps int) []float64 {
	v := make([]float64, reps)
	for i := range v {
		v[i] = math.NaN()
	}
	for _, run := range runs {
		if run.Config == config && run.Row == workload && run.Err == "" && run.Rep >= 1 && run.Rep <= reps {
			v[run.Rep-1] = run.Sample.Value
		}
	}
	return v
}

// pairs are the comparisons that ran, a against b on each workload: the
// TAP NAPI modes against NAPIOff and, with Settings.AgainstBridge, every
// forwarder against the bridge.
func (r *Report) pairs(fn func(a, b string, w Workload)) {
	abs := NAPIPairs
	if r.Settings.AgainstBridge {
		for _, c := range report.RanConfigs(r.Configs) {
			if report.Userspace(c.Kind) {
				abs = append(abs[:len(abs):len(abs)], [2]string{c.Name, Bridge})
			}
		}
	}
	for _, ab := range abs {
		if !r.ran(ab[0]) || !r.ran(ab[1]) {
			continue
		}
		for _, w := range r.Workloads {
			fn(ab[0], ab[1], w)
		}
	}
}

// BridgeRatios are config's figure over the bridge's on workload in each
// repetition where both gave one, in repetition order: the pairs its
// ratio to the bridge rests on. None in reports from before Runs
// (schema 3).
func (r *Report) BridgeRatios(config, workload string) []float64 {
	x, y := byRep(r.recordsOf(), config, workload, r.Settings.Reps), byRep(r.recordsOf(), Bridge, workload, r.Settings.Reps)
	var out []float64
	for i := range x {
		if x[i] > 0 && y[i] > 0 {
			out = append(out, x[i]/y[i])
		}
	}
	return out
}

// recordsOf are the runs as records: as Run measured them, or as a saved
// report keeps them (Runs: the figure, not the rest of the sample).
func (r *Report) recordsOf() []record {
	if r.runs != nil {
		return r.runs
	}
	out := make([]record, len(r.Runs))
	for i, run := range r.Runs {
		out[i] = record{Config: run.Config, Row: run.Workload, Rep: run.Rep, Err: run.Err, Sample: sample{Value: run.Value}}
	}
	return out
}

// more is how many more repetitions the comparisons need after runs, a
// sequential run's records so far: the most any lacks of the pairs its
// first stage asks for (stats.PairsNeeded), matrix.MaxReps when a first
// stage cannot tell.
func (r *Report) more(runs []record) int {
	reps := 0
	for _, run := range runs {
		reps = max(reps, run.Rep)
	}
	stage1, rule := r.Settings.Stage1(), r.Settings.Rule()
	more := 0
	r.pairs(func(a, b string, w Workload) {
		x, y := byRep(runs, a, w.Name, reps), byRep(runs, b, w.Name, reps)
		need := stats.PairsNeeded(x, y, stage1, rule)
		if need < 0 {
			more = matrix.MaxReps
			return
		}
		have := 0
		for i := range x {
			if x[i] > 0 && y[i] > 0 {
				have++
			}
		}
		more = max(more, need-have)
	})
	return more
}

// finish records how the run ended and what it measured, and analyzes
// it.
func (r *Report) finish(runs []record, end matrix.Ending, bs stats.Bootstrap) {
	r.Finished = time.Now().UTC()
	r.Settings.Reps = end.Reps
	if q := r.Settings.Sequential; q != nil {
		q.Stopped = end.Stopped
	}
	r.runs = runs
	r.Runs = make([]RunRecord, len(runs))
	for i, run := range runs {
		r.Runs[i] = RunRecord{Config: run.Config, Workload: run.Row, Rep: run.Rep, Value: run.Sample.Value, Err: run.Err, Trace: run.Sample.Trace}
	}
	r.analyze(bs)
}

// analyze turns r.runs into r.Cells and r.Comparisons.
func (r *Report) analyze(bs stats.Bootstrap) {
	r.Cells = nil
	for _, c := range report.RanConfigs(r.Configs) {
		for _, w := range r.Workloads {
			r.Cells = append(r.Cells, r.cell(bs, c.Name, w))
		}
	}
	r.Comparisons = nil
	r.pairs(func(a, b string, w Workload) {
		x, y := byRep(r.runs, a, w.Name, r.Settings.Reps), byRep(r.runs, b, w.Name, r.Settings.Reps)
		d, ok := stats.Paired(x, y, r.Settings.Stage1(), r.Settings.Rule(), stats.Speed)
		if !ok {
			return
		}
		c := report.Comparison{Workload: w.Name, A: a, B: b, Unit: w.Unit, Difference: d}
		if q := r.Settings.Sequential; q != nil {
			c.Stopped = matrix.StopTarget
			if d.Pairs < d.Needed {
				c.Stopped = q.Stopped
			}
		}
		r.Comparisons = append(r.Comparisons, c)
	})
}

// cell summarises config's runs on w.
func (r *Report) cell(bs stats.Bootstrap, config string, w Workload) Cell {
	cell := Cell{Config: config, Workload: w.Name, Unit: w.Unit, Samples: []float64{}}
	var retr, scpu, rcpu, loss, rcvbuf, fcpu []float64
	var costs []sample
	for _, run := range r.runs {
		if run.Config != config || run.Row != w.Name {
			continue
		}
		if run.Err != "" {
			cell.Failures = append(cell.Failures, fmt.Sprintf("rep %d: %s", run.Rep, run.Err))
			continue
		}
		s := run.Sample
		cell.Samples = append(cell.Samples, s.Value)
		retr = append(retr, float64(s.Retransmits))
		scpu = append(scpu, s.SenderCPU)
		rcpu = append(rcpu, s.ReceiverCPU)
		loss = append(loss, s.LossPercent)
		rcvbuf = append(rcvbuf, s.RcvbufPercent)
		if s.FwdCPUPerGbit > 0 {
			fcpu = append(fcpu, s.FwdCPUPerGbit)
		}
		if s.HasCost {
			costs = append(costs, s)
		}
	}
	cell.Reps = len(cell.Samples)
	cell.Modes = modes(r.runs, config, w.Name)
	if cell.Reps > 0 {
		lo, hi := bs.MedianCI(config+"/"+w.Name, cell.Samples)
		cell.Value = &stats.Estimate{Median: stats.Median(cell.Samples), Low: lo, High: hi}
		cell.Retransmits, cell.SenderCPU, cell.ReceiverCPU = stats.Median(retr), stats.Median(scpu), stats.Median(rcpu)
		if len(fcpu) > 0 {
			cell.ForwarderCPUPerGbit = stats.Median(fcpu)
		}
		if w.Proto == "udp" {
			cell.LossPercent, cell.RcvbufPercent = stats.Median(loss), stats.Median(rcvbuf)
		}
	}
	br := r.values(Bridge, w.Name)
	switch {
	case cell.Value == nil || len(br) == 0 || stats.Median(br) <= 0:
	case config == Bridge:
		cell.RatioToBridge = &stats.Estimate{Median: 1, Low: 1, High: 1}
	default:
		ci := bs.Pair("bridge/"+config+"/"+w.Name, cell.Samples, br)
		cell.RatioToBridge = &stats.Estimate{Median: cell.Value.Median / stats.Median(br), Low: ci.RatioLow, High: ci.RatioHigh}
	}
	r.peerRatio(bs, &cell, w)
	cell.Cost = r.cost(bs, config, w, costs)
	return cell
}

// peerRatio sets cell's ratio to the best userspace peer that ran on w,
// for a tapfwd configuration.
func (r *Report) peerRatio(bs stats.Bootstrap, cell *Cell, w Workload) {
	i := slices.IndexFunc(r.Configs, func(c report.Config) bool { return c.Name == cell.Config })
	if cell.Value == nil || i < 0 || r.Configs[i].Kind != report.KindTapfwd {
		return
	}
	var best []float64
	for _, c := range report.RanConfigs(r.Configs) {
		if v := r.values(c.Name, w.Name); report.Peer(c.Kind) && len(v) > 0 && stats.Median(v) > 0 && (best == nil || stats.Median(v) > stats.Median(best)) {
			best, cell.Peer = v, c.Name
		}
	}
	if best == nil {
		return
	}
	ci := bs.Pair("peer/"+cell.Config+"/"+w.Name, cell.Samples, best)
	cell.RatioToPeer = &stats.Estimate{Median: cell.Value.Median / stats.Median(best), Low: ci.RatioLow, High: ci.RatioHigh}
}

// machineCosts are the whole machine's cost figures of config's runs on
// workload.
func (r *Report) machineCosts(config, workload string) []float64 {
	var v []float64
	for _, run := range r.runs {
		if run.Config == config && run.Row == workload && run.Err == "" && run.Sample.HasCost {
			v = append(v, run.Sample.Cost.Total)
		}
	}
	return v
}

// cost summarises the cost figures of config's runs on w; nil without
// any.
func (r *Report) cost(bs stats.Bootstrap, config string, w Workload, runs []sample) *Cost {
	if len(runs) == 0 {
		return nil
	}
	c := &Cost{Unit: w.CostUnit()}
	var user, sys, soft, fwd, fwdUser, fwdSys []float64
	for _, s := range runs {
		c.Samples = append(c.Samples, s.Cost.Total)
		user, sys, soft = append(user, s.Cost.User), append(sys, s.Cost.System), append(soft, s.Cost.Softirq)
		if s.Cost.Process > 0 {
			fwd = append(fwd, s.Cost.Process)
			fwdUser, fwdSys = append(fwdUser, s.Cost.ProcessUser), append(fwdSys, s.Cost.ProcessSystem)
		}
	}
	lo, hi := bs.MedianCI("cost/"+config+"/"+w.Name, c.Samples)
	c.Machine = stats.Estimate{Median: stats.Median(c.Samples), Low: lo, High: hi}
	c.User, c.System, c.Softirq = stats.Median(user), stats.Median(sys), stats.Median(soft)
	if len(fwd) > 0 {
		c.Forwarder, c.ForwarderUser, c.ForwarderSystem = stats.Median(fwd), stats.Median(fwdUser), stats.Median(fwdSys)
	}
	br := r.machineCosts(Bridge, w.Name)
	switch {
	case len(br) == 0 || stats.Median(br) <= 0:
	case config == Bridge:
		c.RatioToBridge = &stats.Estimate{Median: 1, Low: 1, High: 1}
	default:
		ci := bs.Pair("cost-bridge/"+config+"/"+w.Name, c.Samples, br)
		c.RatioToBridge = &stats.Estimate{Median: c.Machine.Median / stats.Median(br), Low: ci.RatioLow, High: ci.RatioHigh}
	}
	return c
}

// modes are the two clusters of config's runs on workload, when there
// are two (stats.TwoModes), slow one first.
func modes(runs []record, config, workload string) []Mode {
	var v []float64
	var reps []int
	for _, run := range runs {
		if run.Config == config && run.Row == workload && run.Err == "" {
			v, reps = append(v, run.Sample.Value), append(reps, run.Rep)
		}
	}
	split, ok := stats.TwoModes(v)
	if !ok {
		return nil
	}
	var lo, hi []float64
	out := []Mode{{}, {}}
	for i, x := range v {
		k := 0
		if x > split {
			k = 1
		}
		out[k].Reps = append(out[k].Reps, reps[i])
		if k == 0 {
			lo = append(lo, x)
		} else {
			hi = append(hi, x)
		}
	}
	out[0].Median, out[0].Runs = stats.Median(lo), len(lo)
	out[1].Median, out[1].Runs = stats.Median(hi), len(hi)
	return out
}
