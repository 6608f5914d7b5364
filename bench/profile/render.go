package profile

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tapfwd/tapfwd/bench/cpuprofile"
	"github.com/tapfwd/tapfwd/bench/report"
)

// Title heads the text and Markdown renderings.
const Title = "tapfwd-bench profile"

// Document lays the report out for reading.
func (r *Report) Document() report.Document {
	d := report.Document{Title: Title, Summary: []string{
		r.HostLine(),
		fmt.Sprintf("Each profile: %s s of load (iperf3, or rr's requests for an rr workload), sampled after %s s of warm-up, on a fresh test bed per configuration and workload; tapfwd runs with --pprof. "+
			"One run each, with the profilers' own cost: read the shares, not the throughput or the round trips (the guard, tapfwd-bench throughput --perf, and tapfwd-bench latency measure those).",
			report.Num(r.WindowSeconds), report.Num(r.WarmupSeconds)),
		"Kernel side: " + r.Perf,
	}}
	if rt, ok := r.rttSection(); ok {
		d.Sections = append(d.Sections, rt)
	}
	d.Sections = append(d.Sections, r.goSection(), r.batchSection(), r.cpuSection(), r.threadSection(), r.placementSection())
	for _, w := range r.Workloads {
		if s, ok := r.kernelSection(w.Name); ok {
			d.Sections = append(d.Sections, s, r.taskSection(w.Name))
		}
	}
	for _, res := range r.Results {
		d.Sections = append(d.Sections, res.topSections()...)
	}
	d.Sections = append(d.Sections, report.ConfigTable(append(append([]report.Config(nil), r.Configs...), r.Skipped...), true))
	var fails [][]string
	for _, res := range r.Results {
		if res.Err != "" {
			fails = append(fails, []string{res.Config, res.Workload, res.Err})
		}
		for _, n := range res.Notes {
			fails = append(fails, []string{res.Config, res.Workload, n})
		}
	}
	d.Sections = append(d.Sections, report.FailedRuns("workload", fails)...)
	return d
}

// tapfwdConfigs are the configurations with a Go profile.
func (r *Report) tapfwdConfigs() []string {
	var out []string
	for _, c := range r.Configs {
		if c.Kind == report.KindTapfwd {
			out = append(out, c.Name)
		}
	}
	return out
}

// goSection is tapfwd's CPU by share: a row per share, a column per
// workload and tapfwd configuration.
func (r *Report) goSection() report.Section {
	s := report.Section{Title: "Where tapfwd's CPU goes (Go CPU profile over the window): % of its samples; a system call's share holds the kernel's work inside it",
		Head: []string{"share"}}
	var cols []*Result
	for _, w := range r.Workloads {
		for _, c := range r.tapfwdConfigs() {
			if res := r.Result(c, w.Name); res != nil && res.Go != nil {
				cols, s.Head = append(cols, res), append(s.Head, column(res, len(r.tapfwdConfigs())))
			}
		}
	}
	s.Rows = append(s.Rows, rowOf("CPU the profile sampled (cores)", cols, func(res *Result) string { return report.Num(res.Go.CPUSeconds / res.WindowSeconds) }))
	for _, name := range cpuprofile.GoShareNames {
		s.Rows = append(s.Rows, rowOf(name, cols, func(res *Result) string { return pctText(res.Go.share(name)) }))
	}
	return s
}

// rowOf is a table row: label, then cell of each result of cols.
func rowOf(label string, cols []*Result, cell func(*Result) string) []string {
	row := []string{label}
	for _, res := range cols {
		row = append(row, cell(res))
	}
	return row
}

// column names a result's column: its workload, and its configuration
// when more than one shares the table.
func column(res *Result, configs int) string {
	if configs > 1 {
		return res.Workload + " " + res.Config
	}
	return res.Workload
}

func pctText(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "%" }

// batchSection is tapfwd's counters over the window: frames per
// wake-up, GRO merges, writes per frame.
func (r *Report) batchSection() report.Section {
	s := report.Section{Title: "tapfwd's batches over the window (tapfwd_batch_frames, _packets_total, _gro_merged_frames_total)",
		Head: []string{"workload", "config", "direction", "frames", "wake-ups", "frames/wake-up", "batch sizes (up to: wake-ups)", "GSO in", "GRO merged/wake-up", "writes/frame"}}
	for _, res := range r.Results {
		for _, b := range res.Batches {
			if b.Frames == 0 {
				continue
			}
			var h []string
			for _, bk := range b.Histogram {
				h = append(h, bk.UpTo+":"+report.Num(bk.Wakeups))
			}
			s.Rows = append(s.Rows, []string{res.Workload, res.Config, b.Direction, report.Num(b.Frames), report.Num(b.Wakeups),
				report.Num(b.FramesPerWakeup), strings.Join(h, " "), report.Num(b.GSO), report.Num(b.MergedPerWakeup), report.Num(b.WritesPerFrame)})
		}
	}
	return s
}

// cpuSection is each CPU's split over the window, with the softirqs it
// ran.
func (r *Report) cpuSection() report.Section {
	s := report.Section{Title: "The machine per CPU over the window (/proc/stat, % of the window; /proc/softirqs per second)",
		Head: []string{"workload", "config", "figure", "cpu", "user", "system", "irq", "softirq", "idle", "steal", "NET_RX/s", "NET_TX/s"}}
	for _, res := range r.Results {
		for _, c := range res.CPUs {
			rx, tx := "-", "-"
			if t := res.Trace; t != nil && c.CPU < len(t.NetRX) && c.CPU < len(t.NetTX) && res.WindowSeconds > 0 {
				rx, tx = report.Num(float64(t.NetRX[c.CPU])/res.WindowSeconds), report.Num(float64(t.NetTX[c.CPU])/res.WindowSeconds)
			}
			s.Rows = append(s.Rows, []string{res.Workload, res.Config, report.Num(res.Figure) + " " + res.Unit, strconv.Itoa(c.CPU),
				pctText(c.User), pctText(c.System), pctText(c.IRQ), pctText(c.Softirq), pctText(c.Idle), pctText(c.Steal), rx, tx})
		}
	}
	return s
}

// threadsShown is how many threads a result lists, busiest first.
const threadsShown = 8

// threadSection is the threads that ran over the window.
func (r *Report) threadSection() report.Section {
	s := report.Section{Title: "Threads over the window (/proc/PID/task/TID/stat): tapfwd's, ksoftirqd, NAPI kthreads",
		Head: []string{"workload", "config", "thread", "tid", "user s", "system s", "% of the window"}}
	for _, res := range r.Results {
		for _, t := range res.Threads[:min(threadsShown, len(res.Threads))] {
			s.Rows = append(s.Rows, []string{res.Workload, res.Config, t.Role, strconv.Itoa(t.TID), report.Num(t.User), report.Num(t.System), pctText(t.Percent)})
		}
	}
	return s
}

// placementSection is where the busy threads ran and how long they
// waited for a CPU (the trace's schedstat).
func (r *Report) placementSection() report.Section {
	s := report.Section{Title: "Placement over the window: where each busy thread ran most, its CPU time and the time it waited, runnable, for a CPU (schedstat; iperf3's since it started, warm-up included)",
		Head: []string{"workload", "config", "thread", "tid", "main CPU", "on CPUs", "run s", "wait s", "switches", "preempted"}}
	for _, res := range r.Results {
		if res.Trace == nil {
			continue
		}
		for _, t := range res.Trace.Threads {
			var on []string
			for c, f := range t.OnCPU {
				on = append(on, fmt.Sprintf("%d:%.0f%%", c, 100*f))
			}
			s.Rows = append(s.Rows, []string{res.Workload, res.Config, t.Role, strconv.Itoa(t.TID), strconv.Itoa(t.MainCPU()), strings.Join(on, " "),
				report.Num(t.RunSeconds), report.Num(t.WaitSeconds), strconv.FormatInt(t.Switches, 10), strconv.FormatInt(t.Preempted, 10)})
		}
	}
	return s
}

// kernelSection is perf's paths on workload, a column per
// configuration.
func (r *Report) kernelSection(workload string) (report.Section, bool) {
	cols := r.kernelResults(workload)
	s := report.Section{Title: "Kernel side, " + workload + " (perf on every CPU): % of the samples of the run's own tasks (tapfwd, iperf3, ksoftirqd, NAPI kthreads, idle), each by the first path on its call chain",
		Head: append([]string{"path"}, configsOf(cols)...)}
	s.Rows = append(s.Rows, rowOf("CPU used by these tasks (cores)", cols, func(res *Result) string { return report.Num(res.Kernel.OwnCores) }))
	for i, name := range cpuprofile.KernelPathNames {
		s.Rows = append(s.Rows, rowOf(name, cols, func(res *Result) string { return pctText(res.Kernel.Paths[i].Percent) }))
	}
	return s, len(cols) > 0
}

// taskSection is perf's samples on workload by task, in the kernel and
// in user space.
func (r *Report) taskSection(workload string) report.Section {
	cols := r.kernelResults(workload)
	s := report.Section{Title: "Kernel side, " + workload + ": % of all samples on every CPU by task, kernel + user",
		Head: append([]string{"task"}, configsOf(cols)...)}
	for i, name := range cpuprofile.TaskNames {
		s.Rows = append(s.Rows, rowOf(name, cols, func(res *Result) string {
			t := res.Kernel.Tasks[i]
			return pctText(t.Kernel) + " + " + pctText(t.User)
		}))
	}
	return s
}

// kernelResults are the results on workload with a kernel side, in
// configuration order.
func (r *Report) kernelResults(workload string) []*Result {
	var out []*Result
	for _, c := range r.Configs {
		if res := r.Result(c.Name, workload); res != nil && res.Kernel != nil {
			out = append(out, res)
		}
	}
	return out
}

// configsOf are the configurations of results.
func configsOf(results []*Result) []string {
	out := make([]string, len(results))
	for i, res := range results {
		out[i] = res.Config
	}
	return out
}

// topSections are a result's top functions: tapfwd's (flat and
// cumulative), the tapfwd functions its system calls came from, and the
// kernel's.
func (res *Result) topSections() []report.Section {
	var out []report.Section
	if g := res.Go; g != nil {
		s := report.Section{Title: fmt.Sprintf("Top functions of tapfwd, %s, %s (Go profile: flat, cumulative)", res.Workload, res.Config),
			Head: []string{"function", "flat", "cum"}}
		for _, f := range g.Top {
			s.Rows = append(s.Rows, []string{f.Name, pctText(f.FlatPct), pctText(f.CumPct)})
		}
		sys := report.Section{Title: fmt.Sprintf("tapfwd's system calls by the function that made them, %s, %s", res.Workload, res.Config),
			Head: []string{"function", "in its system calls"}}
		for _, f := range g.Syscalls {
			sys.Rows = append(sys.Rows, []string{f.Name, pctText(f.FlatPct)})
		}
		out = append(out, s, sys)
	}
	if k := res.Kernel; k != nil {
		s := report.Section{Title: fmt.Sprintf("Top kernel functions, %s, %s (perf: the leaf of the kernel's call chain, %% of the %d samples of the run's own tasks)", res.Workload, res.Config, k.OwnSamples),
			Head: []string{"function", "samples"}}
		for _, f := range k.Top {
			s.Rows = append(s.Rows, []string{f.Name, pctText(f.FlatPct)})
		}
		out = append(out, s)
	}
	return out
}

// rttSection is the request/response workloads' round trips, when there
// are any.
func (r *Report) rttSection() (report.Section, bool) {
	s := report.Section{Title: "Round trips of the request/response workloads over the whole run (warm-up and the profilers' cost included: context for the shares; tapfwd-bench latency measures these)",
		Head: []string{"workload", "config", "requests/s", "loss", "p50 µs", "p99 µs"}}
	for _, res := range r.Results {
		if t := res.RTT; t != nil {
			s.Rows = append(s.Rows, []string{res.Workload, res.Config, report.Num(t.Rate), pctText(t.LossPercent), report.Num(t.P50), report.Num(t.P99)})
		}
	}
	return s, len(s.Rows) > 0
}
