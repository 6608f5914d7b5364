package throughput

import (
	"fmt"
	"slices"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/testbed/iperf"
)

// Schema names the JSON layout of Report; it changes when a field changes
// meaning or goes away.
const Schema = "tapfwd-bench-throughput/1"

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
	// IperfPin is where the iperf3 processes were pinned; nil when the
	// scheduler placed them.
	IperfPin *iperf.Pinning `json:"iperf_cpus,omitempty"`
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
	// Failures lists runs that gave no value, as "rep N: reason".
	Failures []string `json:"failures,omitempty"`
}

// comparisons: the TAP NAPI variants, each against IFF_NAPI off.
var comparisons = [][2]string{{NAPIOn, NAPIOff}, {NAPIThreaded, NAPIOff}, {NAPIGRO, NAPIOff}}

// Read reads a report written as JSON, for rendering again. It holds the
// cells and comparisons, not the single runs.
func Read(path string) (*Report, error) {
	var r Report
	if err := report.ReadJSON(path, &r, Schema); err != nil {
		return nil, err
	}
	return &r, nil
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
			d, ok := bs.Compare(ab[0]+"-"+ab[1]+"/"+w.Name, r.values(ab[0], w.Name), r.values(ab[1], w.Name), stats.Speed)
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
	return cell
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
