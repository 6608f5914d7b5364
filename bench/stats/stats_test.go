package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		x    []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{1, 1, 1, 100}, 1},
		{[]float64{-3, 7, 7, 0, 2}, 2},
	} {
		in := slices.Clone(tc.x)
		if got := Median(tc.x); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.x, got, tc.want)
		}
		if !slices.Equal(in, tc.x) {
			t.Errorf("Median reordered its input: %v, was %v", tc.x, in)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) is not NaN")
	}
}

func TestQuantile(t *testing.T) {
	// The type 7 values R's quantile() and NumPy's quantile() give.
	s := []float64{1, 2, 3, 4}
	for _, tc := range []struct{ q, want float64 }{
		{0, 1}, {0.25, 1.75}, {0.5, 2.5}, {0.975, 3.925}, {1, 4},
	} {
		if got := Quantile(s, tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Quantile(%v, %v) = %v, want %v", s, tc.q, got, tc.want)
		}
	}
	if Quantile([]float64{7}, 0.3) != 7 || !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("Quantile of one value or none")
	}
}

func TestMedianCIKnownSample(t *testing.T) {
	// Resampling {1, 2, 3}: the median is 1 when at least two of the three
	// draws are 1, probability 7/27 > 2.5%, and likewise 3; so the 95%
	// interval is exactly [1, 3].
	lo, hi := Bootstrap{Seed: 1}.MedianCI("k", []float64{2, 3, 1})
	if lo != 1 || hi != 3 {
		t.Errorf("MedianCI({1,2,3}) = [%v, %v], want [1, 3]", lo, hi)
	}
	// One sample: nothing to resample.
	if lo, hi := (Bootstrap{}).MedianCI("k", []float64{4.5}); lo != 4.5 || hi != 4.5 {
		t.Errorf("MedianCI({4.5}) = [%v, %v]", lo, hi)
	}
	if lo, hi := (Bootstrap{}).MedianCI("k", nil); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("MedianCI(nil) = [%v, %v], want NaNs", lo, hi)
	}
}

func TestMedianCIProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for trial := range 50 {
		n := 1 + r.IntN(15)
		x := make([]float64, n)
		for i := range x {
			x[i] = 10 + 3*r.NormFloat64()
		}
		bs := Bootstrap{Seed: uint64(trial), Resamples: 500}
		lo, hi := bs.MedianCI("p", x)
		m := Median(x)
		if !(slices.Min(x) <= lo && lo <= m && m <= hi && hi <= slices.Max(x)) {
			t.Fatalf("x=%v: interval [%v, %v] does not hold the median %v within [min, max]", x, lo, hi, m)
		}
		// Reproducible: the same seed, key and samples, the same interval,
		// whatever was computed in between.
		bs.MedianCI("other", x)
		if lo2, hi2 := bs.MedianCI("p", x); lo2 != lo || hi2 != hi {
			t.Fatalf("not reproducible: [%v, %v] then [%v, %v]", lo, hi, lo2, hi2)
		}
	}
	// No spread, no width.
	if lo, hi := (Bootstrap{}).MedianCI("c", []float64{3, 3, 3, 3}); lo != 3 || hi != 3 {
		t.Errorf("constant sample: [%v, %v]", lo, hi)
	}
	// More spread, a wider interval.
	narrow := []float64{9.9, 10, 10.1, 10, 9.95, 10.05, 10}
	wide := make([]float64, len(narrow))
	for i, v := range narrow {
		wide[i] = 10 + 10*(v-10)
	}
	nl, nh := Bootstrap{}.MedianCI("w", narrow)
	wl, wh := Bootstrap{}.MedianCI("w", wide)
	if !(wh-wl > nh-nl) {
		t.Errorf("interval of the 10x wider sample [%v, %v] not wider than [%v, %v]", wl, wh, nl, nh)
	}
}

// TestMedianCICoverage checks that the 95% interval holds the true median
// about 95% of the time, on samples of 11 from a normal distribution.
func TestMedianCICoverage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const trials, n = 400, 11
	hit := 0
	x := make([]float64, n)
	for trial := range trials {
		for i := range x {
			x[i] = 10 + r.NormFloat64()
		}
		lo, hi := Bootstrap{Seed: uint64(trial), Resamples: 1000}.MedianCI("cov", x)
		if lo <= 10 && 10 <= hi {
			hit++
		}
	}
	// The percentile bootstrap of a median from 11 samples covers about
	// 93-97%; 400 trials put the estimate within a few points of that.
	cov := float64(hit) / trials
	t.Logf("coverage %.3f", cov)
	if cov < 0.88 || cov > 0.995 {
		t.Errorf("coverage %.3f, want about 0.95", cov)
	}
}

func TestPairAndVerdict(t *testing.T) {
	bs := Bootstrap{Seed: 3}
	for _, tc := range []struct {
		name string
		a, b []float64
		want string
	}{
		// Every A above every B: 3 against 3 is enough.
		{"separated", []float64{10, 11, 12}, []float64{1, 2, 3}, Faster},
		{"separated, reversed", []float64{1, 2, 3}, []float64{10, 11, 12}, Slower},
		// One A below the top B: the median of a resample of A is 2 with
		// probability 7/27, so the interval reaches below 0.
		{"overlap", []float64{10, 11, 2}, []float64{1, 2, 3}, NoDifference},
		{"same", []float64{5, 6, 7, 5.5, 6.5}, []float64{6.2, 5.2, 6.8, 5.8, 6}, NoDifference},
		{"shifted, noisy", []float64{9.1, 10.3, 9.8, 10.6, 9.5}, []float64{7.9, 8.4, 8.8, 7.6, 8.1}, Faster},
		{"too few", []float64{10, 11}, []float64{1, 2}, TooFewSamples},
	} {
		c := bs.Pair(tc.name, tc.a, tc.b)
		d := Median(tc.a) - Median(tc.b)
		if !(c.DiffLow <= d && d <= c.DiffHigh) {
			t.Errorf("%s: difference %v outside its interval [%v, %v]", tc.name, d, c.DiffLow, c.DiffHigh)
		}
		q := Median(tc.a) / Median(tc.b)
		if !(c.RatioLow <= q && q <= c.RatioHigh) {
			t.Errorf("%s: ratio %v outside its interval [%v, %v]", tc.name, q, c.RatioLow, c.RatioHigh)
		}
		// Same resamples: the difference excludes 0 when the ratio excludes 1.
		if (c.DiffLow > 0) != (c.RatioLow > 1) || (c.DiffHigh < 0) != (c.RatioHigh < 1) {
			t.Errorf("%s: difference [%v, %v] and ratio [%v, %v] disagree", tc.name, c.DiffLow, c.DiffHigh, c.RatioLow, c.RatioHigh)
		}
		if got := Verdict(c.DiffLow, c.DiffHigh, len(tc.a), len(tc.b), Speed); got != tc.want {
			t.Errorf("%s: verdict %q (interval [%v, %v]), want %q", tc.name, got, c.DiffLow, c.DiffHigh, tc.want)
		}
	}
	// Exact bounds for complete separation: [min A - max B, max A - min B].
	c := bs.Pair("exact", []float64{10, 11, 12}, []float64{1, 2, 3})
	if c.DiffLow != 7 || c.DiffHigh != 11 {
		t.Errorf("difference interval [%v, %v], want [7, 11]", c.DiffLow, c.DiffHigh)
	}
	if c := bs.Pair("empty", nil, []float64{1}); !math.IsNaN(c.DiffLow) || !math.IsNaN(c.RatioHigh) {
		t.Errorf("Pair with an empty side: %+v, want NaNs", c)
	}
	// A zero median on the B side leaves the ratio to the resamples where
	// it is finite.
	if c := bs.Pair("zero", []float64{1, 2, 3}, []float64{0, 0, 1}); math.IsNaN(c.DiffLow) || math.IsInf(c.RatioHigh, 0) {
		t.Errorf("Pair with zeros: %+v", c)
	}
}

func TestVerdictBounds(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		lo, hi float64
		na, nb int
		want   string
	}{
		{0.1, 2, 3, 3, Faster},
		{-2, -0.1, 5, 3, Slower},
		{0, 2, 3, 3, NoDifference}, // touching 0 is not a win
		{-2, 0, 3, 3, NoDifference},
		{-1, 1, 9, 9, NoDifference},
		{1, 2, 2, 9, TooFewSamples},
		{1, 2, 9, 2, TooFewSamples},
		{nan, nan, 5, 5, TooFewSamples},
	} {
		if got := Verdict(tc.lo, tc.hi, tc.na, tc.nb, Speed); got != tc.want {
			t.Errorf("Verdict(%v, %v, %d, %d) = %q, want %q", tc.lo, tc.hi, tc.na, tc.nb, got, tc.want)
		}
	}
}

func TestCompare(t *testing.T) {
	bs := Bootstrap{Seed: 3}
	d, ok := bs.Compare("k", []float64{3, 3.1, 2.9}, []float64{2, 2.1, 1.9}, Speed)
	if !ok || d.Verdict != Faster || math.Abs(d.Ratio.Median-1.5) > 1e-12 || math.Abs(d.Percent.Median-50) > 1e-9 || d.Diff.Median != 1 {
		t.Errorf("Compare: %+v, %v", d, ok)
	}
	ci := bs.Pair("k", []float64{3, 3.1, 2.9}, []float64{2, 2.1, 1.9})
	if d.Diff.Low != ci.DiffLow || d.Ratio.High != ci.RatioHigh {
		t.Errorf("Compare %+v does not use Pair's resamples %+v", d, ci)
	}
	if d, _ := bs.Compare("k", []float64{3, 3.1, 2.9}, []float64{2, 2.1, 1.9}, Latency); d.Verdict != HigherLatency {
		t.Errorf("latency words: %q", d.Verdict)
	}
	if _, ok := bs.Compare("k", []float64{1}, []float64{0, 0, 1}, Speed); ok {
		t.Error("a zero median on the B side: compared")
	}
	if _, ok := bs.Compare("k", nil, []float64{1}, Speed); ok {
		t.Error("an empty side: compared")
	}
	if Verdict(-1, 1, 3, 3, Latency) != NoDifference || Verdict(1, 2, 2, 3, Latency) != TooFewSamples || Verdict(-2, -1, 3, 3, Latency) != LowerLatency {
		t.Error("Verdict with the latency words")
	}
}
