package inrun

import (
	"fmt"
	"strings"

	"github.com/tapfwd/tapfwd/bench/abrun"
	"github.com/tapfwd/tapfwd/bench/stats"
)

// checks fills r.Checks from the comparisons and e's runs.
func (r *Report) checks(e *experiment) {
	ch := &r.Checks
	for _, c := range r.Comparisons {
		switch {
		case c.A == PairAA && c.Observable == Throughput:
			ch.AACovers0 = c.Percent.Low <= 0 && c.Percent.High >= 0
		case c.A == PairControl && c.Observable == Throughput:
			ch.ControlDetected = c.Percent.High < 0
		case !c.Check && len(c.Guards) == len(stats.ABGuards):
			ch.GuardsOf++
			g := c.Guards
			if overlap(g[0], c.Percent) && overlap(g[len(g)-1], c.Percent) {
				ch.GuardsAgree++
			}
		}
	}
	var sw, same [2]float64 // retransmits, out-of-order
	var nsw, nsame float64
	var bg []float64
	var kA, kB float64
	for _, run := range e.runs {
		if run.Err != "" {
			continue
		}
		bg = append(bg, run.Background)
		if run.Flagged {
			ch.Flagged++
		}
		if run.Pair == PairThreaded {
			kA += run.ArmCPU[0][abrun.RoleKthread]
			kB += run.ArmCPU[1][abrun.RoleKthread]
		}
		if run.Cost {
			continue
		}
		for i := range run.Windows {
			if run.Switched[i] {
				sw[0], sw[1], nsw = sw[0]+float64(run.Retrans[i]), sw[1]+float64(run.OFO[i]), nsw+1
			} else if i > 0 {
				same[0], same[1], nsame = same[0]+float64(run.Retrans[i]), same[1]+float64(run.OFO[i]), nsame+1
			}
		}
	}
	ch.RetransSwitched, ch.OFOSwitched = per(sw[0], nsw), per(sw[1], nsw)
	ch.RetransSame, ch.OFOSame = per(same[0], nsame), per(same[1], nsame)
	if len(bg) > 0 {
		ch.BackgroundMedian = stats.Median(bg)
		for _, b := range bg {
			ch.BackgroundMax = max(ch.BackgroundMax, b)
		}
	}
	if kA+kB > 0 {
		ch.KthreadShareB = kB / (kA + kB)
	}
	ch.SetupsOK = len(r.Setups) > 0
	for _, s := range r.Setups {
		ch.SetupsOK = ch.SetupsOK && s.Kthreads == s.Want
	}
}

// overlap says whether two intervals share a point.
func overlap(a, b stats.Estimate) bool { return a.Low <= b.High && b.Low <= a.High }

func per(sum, n float64) float64 {
	if n == 0 {
		return 0
	}
	return sum / n
}

// answer is the report in one sentence: with one row, the pairs'
// verdicts on it; with several, the count of each verdict by pair.
func (r *Report) answer() string {
	var parts []string
	for _, p := range r.Pairs {
		if p.Check {
			continue
		}
		var tp, cost []Comparison
		for _, c := range r.Comparisons {
			if c.A != p.Name {
				continue
			}
			if c.Observable == Throughput {
				tp = append(tp, c)
			} else {
				cost = append(cost, c)
			}
		}
		if len(tp) == 0 {
			continue
		}
		parts = append(parts, pairAnswer(p.Name, tp, cost))
	}
	if len(parts) == 0 {
		return "no comparison ran"
	}
	return strings.Join(parts, "; ") + "."
}

// pairAnswer says what pair did: on one row its throughput and cost
// sentences, on several the verdicts counted.
func pairAnswer(pair string, tp, cost []Comparison) string {
	name := map[string]string{PairOn: "IFF_NAPI", PairThreaded: "IFF_NAPI with the TAP's NAPI threaded"}[pair]
	if len(tp) == 1 {
		s := fmt.Sprintf("%s against IFF_NAPI off, %s: tapfwd's throughput %s", name, rowWords(tp[0].Workload), tp[0].Sentence)
		if len(cost) == 1 {
			s += fmt.Sprintf(", its CPU per byte %s", cost[0].Sentence)
		}
		return s
	}
	count := map[string]int{}
	for _, c := range tp {
		count[c.Verdict]++
	}
	var v []string
	for _, w := range []string{stats.ABFaster, stats.ABSlower, stats.ABEquivalent, stats.ABNoDifference, stats.ABTooWide, stats.ABTooFew} {
		if count[w] > 0 {
			v = append(v, fmt.Sprintf("%s on %d", w, count[w]))
		}
	}
	return fmt.Sprintf("%s against IFF_NAPI off, throughput over %d rows: %s", name, len(tp), strings.Join(v, ", "))
}

// rowWords names a row for a sentence: "TCP 64 B writes, 1 stream,
// wire->lab".
func rowWords(row string) string {
	f := strings.Split(row, "-")
	if len(f) != 4 {
		return row
	}
	streams := strings.TrimPrefix(f[2], "P")
	unit := "streams"
	if streams == "1" {
		unit = "stream"
	}
	dir := map[string]string{"w2l": "wire->lab", "l2w": "lab->wire"}[f[3]]
	return fmt.Sprintf("%s %s writes, %s %s, %s", strings.ToUpper(f[0]), f[1], streams, unit, dir)
}
