package compare

import (
	"fmt"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
)

// Schema names the JSON layout of Result.
const Schema = "tapfwd-bench-compare/1"

// Figures a compared row can be.
const (
	Throughput = "throughput" // the cell's value: Gbit/s or kpps
	Cost       = "cost"       // the whole machine's CPU per unit delivered
	// BridgeRatio is the cell's throughput over the bridge's, repetition
	// by repetition (throughput.Report.BridgeRatios): what a change of
	// the machine between two runs moves least.
	BridgeRatio = "bridge-ratio"
)

// CostWords name the verdicts on a cost: more is worse.
var CostWords = stats.Words{Above: "costs more", Below: "costs less"}

// Result is run B against run A, two saved reports: for every cell
// both have, the ratio of B's median to A's with its interval and a
// verdict. Its JSON form is compare --json.
type Result struct {
	Schema string `json:"schema"`
	A      Run    `json:"a"`
	B      Run    `json:"b"`
	// The bootstrap, and the verdict rule: MinReps, and the widest
	// interval, in percent of A's median, that gets a verdict.
	report.Intervals
	MinReps         int     `json:"verdict_min_reps"`
	TargetHalfWidth float64 `json:"verdict_target_half_width_percent"`
	Rows            []Row   `json:"rows"`
	// OnlyA and OnlyB are the cells ("config/workload") one run has and
	// the other lacks.
	OnlyA []string `json:"only_in_a,omitempty"`
	OnlyB []string `json:"only_in_b,omitempty"`
}

// Run says what a compared run was.
type Run struct {
	Path        string      `json:"path"`
	Schema      string      `json:"schema"`
	Started     time.Time   `json:"started"`
	Host        report.Host `json:"host"`
	Reps        int         `json:"reps"`
	RunSeconds  int         `json:"run_seconds"`
	OmitSeconds int         `json:"omit_seconds"`
	Quick       bool        `json:"quick,omitempty"`
}

// Row is one figure of one cell in both runs.
type Row struct {
	Config   string `json:"config"`
	Workload string `json:"workload"`
	Figure   string `json:"figure"` // Throughput or Cost
	Unit     string `json:"unit"`
	// A and B are each run's median with its interval, as its report
	// gives it.
	A     stats.Estimate `json:"a"`
	B     stats.Estimate `json:"b"`
	RepsA int            `json:"reps_a"`
	RepsB int            `json:"reps_b"`
	// Difference is B against A: the difference and the ratio of the
	// medians, each with its interval (the two runs' repetitions
	// resampled independently), and the verdict.
	stats.Difference
}

// Reports compares report b against report a, read from pathA and pathB,
// cell by cell: throughput figures, and costs where both have them.
func Reports(a, b *throughput.Report, pathA, pathB string, bs stats.Bootstrap, rule stats.Rule) *Result {
	c := &Result{Schema: Schema, A: info(a, pathA), B: info(b, pathB),
		Intervals: report.NewIntervals(bs), MinReps: rule.MinReps, TargetHalfWidth: rule.MaxHalfWidth}
	for _, ca := range a.Cells {
		cb := b.Cell(ca.Config, ca.Workload)
		if cb == nil {
			c.OnlyA = append(c.OnlyA, ca.Config+"/"+ca.Workload)
			continue
		}
		key := ca.Config + "/" + ca.Workload
		if ca.Value != nil && cb.Value != nil {
			if d, ok := bs.CompareRule("compare/"+key, cb.Samples, ca.Samples, rule, stats.Speed); ok {
				c.Rows = append(c.Rows, Row{Config: ca.Config, Workload: ca.Workload, Figure: Throughput, Unit: ca.Unit,
					A: *ca.Value, B: *cb.Value, RepsA: len(ca.Samples), RepsB: len(cb.Samples), Difference: d})
			}
		}
		if ra, rb := a.BridgeRatios(ca.Config, ca.Workload), b.BridgeRatios(ca.Config, ca.Workload); ca.Config != throughput.Bridge && len(ra) > 0 && len(rb) > 0 {
			if d, ok := bs.CompareRule("compare-bridge/"+key, rb, ra, rule, stats.Speed); ok {
				c.Rows = append(c.Rows, Row{Config: ca.Config, Workload: ca.Workload, Figure: BridgeRatio, Unit: "x bridge",
					A: median(bs, "a/"+key, ra), B: median(bs, "b/"+key, rb), RepsA: len(ra), RepsB: len(rb), Difference: d})
			}
		}
		if ka, kb := ca.Cost, cb.Cost; ka != nil && kb != nil && ka.Unit == kb.Unit {
			if d, ok := bs.CompareRule("compare-cost/"+key, kb.Samples, ka.Samples, rule, CostWords); ok {
				c.Rows = append(c.Rows, Row{Config: ca.Config, Workload: ca.Workload, Figure: Cost, Unit: ka.Unit,
					A: ka.Machine, B: kb.Machine, RepsA: len(ka.Samples), RepsB: len(kb.Samples), Difference: d})
			}
		}
	}
	for _, cb := range b.Cells {
		if a.Cell(cb.Config, cb.Workload) == nil {
			c.OnlyB = append(c.OnlyB, cb.Config+"/"+cb.Workload)
		}
	}
	return c
}

// median is x's median with its bootstrap interval.
func median(bs stats.Bootstrap, key string, x []float64) stats.Estimate {
	lo, hi := bs.MedianCI("compare-median/"+key, x)
	return stats.Estimate{Median: stats.Median(x), Low: lo, High: hi}
}

// Moved are the rows whose interval lies wholly on one side of no
// change, with a verdict (faster, slower, costs more, costs less): the
// rows that moved beyond their intervals.
func (c *Result) Moved() []Row {
	var out []Row
	for _, r := range c.Rows {
		switch r.Verdict {
		case stats.NoDifference, stats.TooWide, stats.TooFewSamples:
		default:
			out = append(out, r)
		}
	}
	return out
}

func info(r *throughput.Report, path string) Run {
	return Run{Path: path, Schema: r.Schema, Started: r.Started, Host: r.Host, Reps: r.Settings.Reps,
		RunSeconds: r.Settings.RunSeconds, OmitSeconds: r.Settings.OmitSeconds, Quick: r.Settings.Quick}
}

// Document lays the comparison out for reading.
func (c *Result) Document() report.Document {
	d := report.Document{Title: "tapfwd-bench compare: B against A"}
	for _, x := range []struct {
		name string
		r    Run
	}{{"A", c.A}, {"B", c.B}} {
		h := report.Header{Started: x.r.Started, Host: x.r.Host}
		line := fmt.Sprintf("%s: %s (%s): %s; %d repetitions of %d s runs", x.name, x.r.Path, x.r.Schema, h.HostLine(), x.r.Reps, x.r.RunSeconds)
		if x.r.OmitSeconds > 0 {
			line += fmt.Sprintf(" after %d s left out", x.r.OmitSeconds)
		}
		if x.r.Quick {
			line += " (QUICK RUN: a smoke test, not a measurement)"
		}
		d.Summary = append(d.Summary, line)
	}
	width := ""
	if c.TargetHalfWidth > 0 {
		width = fmt.Sprintf(", an interval no wider than +-%s of A's median", report.PctAbs(c.TargetHalfWidth))
	}
	d.Summary = append(d.Summary, fmt.Sprintf("Ratio of B's median to A's with its %.0f%% percentile-bootstrap interval (the repetitions of each run resampled independently; %d resamples, seed %d). "+
		"A verdict needs at least %d repetitions each%s and the whole interval on one side of 1.",
		c.Level*100, c.Resamples, c.Seed, c.MinReps, width))
	d.Sections = append(d.Sections, c.movedSection())
	for _, fig := range []struct{ name, title string }{
		{Throughput, "Throughput (Gbit/s for TCP, kpps delivered for UDP)"},
		{BridgeRatio, "Ratio to the bridge (each repetition's figure over the bridge's in the same repetition; median)"},
		{Cost, "Cost: CPU seconds of the whole machine per unit delivered"},
	} {
		s := report.Section{Title: fig.title + ": B against A",
			Head: []string{"config", "workload", "unit", "A", "B", "B/A [95% CI]", "+-", "verdict"}}
		for _, r := range c.Rows {
			if r.Figure != fig.name {
				continue
			}
			s.Rows = append(s.Rows, []string{r.Config, r.Workload, r.Unit, report.Est(&r.A), report.Est(&r.B),
				fmt.Sprintf("%.3f [%.3f, %.3f]", r.Ratio.Median, r.Ratio.Low, r.Ratio.High), report.PctAbs(r.HalfWidth), c.verdictText(r)})
		}
		if len(s.Rows) > 0 {
			d.Sections = append(d.Sections, s)
		}
	}
	for _, only := range []struct {
		title string
		cells []string
	}{{"Only in A", c.OnlyA}, {"Only in B", c.OnlyB}} {
		if len(only.cells) > 0 {
			d.Sections = append(d.Sections, report.Section{Title: only.title, Notes: []string{strings.Join(only.cells, ", ")}})
		}
	}
	return d
}

// movedSection lists the rows that moved beyond their intervals, or says
// that none did.
func (c *Result) movedSection() report.Section {
	moved := c.Moved()
	s := report.Section{Title: fmt.Sprintf("Moved beyond their intervals: %d of %d rows", len(moved), len(c.Rows)),
		Head: []string{"config", "workload", "figure", "B/A [95% CI]", "verdict"}}
	for _, r := range moved {
		s.Rows = append(s.Rows, []string{r.Config, r.Workload, r.Figure, fmt.Sprintf("%.3f [%.3f, %.3f]", r.Ratio.Median, r.Ratio.Low, r.Ratio.High), r.Verdict})
	}
	wide, few := 0, 0
	for _, r := range c.Rows {
		switch r.Verdict {
		case stats.TooWide:
			wide++
		case stats.TooFewSamples:
			few++
		}
	}
	if len(moved) == 0 {
		s.Head = nil
		s.Notes = append(s.Notes, "No row moved: every interval contains no change, or cannot tell.")
	}
	if wide > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%d rows have an interval too wide to tell whether they moved.", wide))
	}
	if few > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%d rows have too few repetitions to tell whether they moved.", few))
	}
	return s
}

func (c *Result) verdictText(r Row) string {
	if r.Verdict == stats.TooWide {
		return fmt.Sprintf("interval +-%s: too wide for a verdict at the +-%s target", report.PctAbs(r.HalfWidth), report.PctAbs(c.TargetHalfWidth))
	}
	return r.Verdict
}
