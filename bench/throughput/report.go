package throughput

import (
	"fmt"
	"math"
	"slices"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/internal/testbed/iperf"
)

// Schema names the JSON layout of Report; it changes when a field changes
// meaning or goes away. Schema 2 pairs the comparisons by repetition,
// applies stats.Rule to their verdicts and adds each cell's Cost.
const Schema = "tapfwd-bench-throughput/2"

// SchemaV1 is the first layout, which Read still takes: comparisons of
// independently resampled medians, verdicts from 3 repetitions, no Cost.
const SchemaV1 = "tapfwd-bench-throughput/1"

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
	// runs are the single iperf3 runs the cells summarise.
	runs []record
}

// Settings are the method's parameters.
type Settings struct {
	report.Method
	RunSeconds int `json:"run_seconds"` // length of each iperf3 run
	// OmitSeconds is the start of each run left out of its figure
	// (iperf3 -O); the run took OmitSeconds + RunSeconds.
	OmitSeconds int `json:"omit_seconds"`
	// Paired says the comparisons are of within-repetition differences
	// (stats.Paired); false in schema 1 reports.
	Paired bool `json:"paired_comparisons,omitempty"`
	// MinReps and TargetHalfWidth are the verdict rule (stats.Rule);
	// absent in schema 1 reports.
	MinReps         int     `json:"verdict_min_reps,omitempty"`
	TargetHalfWidth float64 `json:"verdict_target_half_width_percent,omitempty"`
	// IperfPin is where the iperf3 processes were pinned; nil when the
	// scheduler placed them.
	IperfPin *iperf.Pinning `json:"iperf_cpus,omitempty"`
	// Topology is the test bed (matrix.Topology): "veth", the one-host
	// bed, or "vxlan", two hosts over VXLAN, where the wire is host 1's
	// lab and the lab host 2's. Empty in reports from before it existed:
	// veth.
	Topology string `json:"topology,omitempty"`
	// HostCPUs are, on vxlan, the CPUs of host 1's and host 2's tapfwd
	// workers; absent when tapfwd placed them (both on the first CPU).
	HostCPUs []int `json:"host_cpus,omitempty"`
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
	Samples       []float64       `json:"samples"`
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

// comparisons: the TAP NAPI variants, each against IFF_NAPI off.
var comparisons = [][2]string{{NAPIOn, NAPIOff}, {NAPIThreaded, NAPIOff}, {NAPIGRO, NAPIOff}}

// Read reads a report written as JSON (schema 1 or 2), for rendering
// again. It holds the cells and comparisons, not the single runs.
func Read(path string) (*Report, error) {
	var r Report
	if err := report.ReadJSON(path, &r, Schema, SchemaV1); err != nil {
		return nil, err
	}
	return &r, nil
}

// Rule is the verdict rule the report's comparisons were made under.
func (s Settings) Rule() stats.Rule {
	if s.MinReps == 0 {
		// Schema 1: 3 repetitions, no target.
		return stats.Rule{MinReps: stats.MinVerdictReps}
	}
	return stats.Rule{MinReps: s.MinReps, MaxHalfWidth: s.TargetHalfWidth}
}

// Cell returns the cell of config on workload, or nil.
func (r *Report) Cell(config, workload string) *Cell {
	for i := range r.Cells {
		if r.Cells[i].Config == config && r.Cells[i].Workload == workload {
			return &r.Cells[i]
		}
	}
	return nil
}

// Comparison returns the comparison of a against b on workload, or nil.
func (r *Report) Comparison(a, b, workload string) *report.Comparison {
	for i := range r.Comparisons {
		c := &r.Comparisons[i]
		if c.A == a && c.B == b && c.Workload == workload {
			return c
		}
	}
	return nil
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

// byRep are the figures of config's runs on workload, one per repetition
// (index rep-1), NaN where the run failed or is missing.
func (r *Report) byRep(config, workload string) []float64 {
	v := make([]float64, r.Settings.Reps)
	for i := range v {
		v[i] = math.NaN()
	}
	for _, run := range r.runs {
		if run.Config == config && run.Row == workload && run.Err == "" && run.Rep >= 1 && run.Rep <= len(v) {
			v[run.Rep-1] = run.Sample.Value
		}
	}
	return v
}

// analyze turns r.runs into r.Cells and r.Comparisons.
func (r *Report) analyze(bs stats.Bootstrap) {
	r.Cells = nil
	for _, c := range r.Configs {
		if c.Skipped != "" {
			continue
		}
		for _, w := range r.Workloads {
			r.Cells = append(r.Cells, r.cell(bs, c.Name, w))
		}
	}
	r.Comparisons = nil
	for _, ab := range comparisons {
		if !r.ran(ab[0]) || !r.ran(ab[1]) {
			continue
		}
		for _, w := range r.Workloads {
			d, ok := bs.Paired(ab[0]+"-"+ab[1]+"/"+w.Name, r.byRep(ab[0], w.Name), r.byRep(ab[1], w.Name), r.Settings.Rule(), stats.Speed)
			if ok {
				r.Comparisons = append(r.Comparisons, report.Comparison{Workload: w.Name, A: ab[0], B: ab[1], Unit: w.Unit, Difference: d})
			}
		}
	}
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
	cell.Cost = r.cost(bs, config, w, costs)
	return cell
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

// group is a block of the report: one protocol, direction and stream count,
// with one row or column per message size.
type group struct {
	Proto     string
	Direction string
	Streams   int
	WireMTU   bool
	Workloads []Workload // ascending Len
}

func (g group) title() string {
	if g.WireMTU {
		return fmt.Sprintf("TCP %s, 1 stream, MTU-sized frames from the wire (TSO and GSO off on its veth): Gbit/s", g.Direction)
	}
	if g.Proto == "udp" {
		return fmt.Sprintf("UDP %s, %s, 1 stream, unlimited rate: datagrams delivered, kpps", SizeName(g.Workloads[0].Len), g.Direction)
	}
	s := "streams"
	if g.Streams == 1 {
		s = "stream"
	}
	return fmt.Sprintf("TCP %s, %d %s (iperf3 -P %d): Gbit/s by write size (-l)", g.Direction, g.Streams, s, g.Streams)
}

func (r *Report) groups() []group {
	var gs []group
	for _, w := range r.Workloads {
		i := slices.IndexFunc(gs, func(g group) bool {
			return g.Proto == w.Proto && g.Direction == w.Direction && g.Streams == w.Streams && g.WireMTU == w.WireMTU
		})
		if i < 0 {
			gs = append(gs, group{Proto: w.Proto, Direction: w.Direction, Streams: w.Streams, WireMTU: w.WireMTU})
			i = len(gs) - 1
		}
		gs[i].Workloads = append(gs[i].Workloads, w)
	}
	for i := range gs {
		slices.SortStableFunc(gs[i].Workloads, func(a, b Workload) int { return a.Len - b.Len })
	}
	return gs
}
