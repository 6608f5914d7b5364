package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestRuleVerdict(t *testing.T) {
	r := DefaultRule
	diff := func(lo, hi, half float64) Difference {
		return Difference{Diff: Estimate{(lo + hi) / 2, lo, hi}, HalfWidth: half}
	}
	nan := math.NaN()
	for _, tc := range []struct {
		name   string
		d      Difference
		na, nb int
		want   string
	}{
		{"3 repetitions: too few", diff(1, 2, 1), 3, 3, TooFewSamples},
		{"3 against 9: too few", diff(1, 2, 1), 3, 9, TooFewSamples},
		{"4 repetitions, above 0", diff(1, 2, 1), 4, 4, Faster},
		{"below 0", diff(-2, -1, 5), 4, 6, Slower},
		{"across 0", diff(-1, 2, 5), 10, 10, NoDifference},
		{"touching 0", diff(0, 2, 5), 10, 10, NoDifference},
		{"at the target", diff(1, 2, 7.5), 10, 10, Faster},
		{"wider than the target", diff(1, 2, 7.6), 10, 10, TooWide},
		{"wide across 0", diff(-5, 5, 11), 10, 10, TooWide},
		{"no interval", diff(nan, nan, nan), 10, 10, TooFewSamples},
		{"no half-width", diff(1, 2, nan), 10, 10, TooWide},
	} {
		if got := r.Verdict(tc.d, tc.na, tc.nb, Speed); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// No target: any width gets a verdict.
	if got := (Rule{MinReps: 4}).Verdict(diff(1, 2, 50), 4, 4, Latency); got != HigherLatency {
		t.Errorf("without a target: %q", got)
	}
}

// coverage runs trials simulated comparisons of independent runs, n a
// side, with a true difference of medians delta, and returns the share
// of CompareRule's intervals that hold it. Each run is 30 plus normal
// noise of sd 1.
func coverage(n, trials int) float64 {
	r := rand.New(rand.NewPCG(uint64(n), 42))
	const delta = 1.5
	hit := 0
	x, y := make([]float64, n), make([]float64, n)
	for trial := range trials {
		for i := range n {
			y[i] = 30 + r.NormFloat64()
			x[i] = 30 + delta + r.NormFloat64()
		}
		d, _ := Bootstrap{Seed: uint64(trial), Resamples: 2000}.CompareRule("cov", x, y, DefaultRule, Speed)
		if d.Diff.Low <= delta && delta <= d.Diff.High {
			hit++
		}
	}
	return float64(hit) / float64(trials)
}

// TestCompareRuleCoverage checks the interval of a difference of medians
// resampled independently (compare between runs, ratios to the bridge)
// the same way, on independent runs: 93% to 99% (it runs a little over
// its level).
func TestCompareRuleCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("thousands of bootstrap intervals")
	}
	for _, n := range []int{5, 10} {
		c := coverage(n, 1000)
		t.Logf("independent, %d a side: coverage %.3f", n, c)
		if c < 0.93 || c > 0.99 {
			t.Errorf("independent, %d a side: coverage %.3f, want 0.93 to 0.99", n, c)
		}
	}
}
