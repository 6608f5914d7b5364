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
// a one-sided 5% test, not the two-sided 95% one a verdict claims; and a
// t interval of 3 pairs rests on 2 degrees of freedom (t = 4.3).
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
