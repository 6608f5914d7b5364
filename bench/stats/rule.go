package stats

import "math"

// A Rule says when a comparison of two configurations gets a verdict,
// beyond its interval lying on one side of 0: enough repetitions, and an
// interval narrow enough to answer the question asked.
type Rule struct {
	// MinReps is the fewest repetitions per side (pairs, for Paired)
	// that get a verdict; fewer is TooFewSamples.
	MinReps int
	// MaxHalfWidth is the widest interval, as its half-width in percent
	// of B's median, that gets a verdict; wider is TooWide. 0 sets no
	// limit.
	MaxHalfWidth float64
}

// MinReps is the throughput bench's fewest repetitions per side for a
// verdict. With 3 against 3 an interval of the difference of medians can
// exclude 0 only when every run of one side beats every run of the other,
// a one-sided 5% test, not the two-sided 95% one a verdict claims.
const MinReps = 4

// TargetHalfWidth is the throughput bench's widest interval for a
// verdict: +-7.5% of B's median, half the smallest gain (+15%) a verdict
// must be able to tell from none.
const TargetHalfWidth = 7.5

// DefaultRule is the throughput bench's rule.
var DefaultRule = Rule{MinReps: MinReps, MaxHalfWidth: TargetHalfWidth}

// TooWide is the verdict on an interval wider than the rule's target.
const TooWide = "too wide for a verdict"

// Verdict reads d, a comparison of na against nb repetitions, under r:
// TooFewSamples below r.MinReps on either side (or without an interval),
// TooWide when d.HalfWidth exceeds r.MaxHalfWidth, else w.Above or w.Below
// when d's interval lies wholly above or below 0, else NoDifference.
func (r Rule) Verdict(d Difference, na, nb int, w Words) string {
	switch {
	case na < r.MinReps || nb < r.MinReps || math.IsNaN(d.Diff.Low) || math.IsNaN(d.Diff.High):
		return TooFewSamples
	case r.MaxHalfWidth > 0 && !(d.HalfWidth <= r.MaxHalfWidth):
		return TooWide
	case d.Diff.Low > 0:
		return w.Above
	case d.Diff.High < 0:
		return w.Below
	}
	return NoDifference
}

// CompareRule is Compare (independent resamples of x and y: a ratio of
// medians) with the half-width filled in and the verdict under r.
func (b Bootstrap) CompareRule(key string, x, y []float64, r Rule, w Words) (Difference, bool) {
	d, ok := b.Compare(key, x, y, w)
	if !ok {
		return d, false
	}
	d.HalfWidth = (d.Percent.High - d.Percent.Low) / 2
	d.Verdict = r.Verdict(d, len(x), len(y), w)
	return d, true
}

// Paired compares x against y measured in pairs: x[i] and y[i] come from
// the same repetition of an interleaved run, so what moves the machine
// from one repetition to the next moves both. The difference is the
// median of the within-pair differences x[i]-y[i], with the 95%
// percentile-bootstrap interval of that median (pairs resampled with
// replacement); the change in percent, its half-width and the ratio are
// that difference and its interval over median(y). Pairs where either
// figure is NaN (a failed run) are left out. False when x and y differ in
// length, no pair is left, or median(y) is not positive.
func (b Bootstrap) Paired(key string, x, y []float64, r Rule, w Words) (Difference, bool) {
	if len(x) != len(y) {
		return Difference{}, false
	}
	var d, ys []float64
	for i := range x {
		if !math.IsNaN(x[i]) && !math.IsNaN(y[i]) {
			d, ys = append(d, x[i]-y[i]), append(ys, y[i])
		}
	}
	if len(d) == 0 {
		return Difference{}, false
	}
	my := Median(ys)
	if my <= 0 {
		return Difference{}, false
	}
	lo, hi := b.medianCI("paired/"+key, d)
	md := Median(d)
	out := Difference{
		Diff:      Estimate{md, lo, hi},
		Ratio:     Estimate{1 + md/my, 1 + lo/my, 1 + hi/my},
		Percent:   Estimate{100 * md / my, 100 * lo / my, 100 * hi / my},
		HalfWidth: 100 * (hi - lo) / 2 / my,
		Pairs:     len(d),
	}
	out.Verdict = r.Verdict(out, len(d), len(d), w)
	return out, true
}
