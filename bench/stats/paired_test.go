package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestStudentT(t *testing.T) {
	// R's qt(p, df).
	qt := func(p float64, df int, want float64) {
		t.Helper()
		if got := StudentT(p, df); math.Abs(got-want) > 1e-8 {
			t.Errorf("StudentT(%v, %d) = %.9f, want %.9f", p, df, got, want)
		}
	}
	qt(0.975, 1, 12.706204736)
	qt(0.975, 2, 4.302652730)
	qt(0.975, 5, 2.570581836)
	qt(0.975, 10, 2.228138852)
	qt(0.975, 30, 2.042272456)
	qt(0.975, 100, 1.983971519)
	qt(0.975, 1000, 1.962339081)
	qt(0.995, 10, 3.169272673)
	qt(0.9, 3, 1.637744354)
	qt(0.5, 7, 0)
}

func TestPaired(t *testing.T) {
	// A constant ratio within every pair, however much the pairs drift:
	// the interval is that ratio exactly.
	y := []float64{10, 20, 5, 8, 40}
	x := []float64{11, 22, 5.5, 8.8, 44}
	d, ok := Paired(x, y, len(x), DefaultRule, Speed)
	if !ok || d.Pairs != 5 || d.Stage1 != 5 || d.Verdict != Faster || d.HalfWidth > 1e-12 {
		t.Fatalf("constant ratio: %+v, %v", d, ok)
	}
	if math.Abs(d.Ratio.Low-1.1) > 1e-12 || math.Abs(d.Percent.High-10) > 1e-9 || math.Abs(d.Diff.Median-1) > 1e-9 {
		t.Errorf("constant ratio 1.1 over a median of 10: %+v", d)
	}
	// Known figures: log-ratios 0.1, 0.2, 0.3 and a failed run, left out.
	nan := math.NaN()
	e := math.Exp
	d, ok = Paired([]float64{e(0.1), e(0.2), nan, e(0.3)}, []float64{1, 1, 1, 1}, 4, Rule{MinReps: 3}, Speed)
	h := StudentT(0.975, 2) * 0.1 / math.Sqrt(3)
	if !ok || d.Pairs != 3 || math.Abs(d.Ratio.Median-e(0.2)) > 1e-12 || math.Abs(d.Ratio.Low-e(0.2-h)) > 1e-12 ||
		math.Abs(d.HalfWidth-100*math.Expm1(h)) > 1e-9 || d.Verdict != NoDifference {
		t.Errorf("log-ratios 0.1, 0.2, 0.3: %+v, want %v +- %v", d, e(0.2), h)
	}
	// The first stage's spread sets the width and the pairs needed; the
	// pairs past them (made for another comparison) are left out.
	x2, y2 := []float64{e(0.1), e(0.2), e(0.3), e(0.2), e(2), e(-2)}, []float64{1, 1, 1, 1, 1, 1}
	d, _ = Paired(x2, y2, 3, Rule{MinReps: 4}, Speed)
	if h := StudentT(0.975, 2) * 0.1 / 2; math.Abs(d.HalfWidth-100*math.Expm1(h)) > 1e-9 || d.Stage1 != 3 || d.Pairs != 4 ||
		d.Needed != 4 || math.Abs(d.Ratio.Median-e(0.2)) > 1e-12 {
		t.Errorf("stage 1 of 3 pairs, 4 needed, then 2 wild ones: %+v, want the first 4 with the first 3's spread", d)
	}
	if d, _ := Paired(x[:3], y[:3], 3, DefaultRule, Speed); d.Verdict != TooFewSamples {
		t.Errorf("3 pairs: %q, want %q", d.Verdict, TooFewSamples)
	}
	if d, _ := Paired([]float64{1, 1.01, 0.99, 1, 1.02}, []float64{1, 1, 1, 1.01, 1}, 5, DefaultRule, Speed); d.Verdict != NoDifference {
		t.Errorf("the same figures: %q, want %q", d.Verdict, NoDifference)
	}
	for _, bad := range [][2][]float64{{x[:2], y}, {nil, nil}, {{1, 2}, {0, 0}}, {{nan, 1, 2}, {1, 1, 1}}} {
		if _, ok := Paired(bad[0], bad[1], 2, DefaultRule, Speed); ok {
			t.Errorf("Paired(%v, %v) with 2 in the first stage compared", bad[0], bad[1])
		}
	}
}

func TestPairsNeeded(t *testing.T) {
	e := math.Exp
	one := []float64{1, 1, 1, 1, 1, 1}
	// Log-ratios of sd 0.1 over 6 pairs: (2.571 * 0.1 / log 1.075)^2 = 12.6.
	x := []float64{e(0.1), e(0.2), e(0.3), e(0.1), e(0.2), e(0.3)}
	s := 0.1 * math.Sqrt(4.0/5)
	want := int(math.Ceil(math.Pow(StudentT(0.975, 5)*s/math.Log(1.075), 2)))
	if got := PairsNeeded(x, one, 6, DefaultRule); got != want || want != 11 {
		t.Errorf("sd %.3f over 6 pairs: %d needed, want %d (11)", s, got, want)
	}
	// A clear, steady difference needs no more than the first stage.
	steady := []float64{1.20, 1.21, 1.19, 1.20, 1.22, 1.20}
	if got := PairsNeeded(steady, one, 6, DefaultRule); got != 6 {
		t.Errorf("steady +20%%: %d needed, want the 6 of the first stage", got)
	}
	if got := PairsNeeded(steady, one, 6, Rule{MinReps: 8, MaxHalfWidth: 7.5}); got != 8 {
		t.Errorf("steady, at least 8: %d needed", got)
	}
	if got := PairsNeeded(x, one, 6, Rule{MinReps: 4}); got != 6 {
		t.Errorf("no target: %d needed, want the first stage's 6", got)
	}
	nan := math.NaN()
	if got := PairsNeeded([]float64{nan, nan, 1, nan}, []float64{1, 1, 1, 1}, 4, DefaultRule); got != -1 {
		t.Errorf("one pair in the first stage: %d needed, want -1", got)
	}
}

// runShape draws the noise of one run, as a log factor on its figure.
type runShape func(r *rand.Rand) float64

// The shapes of run-to-run noise the sequential rule is checked on: how
// far a run lies from its configuration's figure (a log factor).
var shapes = []struct {
	name     string
	draw     runShape
	lopsided bool // checked for not falling short only
}{
	{"normal", func(r *rand.Rand) float64 { return 0.06 * r.NormFloat64() }, false},
	// 15% of the runs 4 times as noisy: a placement gone wrong.
	{"heavy-tailed (outliers)", func(r *rand.Rand) float64 {
		e := 0.035 * r.NormFloat64()
		if r.Float64() < 0.15 {
			e *= 4
		}
		return e
	}, false},
	// Student's t with 3 degrees of freedom.
	{"heavy-tailed (t3)", func(r *rand.Rand) float64 {
		var c float64
		for range 3 {
			g := r.NormFloat64()
			c += g * g
		}
		return 0.035 * r.NormFloat64() / math.Sqrt(c/3)
	}, false},
	// Each run in one of two modes, as the 128 B one-stream runs through
	// tapfwd: about 0.36 or 0.58 Gbit/s, half the runs in each, a little
	// noise within a mode.
	{"bimodal (0.36 or 0.58, even)", func(r *rand.Rand) float64 { return bimodal(r, 0.5) }, false},
	{"bimodal (0.36 or 0.58, 1 in 5 slow)", func(r *rand.Rand) float64 { return bimodal(r, 0.2) }, true},
}

func bimodal(r *rand.Rand, slow float64) float64 {
	e := 0.03 * r.NormFloat64()
	if r.Float64() < slow {
		e += math.Log(0.36 / 0.58)
	}
	return e
}

// sequential simulates trials sequential comparisons of A against B, as
// the throughput bench runs them: a first stage of Stage1Reps pairs, then
// as many pairs as PairsNeeded says or a second, noisier comparison
// needs (the run goes on until every comparison has its pairs), at most
// budget; then Paired. Each repetition moves both runs of a pair alike
// (the machine's drift, a log factor of sd 0.2), each run adds its own
// noise, drawn from shape for both sides (asym, when set, for A's), and
// A is a factor 1.1 above B. It returns the share of the intervals that
// hold 1.1, the share within the target, the mean pairs made, and the
// share that an interval of the same spread over all the pairs made
// (not only those A's first stage asked for) holds.
func sequential(trials, budget int, shape, asym runShape, seed uint64) (cover, met, pairs, coverAll float64) {
	r := rand.New(rand.NewPCG(seed, 7))
	// A's noise mean, so that the true ratio of geometric means stays 1.1
	// when A's shape differs from B's.
	var offset float64
	if asym == nil {
		asym = shape
	} else {
		for range 200000 {
			offset += asym(r) - shape(r)
		}
		offset /= 200000
	}
	const ratio = 1.1
	var hits, hitsAll, within, total int
	x, y := make([]float64, 0, budget), make([]float64, 0, budget)
	ox, oy := make([]float64, 0, budget), make([]float64, 0, budget)
	draw := func() {
		drift := math.Exp(0.2 * r.NormFloat64())
		y = append(y, drift*math.Exp(shape(r)))
		x = append(x, drift*ratio*math.Exp(asym(r)-offset))
		// The other comparison: plain noise of sd 0.12 a side.
		oy = append(oy, math.Exp(0.12*r.NormFloat64()))
		ox = append(ox, math.Exp(0.12*r.NormFloat64()))
	}
	for range trials {
		x, y, ox, oy = x[:0], y[:0], ox[:0], oy[:0]
		for range Stage1Reps {
			draw()
		}
		n := max(PairsNeeded(x, y, Stage1Reps, DefaultRule), PairsNeeded(ox, oy, Stage1Reps, DefaultRule))
		for len(x) < min(n, budget) {
			draw()
		}
		d, _ := Paired(x, y, Stage1Reps, DefaultRule, Speed)
		if d.Ratio.Low <= ratio && ratio <= d.Ratio.High {
			hits++
		}
		if d.HalfWidth <= TargetHalfWidth {
			within++
		}
		// A rule that asks for every pair there is: Stein's interval over
		// them all.
		if all, _ := Paired(x, y, Stage1Reps, Rule{MinReps: len(x)}, Speed); all.Ratio.Low <= ratio && ratio <= all.Ratio.High {
			hitsAll++
		}
		total += len(x)
	}
	f := float64(trials)
	return float64(hits) / f, float64(within) / f, float64(total) / f, float64(hitsAll) / f
}

// TestPairedCoverage checks the sequential rule's interval on synthetic
// runs with a known ratio: for every shape of noise (normal, two heavy
// tails, runs in two modes half and half, as the 128 B runs through
// tapfwd) and budget (15 repetitions, what 25 minutes of the default run
// hold, and 40) it must hold the true ratio 93% to 97% of the time at
// its 95% level. Stein's interval is exact for normal log-ratios; the
// other shapes are what the bench meets. The trials (fixed seeds, so the
// same figures every time) carry a standard error of 0.35 points, or
// 0.7 under the race detector and -short, which run a quarter of them.
// Two more shapes are checked for not falling short only: with one run
// in five in the slow mode the interval runs a little wide (above 97%);
// with a slow mode on one side alone the log-ratios are skewed, and no
// t interval of 6 to 15 pairs holds its level there (logged: the report
// names the modes instead). Logged too, for every shape: the coverage of
// the same spread over all the pairs the run made, which with heavy tails
// falls short; hence each comparison takes only the pairs it needs.
func TestPairedCoverage(t *testing.T) {
	trials := 4000
	if raceEnabled || testing.Short() {
		trials = 1000
	}
	for i, s := range shapes {
		for _, budget := range []int{15, 40} {
			c, met, n, all := sequential(trials, budget, s.draw, nil, uint64(i*100+budget))
			t.Logf("%-36s budget %2d: coverage %.3f, within the target %.2f, %.1f pairs made; over all of them %.3f", s.name, budget, c, met, n, all)
			low, high := 0.93, 0.97
			if s.lopsided {
				high = 1
			}
			if c < low || c > high {
				t.Errorf("%s, budget %d: coverage %.3f, want %.2f to %.2f", s.name, budget, c, low, high)
			}
		}
	}
	c, _, _, _ := sequential(trials, 15, shapes[0].draw, func(r *rand.Rand) float64 { return bimodal(r, 0.2) }, 99)
	t.Logf("A alone in two modes (1 in 5 slow), B normal, budget 15: coverage %.3f (not held)", c)
}

// TestSequentialStops checks where the sequential rule stops: a clear
// difference gets its verdict from the first stage, and noise that the
// target cannot be reached through takes the whole budget and is
// reported too wide.
func TestSequentialStops(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	run := func(ratio, noise float64, budget int) (Difference, int) {
		var x, y []float64
		draw := func() {
			y = append(y, 5*math.Exp(noise*r.NormFloat64()))
			x = append(x, 5*ratio*math.Exp(noise*r.NormFloat64()))
		}
		for range Stage1Reps {
			draw()
		}
		need := PairsNeeded(x, y, Stage1Reps, DefaultRule)
		for len(x) < min(need, budget) {
			draw()
		}
		d, _ := Paired(x, y, Stage1Reps, DefaultRule, Speed)
		return d, need
	}
	for range 20 {
		d, need := run(1.3, 0.02, 15)
		if d.Pairs != Stage1Reps || need != Stage1Reps || d.Verdict != Faster {
			t.Fatalf("+30%% with 2%% noise: %d pairs (%d needed), verdict %q; want the first stage's and faster", d.Pairs, need, d.Verdict)
		}
		d, need = run(1, 0.5, 15)
		if d.Pairs != 15 || need <= 15 || d.Verdict != TooWide || d.Needed != need {
			t.Fatalf("50%% noise: %d pairs (%d needed, %d recorded), verdict %q; want the budget's 15 and too wide", d.Pairs, need, d.Needed, d.Verdict)
		}
	}
}

func TestTwoModes(t *testing.T) {
	// The committed default run's napi-off runs with 128 B writes, one
	// stream, and the bridge's beside them.
	napiOff := []float64{0.568, 0.583, 0.360, 0.568, 0.395, 0.565, 0.358, 0.370, 0.598}
	if split, ok := TwoModes(napiOff); !ok || split < 0.395 || split > 0.565 {
		t.Errorf("napi-off, 128 B: split %v, %v; want two modes split between 0.395 and 0.565", split, ok)
	}
	for _, x := range [][]float64{
		{0.326, 0.31, 0.335, 0.33, 0.32, 0.318, 0.334, 0.329, 0.312}, // the bridge: one mode
		{4.1, 4.2, 4.0, 1.2, 4.15, 4.05},                             // one outlier
		{1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6},                            // spread out
		{1, 1, 2, 2},                                                 // too few
		{1, 1, 2, 2, 0},                                              // not positive
	} {
		if _, ok := TwoModes(x); ok {
			t.Errorf("TwoModes(%v): two modes", x)
		}
	}
	// Normal samples with a 10% spread: never two modes.
	r := rand.New(rand.NewPCG(5, 5))
	for range 2000 {
		x := make([]float64, 5+r.IntN(25))
		for i := range x {
			x[i] = math.Exp(0.1 * r.NormFloat64())
		}
		if _, ok := TwoModes(x); ok {
			t.Fatalf("normal sample %v: two modes", x)
		}
	}
}
