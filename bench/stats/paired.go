package stats

import "math"

// Stage1Reps is the first stage of a sequential run: the repetitions
// whose pairs' spread fixes, for every comparison, the width its
// interval will have and so how many pairs it needs (PairsNeeded).
// Fewer would leave the spread to so few degrees of freedom that the t
// quantile (2.57 at 5) and the chance of a badly low or high estimate
// cost more repetitions than they save.
const Stage1Reps = 6

// Paired compares x against y measured in pairs: x[i] and y[i] come from
// repetition i+1 of an interleaved run, so what moves the machine from
// one repetition to the next moves both, and cancels in their ratio. The
// change is the geometric mean of the per-repetition ratios x[i]/y[i]
// (the mean of their logarithms d), with Stein's two-stage interval. The
// first stage1 repetitions are the first stage: the standard deviation
// s1 of their k log-ratios fixes how many pairs n the comparison needs
// for an interval within r's target (PairsNeeded), and the interval is
// then taken over the first n pairs (all there are, when fewer):
//
//	mean(d[:n]) +- t(k-1) * s1 / sqrt(n)
//
// with t(k-1) the 97.5% quantile of Student's t with k-1 degrees of
// freedom. With normal log-ratios its coverage is exactly 95% for any n
// fixed from s1 alone (Stein 1945): what lets a sequential run decide
// after its first stage how far to go, without the inflation that
// stopping when an interval happens to look narrow brings. Pairs past n,
// made for another comparison that needed more, are left out: with
// heavy-tailed noise a first stage's spread understates what the mean of
// many more pairs strays by, and an interval over them all held its
// level less well. With stage1 >= len(x) and no more pairs than r needs,
// it is Student's t interval of all pairs.
//
// The interval is given as a ratio, as Percent (100 * (ratio - 1)) and
// as Diff, the change in the unit of the figures at B's median; its
// HalfWidth is 100 * (exp(t*s1/sqrt(n)) - 1), the factor by which each
// end lies from the estimate. Pairs where either figure is not positive
// (a failed run, NaN) are left out. False when x and y differ in length
// or fewer than 2 pairs are in the first stage.
func Paired(x, y []float64, stage1 int, r Rule, w Words) (Difference, bool) {
	d, ys, k, ok := logRatios(x, y, stage1)
	if !ok {
		return Difference{}, false
	}
	st := stein(d, k, r.MinReps, r.MaxHalfWidth)
	n, m, h := st.N, st.Mean, st.Half
	ratio := Estimate{math.Exp(m), math.Exp(m - h), math.Exp(m + h)}
	my := Median(ys[:n])
	out := Difference{
		Ratio:     ratio,
		Percent:   Estimate{100 * (ratio.Median - 1), 100 * (ratio.Low - 1), 100 * (ratio.High - 1)},
		Diff:      Estimate{my * (ratio.Median - 1), my * (ratio.Low - 1), my * (ratio.High - 1)},
		HalfWidth: 100 * math.Expm1(h),
		Pairs:     n,
		Stage1:    k,
		Needed:    st.Need,
	}
	out.Verdict = r.Verdict(out, n, n, w)
	return out, true
}

// PairsNeeded is how many pairs Paired needs for an interval within
// r.MaxHalfWidth, from the spread of the pairs of the first stage1
// repetitions alone: (t(k-1) * s1 / log(1 + MaxHalfWidth/100))^2 rounded
// up, and at least r.MinReps and the k pairs there are. -1 (no number
// is enough that the first stage can tell) with fewer than 2 pairs in
// the first stage; r.MinReps without a target.
func PairsNeeded(x, y []float64, stage1 int, r Rule) int {
	d, _, k, ok := logRatios(x, y, stage1)
	if !ok {
		return -1
	}
	return stein(d, k, r.MinReps, r.MaxHalfWidth).Need
}

// logRatios are log(x[i]/y[i]) of the pairs with both figures positive,
// in repetition order, the y of each, and k, how many come from the
// first stage1 repetitions; ok when x and y have the same length and k
// is at least 2.
func logRatios(x, y []float64, stage1 int) (d, ys []float64, k int, ok bool) {
	if len(x) != len(y) {
		return nil, nil, 0, false
	}
	for i := range x {
		if x[i] > 0 && y[i] > 0 && !math.IsInf(x[i], 0) && !math.IsInf(y[i], 0) {
			d, ys = append(d, math.Log(x[i]/y[i])), append(ys, y[i])
			if i < stage1 {
				k++
			}
		}
	}
	return d, ys, k, k >= 2
}

// meanSD is the mean and the sample standard deviation (n-1) of x, which
// has at least 2 values.
func meanSD(x []float64) (mean, sd float64) {
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(len(x)-1))
}
