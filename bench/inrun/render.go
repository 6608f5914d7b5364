package inrun

import (
	"fmt"
	"strings"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
)

// Document lays r out: the answer, the verdicts (throughput, cost), the
// checks, the pairs and how it ran.
func (r *Report) Document() report.Document {
	got, of := r.Verdicts()
	d := report.Document{Title: "tapfwd-bench: IFF_NAPI on and off inside one run"}
	d.Summary = []string{
		r.HostLine(),
		"Answer: " + r.Answer,
		fmt.Sprintf("%d of %d throughput comparisons got a verdict (faster, slower, or equivalent within ±%g%%); %s in %s, stopped by %s.",
			got, of, r.Settings.Rule.Equivalence, runsLine(r), r.Finished.Sub(r.Started).Round(1e9), r.Settings.StoppedBy),
	}
	d.Sections = append(d.Sections, r.table(Throughput), r.table(Cost), r.checkSection(), r.guardSection(), r.pairSection(), r.method())
	return d
}

func runsLine(r *Report) string {
	n := 0
	for _, run := range r.Runs {
		if run.Err == "" {
			n++
		}
	}
	return fmt.Sprintf("%d runs of %d windows", n, r.Settings.Windows)
}

// table is the verdicts of one observable; the checks last.
func (r *Report) table(obs string) report.Section {
	s := report.Section{Title: "Throughput: B against A (IFF_NAPI off), Gbit/s delivered into the TAP",
		Head: []string{"row", "pair", "A: napi-off", "B = A x effect", "effect [95%]", "±", "runs", "verdict"}}
	if obs == Cost {
		s.Title = "Cost at a fixed offered rate: CPU of the run's own threads per Gbit delivered (s/Gbit)"
	}
	for _, c := range r.Comparisons {
		if c.Observable != obs {
			continue
		}
		pair := c.A
		if c.Check {
			pair += " (check)"
		}
		s.Rows = append(s.Rows, []string{c.Workload, pair, fmt.Sprintf("%.3g", c.BaselineFigure), fmt.Sprintf("%.3g", c.ChangedFigure),
			pct(c.Percent), fmt.Sprintf("%.1f%%", c.HalfWidth), fmt.Sprintf("%d/%d", c.Runs, max(c.Needed, c.Runs)), c.Sentence})
	}
	if len(s.Rows) == 0 {
		return report.Section{Title: s.Title, Notes: []string{"not measured (cost runs are off)"}}
	}
	s.Notes = []string{"A's figure is the geometric mean over the runs of arm A's rate; B's is A's times the effect, so the columns cannot disagree with the effect.",
		"runs: used / needed by Stein's rule from the first stage; a comparison whose first stage asks for more than the budget allowed stays wide."}
	return s
}

func pct(e stats.Estimate) string {
	return fmt.Sprintf("%+.1f%% [%+.1f, %+.1f]", e.Median, e.Low, e.High)
}

// checkSection lists the checks every report carries.
func (r *Report) checkSection() report.Section {
	ch := r.Checks
	yes := map[bool]string{true: "yes", false: "NO"}
	s := report.Section{Title: "Checks", Head: []string{"check", "result", "holds"}}
	for _, c := range r.Comparisons {
		if c.Check && c.Observable == Throughput {
			s.Rows = append(s.Rows, []string{c.A + " on " + c.Workload, c.Sentence, yes[map[string]bool{PairAA: ch.AACovers0, PairControl: ch.ControlDetected}[c.A]]})
		}
	}
	s.Rows = append(s.Rows,
		[]string{"guards 0 and 40 ms: intervals meeting the 20 ms one", fmt.Sprintf("%d of %d comparisons", ch.GuardsAgree, ch.GuardsOf), yes[ch.GuardsAgree == ch.GuardsOf]},
		[]string{"retransmits per window, after a switch / otherwise", fmt.Sprintf("%.2f / %.2f", ch.RetransSwitched, ch.RetransSame), ""},
		[]string{"out-of-order queueings per window, after a switch / otherwise", fmt.Sprintf("%.2f / %.2f", ch.OFOSwitched, ch.OFOSame), ""},
		[]string{"background load (machine busy less the run's threads)", fmt.Sprintf("median %.2f, max %.2f CPUs; %d runs over %.2f flagged in their records", ch.BackgroundMedian, ch.BackgroundMax, ch.Flagged, r.Settings.Background), ""},
		[]string{"NAPI kthreads of every visit's TAP as its queues should give", setupsLine(r.Setups), yes[ch.SetupsOK]},
	)
	if ch.KthreadShareB > 0 {
		s.Rows = append(s.Rows, []string{"threaded pair: share of the NAPI kthread's CPU in arm B's windows", fmt.Sprintf("%.1f%%", 100*ch.KthreadShareB), yes[ch.KthreadShareB > 0.9]})
	}
	return s
}

func setupsLine(ss []Setup) string {
	by := map[string][2]int{}
	for _, s := range ss {
		v := by[s.Instance]
		v[0]++
		if s.Kthreads == s.Want {
			v[1]++
		}
		by[s.Instance] = v
	}
	var out []string
	for _, inst := range []string{instNAPI, instThreaded, instPlain} {
		if v, ok := by[inst]; ok {
			out = append(out, fmt.Sprintf("%s: %d of %d visits with %d", inst, v[1], v[0], wantKthreads(inst)))
		}
	}
	return strings.Join(out, "; ")
}

// guardSection is every comparison's estimate under each guard.
func (r *Report) guardSection() report.Section {
	s := report.Section{Title: "Guards: the estimate leaving out the first 0, 20 and 40 ms of every window", Head: []string{"row", "pair", "observable"}}
	for _, g := range r.Settings.GuardsMillis {
		s.Head = append(s.Head, fmt.Sprintf("%d ms", g))
	}
	for _, c := range r.Comparisons {
		row := []string{c.Workload, c.A, c.Observable}
		for _, g := range c.Guards {
			row = append(row, pct(g))
		}
		s.Rows = append(s.Rows, row)
	}
	return s
}

func (r *Report) pairSection() report.Section {
	s := report.Section{Title: "Pairs", Head: []string{"pair", "what", "tapfwd run flags"}}
	for _, p := range r.Pairs {
		s.Rows = append(s.Rows, []string{p.Name, p.What, strings.Join(p.Args, " ")})
	}
	for _, w := range r.Workloads {
		if w.Placement != nil && w.Placement.Iperf != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: iperf3 client on CPU %d, server on CPU %d; tapfwd's worker on the first CPU", w.Name, w.Placement.Iperf.Wire, w.Placement.Iperf.Lab))
		}
	}
	return s
}

// method says how the figures were made.
func (r *Report) method() report.Section {
	st := r.Settings
	notes := []string{
		fmt.Sprintf("One TAP, two queues, one tapfwd worker: arm A writes wire->lab frames into one queue (no IFF_NAPI), arm B into the other (queue 1 in odd repetitions, queue 0 in even ones, so that a difference between the queues themselves falls on both arms); the bench switches arms every %d ms in seeded random ABBA/BAAB blocks, %d windows a run after %.1f s left out.", st.WindowMillis, st.Windows, st.OmitSeconds),
		"Counted at the forwarder for each window and bin: the bytes and frames tapfwd wrote into the TAP (its receive counters), and the CPU time (schedstat) of tapfwd's threads, the TAP's NAPI kthread, ksoftirqd and both iperf3 processes.",
		fmt.Sprintf("A run's estimate is log(B's summed rate / A's) over its windows less their first %d ms; the interval is Student's t over runs, its width fixed by the first %d runs (Stein's two-stage rule), each comparison taking the runs it needs for ±%g%% within the budget. The jackknife inside runs is a diagnostic only.", st.HeadlineGuard, st.Rule.Stage1, st.Rule.TargetHalfWidth),
		fmt.Sprintf("Verdicts: faster or slower when the interval excludes 0; equivalent when the whole interval lies within ±%g%%; otherwise no difference shown, saying whether the QEMU patch's +%g%% is ruled out; too wide above ±%g%%. Across comparisons: %s. Expected false verdicts among the %s: %.2f.", st.Rule.Equivalence, st.Rule.Reference, st.Rule.MaxHalfWidth, st.Multiple, "throughput comparisons", st.ExpectedFalse),
	}
	if st.Cost {
		notes = append(notes, fmt.Sprintf("Cost runs offer %.0f%% of the row's saturation (the median rate of arm A so far) with iperf3 -b, so both arms deliver the same rate and their CPU per byte is compared the same way.", 100*st.CostShare))
	}
	return report.Section{Title: "Method", Notes: notes}
}
