package latency

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
)

// Title heads the text and Markdown renderings.
const Title = "tapfwd-bench latency"

// Document lays the report out for reading.
func (r *Report) Document() report.Document {
	return report.Document{Title: Title, Summary: r.summary(), Sections: r.sections()}
}

func (r *Report) summary() []string {
	ran := len(r.ranConfigs())
	s := r.Settings
	pl := report.Plural
	lines := []string{
		r.HostLine(),
		fmt.Sprintf("%d configuration%s x %d rate/delay point%s, %d repetition%s interleaved (fresh test bed per configuration and repetition), "+
			"%s s per run after %s s of warm-up, %d-byte UDP requests, %s in all",
			ran, pl(ran, "", "s"), len(r.Points), pl(len(r.Points), "", "s"), s.Reps, pl(s.Reps, "", "s"), report.Num(s.RunSeconds), report.Num(s.WarmupSeconds),
			s.PayloadBytes, r.Finished.Sub(r.Started).Round(time.Second)),
		fmt.Sprintf("Round-trip times in microseconds: each run's percentiles, then their median over the repetitions with a %.0f%% "+
			"percentile-bootstrap interval (%d resamples, seed %d). %s", s.Level*100, s.Resamples, s.Seed, s.VerdictRule()),
	}
	if s.CalibratedOn != "" {
		lines = append(lines, fmt.Sprintf("Rates checked on %s before the matrix (%v probes: a rate holds with at least %.0f%% of it sent, "+
			"at most %s%% lost, a median round trip at most %d times the unloaded one (%s us at %s/s), and the sender thread "+
			"using at most %.0f%% of a CPU); a point whose rate does not hold runs at %.0f%% of the highest rate that did.",
			s.CalibratedOn, probeLength, 100*sustainRate, strconv.FormatFloat(sustainLoss, 'g', -1, 64), sustainP50x, us(s.UnloadedP50), RateName(baselineRate),
			100*sustainSenderCPU, 100*capHeadroom))
	}
	return append(lines, s.QuickLine()...)
}

// us writes ns as microseconds, three significant digits.
func us(ns float64) string { return report.Num(ns / 1e3) }

// pointLabel writes a point the way the reference's table does,
// "12 Kpkt/s + 30 us", with the rate run when it was capped.
func pointLabel(p Point) string {
	l := fmt.Sprintf("%s + %s us", ratePhrase(p.AskedRate), strconv.FormatFloat(float64(p.Delay)/1e3, 'f', -1, 64))
	if p.Rate != p.AskedRate {
		l += fmt.Sprintf(" (ran at %s)", ratePhrase(p.Rate))
	}
	return l
}

// kRate writes a measured rate in thousands, three digits: 11.9K.
func kRate(v float64) string { return report.Num(v/1e3) + "K" }

func ratePhrase(r int) string {
	if r >= 1000 {
		return strings.TrimSuffix(RateName(r), "K") + " Kpkt/s"
	}
	return RateName(r) + " pkt/s"
}

func (r *Report) ranConfigs() []report.Config { return report.RanConfigs(r.Configs) }

func (r *Report) sections() []report.Section {
	var out []report.Section
	if len(r.Notes) > 0 {
		out = append(out, report.Section{Title: "Notes", Notes: r.Notes})
	}
	out = append(out, r.mainSection())
	for _, p := range r.Points {
		out = append(out, r.pointSection(p))
	}
	if len(r.Comparisons) > 0 {
		out = append(out, r.comparisonSection())
	}
	out = append(out, report.ConfigTable(r.Configs, true))
	return append(out, report.FailedCells("point", r.Cells, func(c Cell) (string, string, []string) {
		return c.Config, c.Point, c.Failures
	})...)
}

// mainSection is the reference's layout: a row per rate and delay, a
// column per configuration.
func (r *Report) mainSection() report.Section {
	ran := r.ranConfigs()
	s := report.Section{Title: fmt.Sprintf("Round-trip time p50 / p99, us (medians of %d repetition%s)", r.Settings.Reps, report.Plural(r.Settings.Reps, "", "s")),
		Head: []string{"rate + delay"}}
	for _, c := range ran {
		s.Head = append(s.Head, c.Name)
	}
	for _, p := range r.Points {
		row := []string{pointLabel(p)}
		for _, c := range ran {
			row = append(row, p50p99(r.Cell(c.Name, p.Name), p.Rate))
		}
		s.Rows = append(s.Rows, row)
	}
	return s
}

// pointSection is every percentile of every configuration at p.
func (r *Report) pointSection(p Point) report.Section {
	s := report.Section{Title: pointLabel(p) + ": round-trip time, us, median [95% CI] of the repetitions; requests/s sent; loss; send lag p99, us",
		Head: []string{"config", "min", "p5", "p50", "p95", "p99", "p99.9", "max", "rate", "loss %", "send lag"}}
	for _, c := range r.ranConfigs() {
		cell := r.Cell(c.Name, p.Name)
		if cell == nil || cell.RTT == nil {
			s.Rows = append(s.Rows, []string{c.Name, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"})
			continue
		}
		e := cell.RTT
		s.Rows = append(s.Rows, []string{c.Name, us(e.Min.Median), us(e.P5.Median), usEst(e.P50), us(e.P95.Median),
			usEst(e.P99), us(e.P999.Median), us(e.Max.Median), kRate(cell.Rate.Median),
			lossStr(cell.LossPercent.Median), us(cell.SendLagP99)})
	}
	return s
}

// comparisonSection is each pair's change at each point, with verdicts.
func (r *Report) comparisonSection() report.Section {
	s := report.Section{Title: "A against B: change of the median p50 and p99, us [95% CI], and the verdict on A's latency",
		Head: []string{"point", "A vs B", "p50 change", "p50", "p99 change", "p99"}}
	for _, p := range r.Points {
		for _, ab := range comparisons {
			row := []string{p.Name, ab[0] + " vs " + ab[1]}
			found := false
			for _, st := range comparedStats {
				c := r.Comparison(ab[0], ab[1], p.Name, st)
				if c == nil {
					row = append(row, "-", "-")
					continue
				}
				found = true
				row = append(row, report.DiffEst(c.Difference, 1e3), c.Verdict)
			}
			if found {
				s.Rows = append(s.Rows, row)
			}
		}
	}
	return s
}

// p50p99 is a cell of the main table: "47.1 / 78.2", with the loss when
// more than 1% of the requests got no reply and the rate sent when it fell
// short of the point's by more than 5%.
func p50p99(c *Cell, rate int) string {
	if c == nil || c.RTT == nil {
		return "-"
	}
	s := us(c.RTT.P50.Median) + " / " + us(c.RTT.P99.Median)
	var marks []string
	if c.LossPercent != nil && c.LossPercent.Median > 1 {
		marks = append(marks, lossStr(c.LossPercent.Median)+"% lost")
	}
	if c.Rate != nil && c.Rate.Median < sustainRate*float64(rate) {
		marks = append(marks, "sent "+kRate(c.Rate.Median)+"/s")
	}
	if len(marks) > 0 {
		s += " (" + strings.Join(marks, ", ") + ")"
	}
	return s
}

func usEst(e stats.Estimate) string {
	return fmt.Sprintf("%s [%s, %s]", us(e.Median), us(e.Low), us(e.High))
}

func lossStr(v float64) string {
	if v != 0 && math.Abs(v) < 0.1 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
