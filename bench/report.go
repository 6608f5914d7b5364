package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/iperf"
	"github.com/tapfwd/tapfwd/tap"
)

// Schema names the JSON layout of Report; it changes when a field changes
// meaning or goes away.
const Schema = "tapfwd-bench-throughput/1"

// Report is the outcome of Throughput: what ran, where, and the statistics.
// Its JSON form is the --json output.
type Report struct {
	Schema   string    `json:"schema"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Host     Host      `json:"host"`
	Settings Settings  `json:"settings"`
	// Configs in report order; skipped ones carry the reason.
	Configs   []Config   `json:"configs"`
	Workloads []Workload `json:"workloads"`
	// Cells has one entry per configuration that ran and workload, in
	// Configs x Workloads order.
	Cells []Cell `json:"cells"`
	// Comparisons are the TAP NAPI variants against NAPIOff, per workload.
	Comparisons []Comparison `json:"comparisons"`
	// runs are the single iperf3 runs the cells summarise.
	runs []sample
}

// Host describes the machine the figures come from.
type Host struct {
	Kernel      string   `json:"kernel"`
	Machine     string   `json:"machine"`
	CPUs        int      `json:"cpus"`
	CPUModel    string   `json:"cpu_model,omitempty"`
	Go          string   `json:"go"`
	Iperf3      string   `json:"iperf3,omitempty"`
	TUNFeatures []string `json:"tun_features"`
}

// Settings are the method's parameters.
type Settings struct {
	Reps       int     `json:"reps"`
	RunSeconds int     `json:"run_seconds"` // length of each iperf3 run
	Seed       uint64  `json:"bootstrap_seed"`
	Resamples  int     `json:"bootstrap_resamples"`
	Level      float64 `json:"confidence_level"`
	Quick      bool    `json:"quick,omitempty"`
	// IperfPin is where the iperf3 processes were pinned; nil when the
	// scheduler placed them.
	IperfPin *iperf.Pinning `json:"iperf_cpus,omitempty"`
}

// Estimate is a median (or a difference or ratio of medians) with its 95%
// bootstrap interval.
type Estimate struct {
	Median float64 `json:"median"`
	Low    float64 `json:"ci_low"`
	High   float64 `json:"ci_high"`
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
	Value *Estimate `json:"value"`
	// RatioToBridge is median / the bridge's median on the same workload,
	// with the bootstrap interval of that ratio; nil without a bridge figure.
	RatioToBridge *Estimate `json:"ratio_to_bridge"`
	Samples       []float64 `json:"samples"`
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

// Comparison is configuration A against B on one workload.
type Comparison struct {
	Workload string `json:"workload"`
	A        string `json:"a"`
	B        string `json:"b"`
	Unit     string `json:"unit"`
	// Diff is median(A) - median(B) with its bootstrap interval.
	Diff Estimate `json:"difference"`
	// Ratio is median(A) / median(B), from the same resamples as Diff.
	Ratio Estimate `json:"ratio"`
	// Percent is the change of the median, 100 * (Ratio - 1), interval
	// included.
	Percent Estimate `json:"difference_percent"`
	// Verdict reads Diff's interval: Faster, Slower, NoDifference or
	// TooFewSamples.
	Verdict string `json:"verdict"`
}

// comparisons: the TAP NAPI variants, each against IFF_NAPI off.
var comparisons = [][2]string{{NAPIOn, NAPIOff}, {NAPIThreaded, NAPIOff}, {NAPIGRO, NAPIOff}}

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
func (r *Report) Comparison(a, b, workload string) *Comparison {
	for i := range r.Comparisons {
		c := &r.Comparisons[i]
		if c.A == a && c.B == b && c.Workload == workload {
			return c
		}
	}
	return nil
}

// Config returns the configuration named name, or nil.
func (r *Report) Config(name string) *Config {
	for i := range r.Configs {
		if r.Configs[i].Name == name {
			return &r.Configs[i]
		}
	}
	return nil
}

func (r *Report) ran(name string) bool {
	c := r.Config(name)
	return c != nil && c.Skipped == ""
}

// analyze turns r.runs into r.Cells and r.Comparisons.
func (r *Report) analyze(bs Bootstrap) {
	values := func(config, workload string) []float64 {
		var v []float64
		for _, run := range r.runs {
			if run.Config == config && run.Workload == workload && run.Err == "" {
				v = append(v, run.Value)
			}
		}
		return v
	}
	r.Cells = nil
	for _, c := range r.Configs {
		if c.Skipped != "" {
			continue
		}
		for _, w := range r.Workloads {
			cell := Cell{Config: c.Name, Workload: w.Name, Unit: w.Unit, Samples: []float64{}}
			var retr, scpu, rcpu, loss, rcvbuf, fcpu []float64
			for _, run := range r.runs {
				if run.Config != c.Name || run.Workload != w.Name {
					continue
				}
				if run.Err != "" {
					cell.Failures = append(cell.Failures, fmt.Sprintf("rep %d: %s", run.Rep, run.Err))
					continue
				}
				cell.Samples = append(cell.Samples, run.Value)
				retr = append(retr, float64(run.Retransmits))
				scpu = append(scpu, run.SenderCPU)
				rcpu = append(rcpu, run.ReceiverCPU)
				loss = append(loss, run.LossPercent)
				rcvbuf = append(rcvbuf, run.RcvbufPercent)
				if run.FwdCPUPerGbit > 0 {
					fcpu = append(fcpu, run.FwdCPUPerGbit)
				}
			}
			cell.Reps = len(cell.Samples)
			if cell.Reps > 0 {
				lo, hi := bs.MedianCI(c.Name+"/"+w.Name, cell.Samples)
				cell.Value = &Estimate{Median(cell.Samples), lo, hi}
				cell.Retransmits, cell.SenderCPU, cell.ReceiverCPU = Median(retr), Median(scpu), Median(rcpu)
				if len(fcpu) > 0 {
					cell.ForwarderCPUPerGbit = Median(fcpu)
				}
				if w.Proto == "udp" {
					cell.LossPercent, cell.RcvbufPercent = Median(loss), Median(rcvbuf)
				}
			}
			br := values(Bridge, w.Name)
			switch {
			case cell.Value == nil || len(br) == 0 || Median(br) <= 0:
			case c.Name == Bridge:
				cell.RatioToBridge = &Estimate{1, 1, 1}
			default:
				ci := bs.Pair("bridge/"+c.Name+"/"+w.Name, cell.Samples, br)
				cell.RatioToBridge = &Estimate{cell.Value.Median / Median(br), ci.RatioLow, ci.RatioHigh}
			}
			r.Cells = append(r.Cells, cell)
		}
	}
	r.Comparisons = nil
	for _, ab := range comparisons {
		if !r.ran(ab[0]) || !r.ran(ab[1]) {
			continue
		}
		for _, w := range r.Workloads {
			a, b := values(ab[0], w.Name), values(ab[1], w.Name)
			if len(a) == 0 || len(b) == 0 {
				continue
			}
			ci := bs.Pair(ab[0]+"-"+ab[1]+"/"+w.Name, a, b)
			ma, mb := Median(a), Median(b)
			if mb <= 0 {
				continue // no ratio to a figure of zero
			}
			q := Estimate{ma / mb, ci.RatioLow, ci.RatioHigh}
			r.Comparisons = append(r.Comparisons, Comparison{Workload: w.Name, A: ab[0], B: ab[1], Unit: w.Unit,
				Diff:    Estimate{ma - mb, ci.DiffLow, ci.DiffHigh},
				Ratio:   q,
				Percent: Estimate{100 * (q.Median - 1), 100 * (q.Low - 1), 100 * (q.High - 1)},
				Verdict: Verdict(ci.DiffLow, ci.DiffHigh, len(a), len(b))})
		}
	}
}

// ReadReport reads a report written by WriteJSON, for rendering again.
// It holds the cells and comparisons, not the single runs.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("reading report %s: %w", path, err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("reading report %s: schema %q, want %q", path, r.Schema, Schema)
	}
	return &r, nil
}

// hostInfo gathers what the report says about the machine.
func hostInfo(tunFeatures uint32) Host {
	h := Host{CPUs: runtime.NumCPU(), Go: runtime.Version(), TUNFeatures: tap.FlagNames(tunFeatures)}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
		h.Machine = unix.ByteSliceToString(u.Machine[:])
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "iperf3", "--version").Output(); err == nil {
		h.Iperf3 = firstLine(string(out))
	}
	return h
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
