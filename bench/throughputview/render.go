package throughputview

import (
	"fmt"
	"image/color"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
)

// Title heads the text and Markdown renderings.
const Title = "tapfwd-bench throughput"

// Document lays the report out for reading.
func (r Report) Document() report.Document {
	return report.Document{Title: Title, Summary: r.summary(), Sections: r.sections()}
}

// summary is the report's opening: where, when, how.
func (r Report) summary() []string {
	s := r.Settings
	run := fmt.Sprintf("%d s per iperf3 run", s.RunSeconds)
	if s.OmitSeconds > 0 {
		run = fmt.Sprintf("%d s per iperf3 run after %d s left out (-O %d)", s.RunSeconds, s.OmitSeconds, s.OmitSeconds)
	}
	lines := []string{
		r.HostLine(),
		fmt.Sprintf("%d configurations x %d workloads, %s (fresh test bed per configuration and repetition), %s, %s in all",
			len(r.ranConfigs()), len(r.Workloads), r.repsText(), run, r.Finished.Sub(r.Started).Round(time.Second)),
		fmt.Sprintf("Medians with %.0f%% percentile-bootstrap intervals (%d resamples, seed %d). %s",
			s.Level*100, s.Resamples, s.Seed, r.ruleLine()),
	}
	if s.Topology == matrix.VXLAN.String() {
		line := "Topology vxlan: two hosts (namespaces) joined by an underlay veth, a VXLAN device on each (MTU 1450); " +
			"the wire side is host 1's lab, the lab side host 2's, and every frame crosses a forwarder (or bridge) on each host and the tunnel."
		if c := s.HostCPUs; len(c) == 2 {
			line += fmt.Sprintf(" Host 1's tapfwd works on CPU %d, host 2's on CPU %d.", c[0], c[1])
		}
		lines = append(lines, line)
	}
	if p := s.IperfPin; p != nil {
		lines = append(lines, fmt.Sprintf("iperf3 pinned: the wire side (client) to CPU %d, the lab side (server) to CPU %d.", p.Wire, p.Lab))
	}
	lines = append(lines, r.placementLines()...)
	return append(lines, s.QuickLine()...)
}

// repsText says how many repetitions ran and, for a sequential run, why
// no more.
func (r Report) repsText() string {
	s := r.Settings
	q := s.Sequential
	if q == nil {
		return fmt.Sprintf("%d repetitions interleaved", s.Reps)
	}
	why := "every comparison had the pairs its first stage asked for"
	switch q.Stopped {
	case matrix.StopBudget:
		why = "the next would have overrun the budget"
	case matrix.StopMax:
		why = fmt.Sprintf("the most a run makes (%d)", matrix.MaxReps)
	}
	return fmt.Sprintf("%d repetitions interleaved, sequential: a first stage of %d, then as many as the comparisons needed within a budget of %s; stopped as %s",
		s.Reps, q.Stage1Reps, time.Duration(q.BudgetSeconds*float64(time.Second)).Round(time.Second), why)
}

// placementLines say where each workload's iperf3 ran.
func (r Report) placementLines() []string {
	worker := 0
	if c := r.Settings.WorkerCPU; c != nil {
		worker = *c
	}
	var lines []string
	seen := map[string][]string{}
	var order []*throughput.Placement
	for _, w := range r.Workloads {
		p := w.Placement
		if p == nil {
			continue
		}
		if _, ok := seen[p.Name]; !ok {
			order = append(order, p)
		}
		seen[p.Name] = append(seen[p.Name], w.Name)
	}
	for _, p := range order {
		lines = append(lines, fmt.Sprintf("Placement %s (%s): %s.", p.Name, strings.Join(seen[p.Name], ", "), p.Describe(worker)))
	}
	return lines
}

func (r Report) ranConfigs() []report.Config { return report.RanConfigs(r.Configs) }

// ruleLine says how configurations are compared and what a verdict takes.
func (r Report) ruleLine() string {
	s := r.Settings
	if !s.Paired {
		return s.VerdictRule()
	}
	rule := s.Rule()
	line := fmt.Sprintf("Configurations are compared within each repetition: the median of the per-repetition differences, with its interval (pairs resampled), as a change of %s's median. "+
		"A verdict needs at least %d repetitions each", throughput.NAPIOff, rule.MinReps)
	if s.Interval == throughput.SteinInterval {
		line = fmt.Sprintf("Configurations are compared within each repetition: the geometric mean of the per-repetition ratios, with Stein's two-stage 95%% interval "+
			"(the spread of the pairs of the first %d repetitions sets its width and how many pairs a comparison needs; it takes no more). "+
			"A verdict needs at least %d pairs", s.Stage1(), rule.MinReps)
	}
	against := throughput.NAPIOff + "'s median"
	if s.AgainstBridge {
		line += fmt.Sprintf(" (the TAP NAPI modes against %s, every forwarder against the bridge)", throughput.NAPIOff)
		against = "the median it is compared against"
	}
	if rule.MaxHalfWidth > 0 {
		line += fmt.Sprintf(", an interval no wider than +-%s of %s", report.PctAbs(rule.MaxHalfWidth), against)
	}
	return line + ", and the whole interval on one side of 0."
}

// bridgeSection is, in a run with Settings.AgainstBridge, every
// forwarder against the bridge on every workload: the paired ratio of the
// throughputs, the ratio of the whole machine's CPU per unit delivered,
// and whether each meets the workload's targets.
func (r Report) bridgeSection() (report.Section, bool) {
	if !r.Settings.AgainstBridge {
		return report.Section{}, false
	}
	s := report.Section{
		Title: "Against the bridge: throughput over the bridge's (geometric mean of the per-repetition ratios, Stein's 95% interval), " +
			"and the whole machine's CPU per unit delivered over the bridge's (ratio of the medians, bootstrap 95% interval), with the targets",
		Head: []string{"workload", "config", "throughput / bridge [95% CI]", "+-", "pairs", "target", "met", "CPU per unit / bridge [95% CI]", "target", "met"},
	}
	for _, w := range r.Workloads {
		for _, c := range r.ranConfigs() {
			cmp := r.Comparison(c.Name, throughput.Bridge, w.Name)
			if cmp == nil {
				continue
			}
			row := []string{w.Name, c.Name, report.Est(&cmp.Ratio), report.PctAbs(halfWidth(cmp)), pairsText(cmp), "-", "-", "-", "-", "-"}
			if t := w.Targets; t != nil {
				row[5], row[6] = fmt.Sprintf(">= %.2f", t.Ratio), met(cmp.Ratio.Low >= t.Ratio, cmp.Ratio.High < t.Ratio)
			}
			if cell := r.Cell(c.Name, w.Name); cell != nil && cell.Cost != nil && cell.Cost.RatioToBridge != nil {
				q := cell.Cost.RatioToBridge
				row[7] = report.Est(q)
				if t := w.Targets; t != nil && t.Cost > 0 {
					row[8], row[9] = fmt.Sprintf("<= %.2f", t.Cost), met(q.High <= t.Cost, q.Low > t.Cost)
				}
			}
			s.Rows = append(s.Rows, row)
		}
	}
	s.Notes = []string{"met: yes when the whole interval meets the target, no when none of it does, open when it straddles the target."}
	return s, len(s.Rows) > 0
}

// met words a target's outcome: yes when the interval meets it, no when
// it misses it, else open.
func met(yes, no bool) string {
	switch {
	case yes:
		return "yes"
	case no:
		return "no"
	}
	return "open"
}

// halfWidth is c's interval half-width in percent of B's median (for a
// schema 1 report, half the width of its percent-change interval).
func halfWidth(c *report.Comparison) float64 {
	if c.HalfWidth > 0 {
		return c.HalfWidth
	}
	return (c.Percent.High - c.Percent.Low) / 2
}

// verdictText is c's verdict as the tables write it: a verdict withheld
// for a wide interval says how wide against what target, and in a
// sequential run how many pairs it would have needed.
func (r Report) verdictText(c *report.Comparison) string {
	if c.Verdict != stats.TooWide {
		return c.Verdict
	}
	s := fmt.Sprintf("interval +-%s: too wide for a verdict at the +-%s target", report.PctAbs(halfWidth(c)), report.PctAbs(r.Settings.TargetHalfWidth))
	if c.Stopped != "" && c.Needed > c.Pairs {
		s += fmt.Sprintf(" (needs %d pairs; %s)", c.Needed, c.Stopped)
	}
	return s
}

// pairsText is how many pairs c took, and in a sequential run how many
// its first stage asked for.
func pairsText(c *report.Comparison) string {
	if c.Pairs == 0 {
		return "-"
	}
	if c.Needed == 0 {
		return strconv.Itoa(c.Pairs)
	}
	return fmt.Sprintf("%d/%d", c.Pairs, c.Needed)
}

func (r Report) sections() []report.Section {
	var out []report.Section
	if s, ok := r.bridgeSection(); ok {
		out = append(out, s)
	}
	if s, ok := r.peerSection(); ok {
		out = append(out, s)
	}
	if s, ok := r.floorSection(); ok {
		out = append(out, s)
	}
	gs := r.groups()
	if r.ran(throughput.NAPIOn) && r.ran(throughput.NAPIOff) {
		for _, g := range gs {
			out = append(out, r.napiSection(g))
		}
	}
	for _, g := range gs {
		out = append(out, r.groupSection(g))
	}
	if s, ok := r.costSection(); ok {
		out = append(out, s)
	} else if s, ok := r.cpuSection(); ok {
		out = append(out, s)
	}
	if s, ok := r.modesSection(); ok {
		out = append(out, s)
	}
	if s, ok := r.repsSection(); ok {
		out = append(out, s)
	}
	out = append(out, r.twoModesSections()...)
	if s, ok := r.packingSection(); ok {
		out = append(out, s)
	}
	if r.Trace {
		out = append(out, r.traceSection())
	}
	out = append(out, report.ConfigTable(r.Configs, false))
	return append(out, report.FailedCells("workload", r.Cells, func(c throughput.Cell) (string, string, []string) {
		return c.Config, c.Workload, c.Failures
	})...)
}

// repsSection is, for a sequential run, the repetitions each
// configuration made and the runs that gave a figure.
func (r Report) repsSection() (report.Section, bool) {
	if r.Settings.Sequential == nil {
		return report.Section{}, false
	}
	s := report.Section{Title: "Repetitions per configuration", Head: []string{"config", "repetitions", "runs with a figure", "failed runs"}}
	for _, c := range r.ranConfigs() {
		reps := map[int]bool{}
		ok, failed := 0, 0
		for _, run := range r.Runs {
			if run.Config != c.Name {
				continue
			}
			reps[run.Rep] = true
			if run.Err == "" {
				ok++
			} else {
				failed++
			}
		}
		s.Rows = append(s.Rows, []string{c.Name, strconv.Itoa(len(reps)), strconv.Itoa(ok), strconv.Itoa(failed)})
	}
	return s, true
}

// napiSection is IFF_NAPI off against on for g's workloads.
func (r Report) napiSection(g group) report.Section {
	head := "-l"
	if g.Proto == "udp" {
		head = "size"
	}
	s := report.Section{Title: "IFF_NAPI off -> on: " + g.title(),
		Head: []string{head, throughput.NAPIOff, throughput.NAPIOn, "on - off [95% CI]", "+-", "pairs", "verdict", throughput.Bridge, throughput.NAPIOn + "/" + throughput.Bridge}}
	for _, w := range g.Workloads {
		off, on, br := r.Cell(throughput.NAPIOff, w.Name), r.Cell(throughput.NAPIOn, w.Name), r.Cell(throughput.Bridge, w.Name)
		row := []string{throughput.SizeName(w.Len), report.Est(off.Value), report.Est(on.Value), "-", "-", "-", "-", "-", report.Ratio(on.RatioToBridge)}
		if c := r.Comparison(throughput.NAPIOn, throughput.NAPIOff, w.Name); c != nil {
			row[3], row[4], row[5], row[6] = report.DiffEst(c.Difference, 1), report.PctAbs(halfWidth(c)), pairsText(c), r.verdictText(c)
		}
		if br != nil {
			row[7] = report.Est(br.Value)
		}
		s.Rows = append(s.Rows, row)
	}
	return s
}

// groupSection is every configuration on g's workloads, with the ratio to
// the bridge (and for UDP the loss).
func (r Report) groupSection(g group) report.Section {
	s := report.Section{Title: "All configurations: " + g.title() + "; ratio to the bridge", Head: []string{"config"}}
	for _, w := range g.Workloads {
		s.Head = append(s.Head, throughput.SizeName(w.Len), "/bridge")
	}
	if g.Proto == "udp" {
		s.Head = append(s.Head, "loss %", "dropped by the receiving socket %")
	}
	for _, c := range r.ranConfigs() {
		row := []string{c.Name}
		var loss, rcvbuf string
		for _, w := range g.Workloads {
			cell := r.Cell(c.Name, w.Name)
			row = append(row, report.Est(cell.Value), report.Ratio(cell.RatioToBridge))
			if cell.Value != nil {
				loss = strconv.FormatFloat(cell.LossPercent, 'f', 1, 64)
				rcvbuf = strconv.FormatFloat(cell.RcvbufPercent, 'f', 1, 64)
			}
		}
		if g.Proto == "udp" {
			row = append(row, loss, rcvbuf)
		}
		s.Rows = append(s.Rows, row)
	}
	return s
}

// cpuSection is what forwarding cost: the forwarder's CPU per gigabit
// delivered, on the UDP and large-write workloads.
func (r Report) cpuSection() (report.Section, bool) {
	s := report.Section{Title: "Forwarder CPU per gigabit delivered (CPU seconds / Gbit, median; from /proc/PID/stat)", Head: []string{"config"}}
	var ws []throughput.Workload
	for _, w := range r.Workloads {
		if w.Proto == "udp" || w.Len >= 4096 {
			ws = append(ws, w)
			s.Head = append(s.Head, w.Name)
		}
	}
	for _, c := range r.ranConfigs() {
		if !report.Userspace(c.Kind) {
			continue
		}
		row := []string{c.Name}
		for _, w := range ws {
			row = append(row, strconv.FormatFloat(r.Cell(c.Name, w.Name).ForwarderCPUPerGbit, 'f', 3, 64))
		}
		s.Rows = append(s.Rows, row)
	}
	return s, len(s.Rows) > 0 && len(ws) > 0
}

// costSection is what each configuration cost the whole machine per unit
// delivered, in its parts, beside the forwarder's own share and as a
// ratio to the bridge; none for a report without cost figures.
func (r Report) costSection() (report.Section, bool) {
	s := report.Section{
		Title: "Cost: CPU seconds of the whole machine per unit delivered (all CPUs, user + system + softirq, /proc/stat over each run; " +
			throughput.PerGbit + " of TCP payload, " + throughput.PerMpkt + " of UDP datagrams), its parts, the forwarder's own share (/proc/PID/stat, in user and kernel mode), and the ratio to the bridge",
		Head: []string{"workload", "config", "unit", "machine [95% CI]", "user", "system", "softirq", "forwarder", "fwd user", "fwd kernel", "/bridge [95% CI]"},
	}
	for _, w := range r.Workloads {
		for _, c := range r.ranConfigs() {
			cell := r.Cell(c.Name, w.Name)
			if cell == nil || cell.Cost == nil {
				continue
			}
			k := cell.Cost
			fwd := []string{"-", "-", "-"}
			if k.Forwarder > 0 {
				fwd = []string{report.Num(k.Forwarder), report.Num(k.ForwarderUser), report.Num(k.ForwarderSystem)}
			}
			row := []string{w.Name, c.Name, k.Unit, report.Est(&k.Machine), report.Num(k.User), report.Num(k.System), report.Num(k.Softirq)}
			s.Rows = append(s.Rows, append(append(row, fwd...), report.Est(k.RatioToBridge)))
		}
	}
	return s, len(s.Rows) > 0
}

// modesSection is the TAP NAPI modes, each against IFF_NAPI off, when
// more than one ran.
func (r Report) modesSection() (report.Section, bool) {
	var modes []string
	for _, ab := range throughput.NAPIPairs {
		if r.ran(ab[0]) && r.ran(ab[1]) {
			modes = append(modes, ab[0])
		}
	}
	s := report.Section{Title: "TAP NAPI modes against " + throughput.NAPIOff + ": change of the median [95% CI], verdict",
		Head: append([]string{"workload"}, modes...)}
	switch {
	case r.Settings.Interval == throughput.SteinInterval:
		s.Title = "TAP NAPI modes against " + throughput.NAPIOff + ": change [95% CI] (geometric mean of the per-repetition ratios), pairs taken/needed, verdict"
	case r.Settings.Paired:
		s.Title = "TAP NAPI modes against " + throughput.NAPIOff + ": change [95% CI] (median of the per-repetition differences over " + throughput.NAPIOff + "'s median), verdict"
	}
	for _, w := range r.Workloads {
		row := []string{w.Name}
		for _, a := range modes {
			c := r.Comparison(a, throughput.NAPIOff, w.Name)
			if c == nil {
				row = append(row, "-")
				continue
			}
			pairs := ""
			if c.Pairs > 0 {
				pairs = pairsText(c) + " pairs, "
			}
			row = append(row, fmt.Sprintf("%s [%s, %s] %s%s", report.Pct(c.Percent.Median), report.Pct(c.Percent.Low), report.Pct(c.Percent.High), pairs, r.verdictText(c)))
		}
		s.Rows = append(s.Rows, row)
	}
	return s, len(modes) > 1
}

// CSVHeader is the first line of WriteCSV.
var CSVHeader = []string{"config", "kind", "workload", "proto", "len", "streams", "direction", "unit",
	"reps", "median", "ci_low", "ci_high", "ratio_to_bridge", "ratio_ci_low", "ratio_ci_high",
	"napi_on_vs_off_diff", "napi_on_vs_off_verdict",
	"retransmits_median", "sender_cpu_median", "receiver_cpu_median", "loss_percent_median", "rcvbuf_drop_percent_median", "samples", "failures",
	"napi_on_vs_off_half_width_percent", "cost_unit", "cost_machine_median", "cost_machine_ci_low", "cost_machine_ci_high",
	"cost_user_median", "cost_system_median", "cost_softirq_median", "cost_forwarder_median",
	"cost_ratio_to_bridge", "cost_ratio_ci_low", "cost_ratio_ci_high",
	"cost_forwarder_user_median", "cost_forwarder_system_median",
	"napi_on_vs_off_pairs", "napi_on_vs_off_pairs_needed", "napi_on_vs_off_stopped_by", "placement", "modes"}

// WriteCSV writes one line per cell; the napi columns are filled on the
// napi-on rows.
func (r Report) WriteCSV(w io.Writer) error {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	var rows [][]string
	for _, c := range r.Cells {
		kind := ""
		if cfg := r.Config(c.Config); cfg != nil {
			kind = cfg.Kind
		}
		wl := r.workload(c.Workload)
		rec := []string{c.Config, kind, c.Workload, wl.Proto, strconv.Itoa(wl.Len), strconv.Itoa(wl.Streams), wl.Direction, c.Unit,
			strconv.Itoa(c.Reps), "", "", "", "", "", "", "", "",
			f(c.Retransmits), f(c.SenderCPU), f(c.ReceiverCPU), f(c.LossPercent), f(c.RcvbufPercent), "", strings.Join(c.Failures, "; "),
			"", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", ""}
		if c.Value != nil {
			rec[9], rec[10], rec[11] = f(c.Value.Median), f(c.Value.Low), f(c.Value.High)
		}
		if c.RatioToBridge != nil {
			rec[12], rec[13], rec[14] = f(c.RatioToBridge.Median), f(c.RatioToBridge.Low), f(c.RatioToBridge.High)
		}
		if cmp := r.Comparison(throughput.NAPIOn, throughput.NAPIOff, c.Workload); cmp != nil && c.Config == throughput.NAPIOn {
			rec[15], rec[16], rec[24] = f(cmp.Diff.Median), cmp.Verdict, f(halfWidth(cmp))
			rec[38], rec[39], rec[40] = strconv.Itoa(cmp.Pairs), strconv.Itoa(cmp.Needed), cmp.Stopped
		}
		if wl.Placement != nil {
			rec[41] = wl.Placement.Name
		}
		var ms []string
		for _, m := range c.Modes {
			ms = append(ms, fmt.Sprintf("%s x%d", f(m.Median), m.Runs))
		}
		rec[42] = strings.Join(ms, " ")
		if k := c.Cost; k != nil {
			copy(rec[25:], []string{k.Unit, f(k.Machine.Median), f(k.Machine.Low), f(k.Machine.High),
				f(k.User), f(k.System), f(k.Softirq), f(k.Forwarder)})
			if q := k.RatioToBridge; q != nil {
				copy(rec[33:], []string{f(q.Median), f(q.Low), f(q.High)})
			}
			if k.Forwarder > 0 {
				rec[36], rec[37] = f(k.ForwarderUser), f(k.ForwarderSystem)
			}
		}
		s := make([]string, len(c.Samples))
		for i, v := range c.Samples {
			s[i] = f(v)
		}
		rec[22] = strings.Join(s, " ")
		rows = append(rows, rec)
	}
	return report.WriteCSV(w, CSVHeader, rows)
}

func (r Report) workload(name string) throughput.Workload {
	for _, w := range r.Workloads {
		if w.Name == name {
			return w
		}
	}
	return throughput.Workload{Name: name}
}

// WriteCharts writes throughput.png and throughput.svg (one panel per
// workload: a bar per configuration at its median, whiskers spanning the
// 95% interval) and, when the report has comparisons, napi.png and napi.svg
// (each TAP NAPI mode's median against IFF_NAPI off's as a ratio, with its
// interval) into dir.
func (r Report) WriteCharts(dir string) error {
	charts := []report.Chart{r.barGrid()}
	if slices.ContainsFunc(r.Comparisons, func(c report.Comparison) bool { return c.B == throughput.NAPIOff }) {
		charts = append(charts, r.napiChart())
	}
	return report.WriteCharts(dir, charts...)
}

// barGrid lays out one panel per workload: a row per group, a column per
// size.
func (r Report) barGrid() report.BarGrid {
	g := report.BarGrid{Name: "throughput", Colors: palette}
	ran := r.ranConfigs()
	for _, c := range ran {
		g.Labels = append(g.Labels, c.Name)
	}
	for _, gr := range r.groups() {
		var row []report.Panel
		for _, w := range gr.Workloads {
			p := report.Panel{Title: panelTitle(gr, w), YLabel: w.Unit + " (median, 95% CI)"}
			for _, c := range ran {
				var v *stats.Estimate
				if cell := r.Cell(c.Name, w.Name); cell != nil {
					v = cell.Value
				}
				p.Values = append(p.Values, v)
			}
			row = append(row, p)
		}
		g.Panels = append(g.Panels, row)
	}
	return g
}

func panelTitle(g group, w throughput.Workload) string {
	if g.Proto == "udp" {
		return fmt.Sprintf("UDP %s %s, delivered", throughput.SizeName(w.Len), g.Direction)
	}
	return fmt.Sprintf("TCP %s -P %d -l %s", g.Direction, g.Streams, throughput.SizeName(w.Len))
}

// napiChart draws each TAP NAPI mode's median against NAPIOff's per
// workload as a ratio.
func (r Report) napiChart() report.RatioChart {
	c := report.RatioChart{Name: "napi", Title: "TAP NAPI modes against " + throughput.NAPIOff + ": ratio of medians (95% CI)",
		XLabel: "median / median of " + throughput.NAPIOff + " (log scale; right of 1 is faster)", Colors: palette}
	for _, w := range r.Workloads {
		c.Rows = append(c.Rows, w.Name)
	}
	for _, ab := range throughput.NAPIPairs {
		s := report.Series{Name: ab[0]}
		for _, w := range r.Workloads {
			var e *stats.Estimate
			if cmp := r.Comparison(ab[0], ab[1], w.Name); cmp != nil {
				e = &cmp.Ratio
			}
			s.Ratios = append(s.Ratios, e)
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// palette gives every configuration its colour: the tapfwd variants
// bright, the naive baseline brown, the kernel baselines grey.
var palette = report.Palette{
	throughput.NAPIOff:      color.RGBA{0xd6, 0x27, 0x28, 0xff},
	throughput.NAPIOn:       color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	throughput.NAPIThreaded: color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	throughput.NAPIGRO:      color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	throughput.VnetOff:      color.RGBA{0x94, 0x67, 0xbd, 0xff},
	throughput.Queues2:      color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	throughput.Naive:        color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	throughput.Bridge:       color.RGBA{0x55, 0x55, 0x55, 0xff},
	throughput.Direct:       color.RGBA{0xaa, 0xaa, 0xaa, 0xff},
}

// group is a block of the report: one protocol, direction, stream count
// and placement, with one row or column per message size.
type group struct {
	Proto     string
	Direction string
	Streams   int
	WireMTU   bool
	Placement string                // its name; empty before Workload.Placement
	Workloads []throughput.Workload // ascending Len
}

func (g group) title() string {
	place := ""
	if g.Placement != "" {
		place = ", iperf3 " + g.Placement
	}
	if g.WireMTU {
		return fmt.Sprintf("TCP %s, 1 stream, MTU-sized frames from the wire (TSO and GSO off on its veth)%s: Gbit/s", g.Direction, place)
	}
	if g.Proto == "udp" {
		return fmt.Sprintf("UDP %s, %s, 1 stream, unlimited rate%s: datagrams delivered, kpps", throughput.SizeName(g.Workloads[0].Len), g.Direction, place)
	}
	s := "streams"
	if g.Streams == 1 {
		s = "stream"
	}
	return fmt.Sprintf("TCP %s, %d %s (iperf3 -P %d)%s: Gbit/s by write size (-l)", g.Direction, g.Streams, s, g.Streams, place)
}

func (r Report) groups() []group {
	var gs []group
	for _, w := range r.Workloads {
		place := ""
		if w.Placement != nil {
			place = w.Placement.Name
		}
		i := slices.IndexFunc(gs, func(g group) bool {
			return g.Proto == w.Proto && g.Direction == w.Direction && g.Streams == w.Streams && g.WireMTU == w.WireMTU && g.Placement == place
		})
		if i < 0 {
			gs = append(gs, group{Proto: w.Proto, Direction: w.Direction, Streams: w.Streams, WireMTU: w.WireMTU, Placement: place})
			i = len(gs) - 1
		}
		gs[i].Workloads = append(gs[i].Workloads, w)
	}
	for i := range gs {
		slices.SortStableFunc(gs[i].Workloads, func(a, b throughput.Workload) int { return a.Len - b.Len })
	}
	return gs
}
