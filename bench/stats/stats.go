package stats

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
)

// Statistics for noisy measurements: medians, and 95% percentile-bootstrap
// intervals for a median, a difference of medians and a ratio of medians.
// Resampling uses a PCG generator seeded from a caller's seed and a key
// naming the quantity, so every interval is reproducible and does not
// depend on the order in which cells are computed.

// Verdicts on a difference A - B, from its interval.
const (
	Faster        = "faster"                    // the whole interval is above 0 (Speed)
	Slower        = "slower"                    // the whole interval is below 0 (Speed)
	HigherLatency = "higher"                    // the whole interval is above 0 (Latency)
	LowerLatency  = "lower"                     // the whole interval is below 0 (Latency)
	NoDifference  = "no significant difference" // the interval contains 0
	TooFewSamples = "too few repetitions"       // fewer than MinVerdictReps on a side
)

// Words name the verdicts on a difference whose interval lies wholly above
// or wholly below 0.
type Words struct{ Above, Below string }

// The words of each kind of figure.
var (
	Speed   = Words{Above: Faster, Below: Slower}              // throughput: more is better
	Latency = Words{Above: HigherLatency, Below: LowerLatency} // round-trip times: less is better
)

// MinVerdictReps is the fewest repetitions per side for a verdict. With 3
// against 3 the 95% bootstrap interval of the difference of medians
// excludes 0 only when every sample of one side beats every sample of the
// other (a permutation p of 1/20 one-sided); with fewer, "faster" would mean
// little.
const MinVerdictReps = 3

// Level is the confidence level of every interval.
const Level = 0.95

// DefaultResamples is the number of bootstrap resamples when none is given.
const DefaultResamples = 4000

// Median returns the median of x (the mean of the two middle values for an
// even count), or NaN for an empty x. x is not modified.
func Median(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	return sortedMedian(s)
}

func sortedMedian(s []float64) float64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Quantile returns the q-quantile (0 <= q <= 1) of sorted s by linear
// interpolation between order statistics (Hyndman and Fan type 7, the
// default of R and NumPy). NaN for an empty s.
func Quantile(s []float64, q float64) float64 {
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	h := q * float64(n-1)
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return s[n-1]
	}
	if lo < 0 {
		return s[0]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

// Bootstrap draws resampled statistics.
type Bootstrap struct {
	// Seed makes the intervals reproducible; the same seed, key and samples
	// give the same interval.
	Seed uint64
	// Resamples per interval; 0 means DefaultResamples.
	Resamples int
}

func (b Bootstrap) rng(key string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(key))
	return rand.New(rand.NewPCG(b.Seed, h.Sum64()))
}

// Estimate is a median (or a difference or ratio of medians) with its 95%
// bootstrap interval.
type Estimate struct {
	Median float64 `json:"median"`
	Low    float64 `json:"ci_low"`
	High   float64 `json:"ci_high"`
}

// Count is the number of resamples per interval: Resamples, or
// DefaultResamples when that is not set.
func (b Bootstrap) Count() int {
	if b.Resamples <= 0 {
		return DefaultResamples
	}
	return b.Resamples
}

// resampledMedian fills buf with len(buf) draws from x, with replacement,
// and returns their median (buf is sorted afterwards).
func resampledMedian(x, buf []float64, r *rand.Rand) float64 {
	for i := range buf {
		buf[i] = x[r.IntN(len(x))]
	}
	slices.Sort(buf)
	return sortedMedian(buf)
}

// interval returns the central Level percentile interval of stats (sorted
// in place).
func interval(stats []float64) (lo, hi float64) {
	slices.Sort(stats)
	a := (1 - Level) / 2
	return Quantile(stats, a), Quantile(stats, 1-a)
}

// MedianCI returns the 95% percentile-bootstrap interval of the median of x.
// A single sample gives [x0, x0]; an empty x gives NaNs.
func (b Bootstrap) MedianCI(key string, x []float64) (lo, hi float64) {
	return b.medianCI("median/"+key, x)
}

func (b Bootstrap) medianCI(key string, x []float64) (lo, hi float64) {
	if len(x) == 0 {
		return math.NaN(), math.NaN()
	}
	r := b.rng(key)
	buf := make([]float64, len(x))
	stats := make([]float64, b.Count())
	for i := range stats {
		stats[i] = resampledMedian(x, buf, r)
	}
	return interval(stats)
}

// PairCI holds intervals of two statistics of the same resamples.
type PairCI struct {
	DiffLow, DiffHigh   float64 // median(x) - median(y)
	RatioLow, RatioHigh float64 // median(x) / median(y)
}

// Pair returns the 95% bootstrap intervals of median(x) - median(y) and of
// median(x) / median(y), with x and y resampled independently (they come
// from separate runs). Both intervals come from the same resamples, so the
// difference excludes 0 exactly when the ratio excludes 1 (for positive
// figures). Resamples whose ratio is not finite (a zero median of y) are
// left out of the ratio interval. Empty x or y gives NaNs.
func (b Bootstrap) Pair(key string, x, y []float64) PairCI {
	nan := math.NaN()
	if len(x) == 0 || len(y) == 0 {
		return PairCI{nan, nan, nan, nan}
	}
	r := b.rng("pair/" + key)
	bx, by := make([]float64, len(x)), make([]float64, len(y))
	diffs := make([]float64, 0, b.Count())
	ratios := make([]float64, 0, b.Count())
	for range b.Count() {
		mx, my := resampledMedian(x, bx, r), resampledMedian(y, by, r)
		diffs = append(diffs, mx-my)
		if q := mx / my; !math.IsInf(q, 0) && !math.IsNaN(q) {
			ratios = append(ratios, q)
		}
	}
	var c PairCI
	c.DiffLow, c.DiffHigh = interval(diffs)
	c.RatioLow, c.RatioHigh = nan, nan
	if len(ratios) > 0 {
		c.RatioLow, c.RatioHigh = interval(ratios)
	}
	return c
}

// Verdict reads the interval [lo, hi] of a difference A - B measured with
// na and nb repetitions: w.Above when it lies above 0, w.Below when below,
// NoDifference when it contains 0 (an interval touching 0 included), and
// TooFewSamples when either side has fewer than MinVerdictReps.
func Verdict(lo, hi float64, na, nb int, w Words) string {
	switch {
	case na < MinVerdictReps || nb < MinVerdictReps || math.IsNaN(lo) || math.IsNaN(hi):
		return TooFewSamples
	case lo > 0:
		return w.Above
	case hi < 0:
		return w.Below
	}
	return NoDifference
}

// Difference is sample A against sample B: the difference and the ratio
// of their medians, the change in percent, and the verdict.
type Difference struct {
	// Diff is median(A) - median(B) with its bootstrap interval.
	Diff Estimate `json:"difference"`
	// Ratio is median(A) / median(B), from the same resamples as Diff.
	Ratio Estimate `json:"ratio"`
	// Percent is the change of the median, 100 * (Ratio - 1), interval
	// included.
	Percent Estimate `json:"difference_percent"`
	// Verdict reads Diff's interval (see Verdict and Rule.Verdict).
	Verdict string `json:"verdict"`
	// HalfWidth is half the width of Percent's interval, in percent of
	// B's median (CompareRule), or the factor in percent by which each end
	// of Ratio's interval lies from its estimate (Paired, whose interval
	// is symmetric in the logarithm); set by those two.
	HalfWidth float64 `json:"half_width_percent,omitempty"`
	// Pairs is the number of pairs a Paired comparison used; 0 when A and
	// B were resampled independently.
	Pairs int `json:"pairs,omitempty"`
	// Stage1 is how many of the Pairs came from the first stage, whose
	// spread sets the interval's width; Needed is how many pairs that
	// spread asks for an interval within the rule's target (see Paired).
	// Both 0 outside Paired and in reports from before it.
	Stage1 int `json:"stage1_pairs,omitempty"`
	Needed int `json:"pairs_needed,omitempty"`
}

// Compare compares a against b (see Pair for the key); false when either
// is empty or b's median is not positive (no ratio to it).
func (b Bootstrap) Compare(key string, x, y []float64, w Words) (Difference, bool) {
	if len(x) == 0 || len(y) == 0 {
		return Difference{}, false
	}
	mx, my := Median(x), Median(y)
	if my <= 0 {
		return Difference{}, false
	}
	ci := b.Pair(key, x, y)
	q := Estimate{mx / my, ci.RatioLow, ci.RatioHigh}
	return Difference{
		Diff:    Estimate{mx - my, ci.DiffLow, ci.DiffHigh},
		Ratio:   q,
		Percent: Estimate{100 * (q.Median - 1), 100 * (q.Low - 1), 100 * (q.High - 1)},
		Verdict: Verdict(ci.DiffLow, ci.DiffHigh, len(x), len(y), w),
	}, true
}
