package throughputview

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/bench/trace"
)

// feature is a figure of a run's trace that may tell a slow run from a
// fast one; of is NaN when the trace lacks what it takes. secs is the
// length of the run the trace covers.
type feature struct {
	name string
	of   func(t *trace.Run, secs float64) float64
}

// features are the trace figures the report shows per run and per mode.
var features = []feature{
	{"worker busy %", func(t *trace.Run, secs float64) float64 { return 100 * role(t, trace.Worker, busy, secs) }},
	{"worker waiting %", func(t *trace.Run, secs float64) float64 { return 100 * role(t, trace.Worker, waiting, secs) }},
	{"worker preempted /s", func(t *trace.Run, secs float64) float64 { return role(t, trace.Worker, preempted, secs) }},
	{"client beside worker %", func(t *trace.Run, _ float64) float64 { return beside(t, trace.Client) }},
	{"client preempted /s", func(t *trace.Run, secs float64) float64 { return role(t, trace.Client, preempted, secs) }},
	{"client busy %", func(t *trace.Run, secs float64) float64 { return 100 * role(t, trace.Client, busy, secs) }},
	{"client waiting %", func(t *trace.Run, secs float64) float64 { return 100 * role(t, trace.Client, waiting, secs) }},
	{"server beside worker %", func(t *trace.Run, _ float64) float64 { return beside(t, trace.Server) }},
	{"server busy %", func(t *trace.Run, secs float64) float64 { return 100 * role(t, trace.Server, busy, secs) }},
	{"kthread beside worker %", func(t *trace.Run, _ float64) float64 { return beside(t, trace.Kthread) }},
	{"NET_RX on worker's CPU %", netRXBeside},
	{"sent B/packet", func(t *trace.Run, _ float64) float64 { return ratio(t.Sender, "IpExt.OutOctets", "Ip.OutRequests", 1) }},
	{"autocorked /100 packets", func(t *trace.Run, _ float64) float64 {
		return ratio(t.Sender, "TcpExt.TCPAutoCorking", "Ip.OutRequests", 100)
	}},
	{"ACKs /100 packets in", func(t *trace.Run, _ float64) float64 { return ratio(t.Receiver, "Tcp.OutSegs", "Ip.InReceives", 100) }},
	{"delayed ACKs", func(t *trace.Run, _ float64) float64 { return count(t.Receiver, "TcpExt.DelayedACKs") }},
	{"retransmitted", func(t *trace.Run, _ float64) float64 { return count(t.Sender, "Tcp.RetransSegs") }},
	{"load average", func(t *trace.Run, _ float64) float64 { return t.Load }},
	{"RTT us", func(t *trace.Run, _ float64) float64 {
		if t.Iperf == nil || t.Iperf.MeanRTT == 0 {
			return math.NaN()
		}
		return t.Iperf.MeanRTT
	}},
}

func busy(th trace.Thread) float64    { return th.RunSeconds }
func waiting(th trace.Thread) float64 { return th.WaitSeconds }

// preempted is th's involuntary context switches.
func preempted(th trace.Thread) float64 { return float64(th.Preempted) }

// role is what the threads of role r sum to per second of secs.
func role(t *trace.Run, r string, what func(trace.Thread) float64, secs float64) float64 {
	sum, found := 0.0, false
	for _, th := range t.Threads {
		if th.Role == r {
			sum, found = sum+what(th), true
		}
	}
	if !found || secs <= 0 {
		return math.NaN()
	}
	return sum / secs
}

// workerCPU is the CPU the (first) worker ran on most; -1 without one.
func workerCPU(t *trace.Run) int {
	for _, th := range t.Threads {
		if th.Role == trace.Worker {
			return th.MainCPU()
		}
	}
	return -1
}

// beside is the share of the samples, in percent, that found the
// threads of role r on the worker's CPU.
func beside(t *trace.Run, r string) float64 {
	w := workerCPU(t)
	sum, n := 0.0, 0
	for _, th := range t.Threads {
		if th.Role == r && w >= 0 && w < len(th.OnCPU) {
			sum, n = sum+th.OnCPU[w], n+1
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return 100 * sum / float64(n)
}

// netRXBeside is the share of the NET_RX softirqs run on the worker's CPU.
func netRXBeside(t *trace.Run, _ float64) float64 {
	w := workerCPU(t)
	var sum int64
	for _, n := range t.NetRX {
		sum += n
	}
	if w < 0 || w >= len(t.NetRX) || sum == 0 {
		return math.NaN()
	}
	return 100 * float64(t.NetRX[w]) / float64(sum)
}

// ratio is scale * num / den of counters c (a trace keeps the counters
// that moved: one absent did not); NaN without counters or with den 0.
func ratio(c map[string]int64, num, den string, scale float64) float64 {
	if c[den] == 0 {
		return math.NaN()
	}
	return scale * float64(c[num]) / float64(c[den])
}

// count is counter name of c; NaN without counters.
func count(c map[string]int64, name string) float64 {
	if c == nil {
		return math.NaN()
	}
	return float64(c[name])
}

func fmtFeature(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// traceSecs is the length of the run a trace covers: the omitted start
// and the measured part.
func (r Report) traceSecs() float64 {
	return float64(r.Settings.OmitSeconds + r.Settings.RunSeconds)
}

// modeOf is "slow" or "fast" for a run of a cell in two modes, else "".
func (r Report) modeOf(run throughput.RunRecord) string {
	c := r.Cell(run.Config, run.Workload)
	if c == nil || len(c.Modes) != 2 || run.Err != "" {
		return ""
	}
	if slices.Contains(c.Modes[0].Reps, run.Rep) {
		return "slow"
	}
	return "fast"
}

// twoModesSections list the cells whose runs fall in two modes and, with
// traces, the mean of every trace figure in each mode: what tells the
// slow runs from the fast ones.
func (r Report) twoModesSections() []report.Section {
	s := report.Section{Title: "Runs in two modes: a median over both describes neither (slow and fast mode: median, runs, repetitions)",
		Head: []string{"config", "workload", "slow", "fast"}}
	diff := report.Section{Title: "What differs between the slow and the fast runs: mean of each traced figure per mode",
		Head: []string{"config", "workload", "mode", "runs"}}
	for _, f := range features {
		diff.Head = append(diff.Head, f.name)
	}
	for _, c := range r.Cells {
		if len(c.Modes) != 2 {
			continue
		}
		row := []string{c.Config, c.Workload}
		for i, m := range c.Modes {
			row = append(row, fmt.Sprintf("%s x%d (reps %s)", report.Num(m.Median), m.Runs, joinInts(m.Reps)))
			if rows := r.modeMeans(c, m, []string{"slow", "fast"}[i]); rows != nil {
				diff.Rows = append(diff.Rows, rows)
			}
		}
		s.Rows = append(s.Rows, row)
	}
	switch {
	case len(s.Rows) == 0:
		return nil
	case len(diff.Rows) == 0:
		return []report.Section{s}
	}
	return []report.Section{s, diff}
}

// modeMeans is the row of the mean traced figures of c's runs in mode m;
// nil when none of them has a trace.
func (r Report) modeMeans(c throughput.Cell, m throughput.Mode, name string) []string {
	sums := make([]float64, len(features))
	ns := make([]int, len(features))
	traced := 0
	for _, run := range r.Runs {
		if run.Config != c.Config || run.Workload != c.Workload || run.Trace == nil || run.Err != "" || !slices.Contains(m.Reps, run.Rep) {
			continue
		}
		traced++
		for i, f := range features {
			if v := f.of(run.Trace, r.traceSecs()); !math.IsNaN(v) {
				sums[i], ns[i] = sums[i]+v, ns[i]+1
			}
		}
	}
	if traced == 0 {
		return nil
	}
	row := []string{c.Config, c.Workload, name, strconv.Itoa(traced)}
	for i := range features {
		row = append(row, fmtFeature(sums[i]/float64(ns[i])))
	}
	return row
}

// traceSection is every run with its traced figures.
func (r Report) traceSection() report.Section {
	s := report.Section{Title: fmt.Sprintf("Trace of every run (busy and waiting: CPU time used and spent runnable without a CPU, in percent of the %.0f s run; "+
		"beside worker: share of samples every %v on the CPU tapfwd's worker ran on; counters from the sending and receiving namespaces)", r.traceSecs(), trace.SampleEvery),
		Head: []string{"config", "workload", "rep", "value", "mode", "packing"}}
	for _, f := range features {
		s.Head = append(s.Head, f.name)
	}
	s.Head = append(s.Head, "TAP", "missing")
	for _, run := range r.Runs {
		value := report.Num(run.Value)
		if run.Err != "" {
			value = "failed"
		}
		t := run.Trace
		if t == nil {
			t = &trace.Run{}
		}
		row := []string{run.Config, run.Workload, strconv.Itoa(run.Rep), value, r.modeOf(run), t.Packing()}
		for _, f := range features {
			row = append(row, fmtFeature(f.of(t, r.traceSecs())))
		}
		s.Rows = append(s.Rows, append(row, tapText(t.TAP), strings.Join(t.Missing, "; ")))
	}
	return s
}

// packingSection lists the cells whose traced runs include both of the
// sender's packing states (trace.Run.Packing), with each state's median:
// the cause of the two modes of small-write rows, which a median over
// both describes neither of; false when no cell has both.
func (r Report) packingSection() (report.Section, bool) {
	states := []string{trace.PerSegment, trace.Coalesced}
	s := report.Section{Title: fmt.Sprintf("Runs by how the sender's TCP packed its data (trace: sent bytes per IP packet, %s up to %d, %s above): median, runs, repetitions of each",
		trace.PerSegment, trace.PerSegmentMax, trace.Coalesced),
		Head: []string{"config", "workload", states[0], states[1], states[0] + " / " + states[1]}}
	for _, c := range r.Cells {
		values := map[string][]float64{}
		reps := map[string][]int{}
		for _, run := range r.Runs {
			if run.Config != c.Config || run.Workload != c.Workload || run.Trace == nil || run.Err != "" {
				continue
			}
			p := run.Trace.Packing()
			values[p], reps[p] = append(values[p], run.Value), append(reps[p], run.Rep)
		}
		if len(values[states[0]]) == 0 || len(values[states[1]]) == 0 {
			continue
		}
		row := []string{c.Config, c.Workload}
		for _, st := range states {
			row = append(row, fmt.Sprintf("%s x%d (reps %s)", report.Num(stats.Median(values[st])), len(values[st]), joinInts(reps[st])))
		}
		s.Rows = append(s.Rows, append(row, report.Num(stats.Median(values[states[0]])/stats.Median(values[states[1]]))))
	}
	return s, len(s.Rows) > 0
}

// tapText is a TAP's traced state in one cell.
func tapText(st map[string]string) string {
	if st == nil {
		return "-"
	}
	var parts []string
	for _, k := range trace.TAPFiles {
		if v, ok := st[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
