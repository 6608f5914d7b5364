package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// A section is one titled table of the report; the text and Markdown
// renderings share them.
type section struct {
	title string
	head  []string
	rows  [][]string
	// notes, when there is no head, are written as a list instead of a
	// table.
	notes []string
}

// Num formats a figure with three significant digits, as the reference
// table does: 0.593, 1.00, 17.6, 308.
func Num(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v):
		return "-"
	case a == 0:
		return "0"
	case a < 1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case a < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func signed(v float64) string {
	if v > 0 || (v == 0 && !math.Signbit(v)) {
		return "+" + Num(v)
	}
	return Num(v)
}

// pct writes a change in percent: one decimal below 10%, none above.
func pct(v float64) string {
	if math.Abs(v) < 9.95 {
		return fmt.Sprintf("%+.1f%%", v)
	}
	return fmt.Sprintf("%+.0f%%", v)
}

// est formats "median [low, high]".
func est(e *Estimate) string {
	if e == nil {
		return "-"
	}
	return fmt.Sprintf("%s [%s, %s]", Num(e.Median), Num(e.Low), Num(e.High))
}

func ratio(e *Estimate) string {
	if e == nil {
		return "-"
	}
	return strconv.FormatFloat(e.Median, 'f', 2, 64)
}

func (r *Report) sections() []section {
	var out []section
	gs := r.groups()
	if r.ran(NAPIOn) && r.ran(NAPIOff) {
		for _, g := range gs {
			s := section{title: "IFF_NAPI off -> on: " + g.title(),
				head: []string{sizeHead(g), NAPIOff, NAPIOn, "on - off [95% CI]", "verdict", Bridge, NAPIOn + "/" + Bridge}}
			for _, w := range g.Workloads {
				off, on, br := r.Cell(NAPIOff, w.Name), r.Cell(NAPIOn, w.Name), r.Cell(Bridge, w.Name)
				row := []string{SizeName(w.Len), est(off.Value), est(on.Value), "-", "-", "-", ratio(on.RatioToBridge)}
				if c := r.Comparison(NAPIOn, NAPIOff, w.Name); c != nil {
					row[3] = fmt.Sprintf("%s [%s, %s] (%s)", signed(c.Diff.Median), signed(c.Diff.Low), signed(c.Diff.High), pct(c.Percent.Median))
					row[4] = c.Verdict
				}
				if br != nil {
					row[5] = est(br.Value)
				}
				s.rows = append(s.rows, row)
			}
			out = append(out, s)
		}
	}
	for _, g := range gs {
		s := section{title: "All configurations: " + g.title() + "; ratio to the bridge",
			head: []string{"config"}}
		for _, w := range g.Workloads {
			s.head = append(s.head, SizeName(w.Len), "/bridge")
		}
		if g.Proto == "udp" {
			s.head = append(s.head, "loss %", "dropped by the receiving socket %")
		}
		for _, c := range r.Configs {
			if c.Skipped != "" {
				continue
			}
			row := []string{c.Name}
			var loss, rcvbuf string
			for _, w := range g.Workloads {
				cell := r.Cell(c.Name, w.Name)
				row = append(row, est(cell.Value), ratio(cell.RatioToBridge))
				if cell.Value != nil {
					loss = strconv.FormatFloat(cell.LossPercent, 'f', 1, 64)
					rcvbuf = strconv.FormatFloat(cell.RcvbufPercent, 'f', 1, 64)
				}
			}
			if g.Proto == "udp" {
				row = append(row, loss, rcvbuf)
			}
			s.rows = append(s.rows, row)
		}
		out = append(out, s)
	}
	// What forwarding cost: the forwarder's CPU per gigabit delivered.
	cpu := section{title: "Forwarder CPU per gigabit delivered (CPU seconds / Gbit, median; from /proc/PID/stat)", head: []string{"config"}}
	var cpuW []Workload
	for _, w := range r.Workloads {
		if w.Proto == "udp" || w.Len >= 4096 {
			cpuW = append(cpuW, w)
			cpu.head = append(cpu.head, w.Name)
		}
	}
	for _, c := range r.Configs {
		if c.Skipped != "" || (c.Kind != KindTapfwd && c.Kind != KindNaive) {
			continue
		}
		row := []string{c.Name}
		for _, w := range cpuW {
			v := r.Cell(c.Name, w.Name).ForwarderCPUPerGbit
			row = append(row, strconv.FormatFloat(v, 'f', 3, 64))
		}
		cpu.rows = append(cpu.rows, row)
	}
	if len(cpu.rows) > 0 && len(cpuW) > 0 {
		out = append(out, cpu)
	}
	// The other TAP NAPI modes, each against IFF_NAPI off.
	var cmp []string
	for _, ab := range comparisons {
		if r.ran(ab[0]) && r.ran(ab[1]) {
			cmp = append(cmp, ab[0])
		}
	}
	if len(cmp) > 1 {
		s := section{title: "TAP NAPI modes against " + NAPIOff + ": change of the median [95% CI], verdict",
			head: append([]string{"workload"}, cmp...)}
		for _, w := range r.Workloads {
			row := []string{w.Name}
			for _, a := range cmp {
				c := r.Comparison(a, NAPIOff, w.Name)
				if c == nil {
					row = append(row, "-")
					continue
				}
				row = append(row, fmt.Sprintf("%s [%s, %s] %s", pct(c.Percent.Median), pct(c.Percent.Low), pct(c.Percent.High), c.Verdict))
			}
			s.rows = append(s.rows, row)
		}
		out = append(out, s)
	}
	s := section{title: "Configurations", head: []string{"config", "what"}}
	for _, c := range r.Configs {
		s.rows = append(s.rows, []string{c.Name, configWhat(c.Description, c.Skipped)})
	}
	out = append(out, s)
	var fails [][]string
	for _, c := range r.Cells {
		for _, f := range c.Failures {
			fails = append(fails, []string{c.Config, c.Workload, f})
		}
	}
	return append(out, failedRuns("workload", fails)...)
}

// configWhat is a configuration's "what" column: its description, and why
// it was skipped.
func configWhat(desc, skipped string) string {
	if skipped != "" {
		return desc + " -- SKIPPED: " + skipped
	}
	return desc
}

// failedRuns is the table of the runs left out of the figures (config,
// what ran, failure); none when no run failed.
func failedRuns(what string, rows [][]string) []section {
	if len(rows) == 0 {
		return nil
	}
	return []section{{title: "Failed runs (left out of the figures)", head: []string{"config", what, "failure"}, rows: rows}}
}

func sizeHead(g group) string {
	if g.Proto == "udp" {
		return "size"
	}
	return "-l"
}

// summary is the report's opening: where, when, how.
func (r *Report) summary() []string {
	h := r.Host
	ran := 0
	for _, c := range r.Configs {
		if c.Skipped == "" {
			ran++
		}
	}
	lines := []string{
		fmt.Sprintf("%s, kernel %s (%s), %d CPUs %s, %s, %s",
			r.Started.Format("2006-01-02 15:04 MST"), h.Kernel, h.Machine, h.CPUs, h.CPUModel, h.Go, h.Iperf3),
		fmt.Sprintf("%d configurations x %d workloads, %d repetitions interleaved (fresh test bed per configuration and repetition), %d s per iperf3 run, %s in all",
			ran, len(r.Workloads), r.Settings.Reps, r.Settings.RunSeconds, r.Finished.Sub(r.Started).Round(1e9)),
		fmt.Sprintf("Medians with %.0f%% percentile-bootstrap intervals (%d resamples, seed %d). A verdict needs the whole interval of the difference on one side of 0 and at least %d repetitions each.",
			r.Settings.Level*100, r.Settings.Resamples, r.Settings.Seed, MinVerdictReps),
	}
	if p := r.Settings.IperfPin; p != nil {
		lines = append(lines, fmt.Sprintf("iperf3 pinned: the wire side (client) to CPU %d, the lab side (server) to CPU %d.", p.Wire, p.Lab))
	}
	if r.Settings.Quick {
		lines = append(lines, "QUICK RUN: a smoke test of the bench, not a measurement.")
	}
	return lines
}

// WriteText writes the report as aligned plain-text tables.
func (r *Report) WriteText(w io.Writer) error {
	return writeText(w, "tapfwd bench throughput", r.summary(), r.sections())
}

// writeText writes a title, summary lines and sections as aligned
// plain-text tables.
func writeText(w io.Writer, title string, summary []string, sections []section) error {
	bw := &errWriter{w: w}
	fmt.Fprintln(bw, title)
	for _, l := range summary {
		fmt.Fprintln(bw, l)
	}
	for _, s := range sections {
		fmt.Fprintf(bw, "\n%s\n", s.title)
		if len(s.head) == 0 {
			for _, n := range s.notes {
				fmt.Fprintf(bw, "- %s\n", n)
			}
			continue
		}
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(s.head, "\t"))
		for _, row := range s.rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}
	return bw.err
}

// WriteMarkdown writes the report as Markdown (GitHub tables).
func (r *Report) WriteMarkdown(w io.Writer) error {
	return writeMarkdown(w, "tapfwd bench throughput", r.summary(), r.sections())
}

// writeMarkdown writes a title, summary lines and sections as Markdown
// (GitHub tables).
func writeMarkdown(w io.Writer, title string, summary []string, sections []section) error {
	bw := &errWriter{w: w}
	fmt.Fprintln(bw, "## "+title)
	fmt.Fprintln(bw)
	for _, l := range summary {
		fmt.Fprintf(bw, "%s  \n", l)
	}
	for _, s := range sections {
		fmt.Fprintf(bw, "\n### %s\n\n", s.title)
		if len(s.head) == 0 {
			for _, n := range s.notes {
				fmt.Fprintf(bw, "- %s\n", n)
			}
			continue
		}
		fmt.Fprintf(bw, "| %s |\n", strings.Join(s.head, " | "))
		fmt.Fprintf(bw, "|%s\n", strings.Repeat("---|", len(s.head)))
		for _, row := range s.rows {
			for i := range row {
				row[i] = strings.ReplaceAll(row[i], "|", `\|`)
			}
			fmt.Fprintf(bw, "| %s |\n", strings.Join(row, " | "))
		}
	}
	return bw.err
}

// CSVHeader is the first line of WriteCSV.
var CSVHeader = []string{"config", "kind", "workload", "proto", "len", "streams", "direction", "unit",
	"reps", "median", "ci_low", "ci_high", "ratio_to_bridge", "ratio_ci_low", "ratio_ci_high",
	"napi_on_vs_off_diff", "napi_on_vs_off_verdict",
	"retransmits_median", "sender_cpu_median", "receiver_cpu_median", "loss_percent_median", "rcvbuf_drop_percent_median", "samples", "failures"}

// WriteCSV writes one line per cell; the napi columns are filled on the
// napi-on rows.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader)
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, c := range r.Cells {
		cfg, wl := r.Config(c.Config), r.workload(c.Workload)
		rec := []string{c.Config, cfg.Kind, c.Workload, wl.Proto, strconv.Itoa(wl.Len), strconv.Itoa(wl.Streams), wl.Direction, c.Unit,
			strconv.Itoa(c.Reps), "", "", "", "", "", "", "", "",
			f(c.Retransmits), f(c.SenderCPU), f(c.ReceiverCPU), f(c.LossPercent), f(c.RcvbufPercent), "", strings.Join(c.Failures, "; ")}
		if c.Value != nil {
			rec[9], rec[10], rec[11] = f(c.Value.Median), f(c.Value.Low), f(c.Value.High)
		}
		if c.RatioToBridge != nil {
			rec[12], rec[13], rec[14] = f(c.RatioToBridge.Median), f(c.RatioToBridge.Low), f(c.RatioToBridge.High)
		}
		if cmp := r.Comparison(NAPIOn, NAPIOff, c.Workload); cmp != nil && c.Config == NAPIOn {
			rec[15], rec[16] = f(cmp.Diff.Median), cmp.Verdict
		}
		s := make([]string, len(c.Samples))
		for i, v := range c.Samples {
			s[i] = f(v)
		}
		rec[22] = strings.Join(s, " ")
		cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

func (r *Report) workload(name string) Workload {
	for _, w := range r.Workloads {
		if w.Name == name {
			return w
		}
	}
	return Workload{Name: name}
}

// errWriter keeps the first write error so the formatters can check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
