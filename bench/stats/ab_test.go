package stats

import (
	"math"
	"slices"
	"testing"
)

// abWindow is a window of arm with each bin's seconds, bytes, frames
// (bytes/64) and CPU (a tenth of its seconds).
func abWindow(arm int, sec, bytes [ABBins]float64) ABWindow {
	w := ABWindow{Arm: arm}
	for i := range ABBins {
		w.Bins[i] = ABBin{Seconds: sec[i], Bytes: bytes[i], Frames: bytes[i] / 64, CPU: sec[i] / 10}
	}
	return w
}

func TestABSums(t *testing.T) {
	sec := [ABBins]float64{0.02, 0.02, 0.06}
	ws := []ABWindow{
		abWindow(0, sec, [ABBins]float64{1, 2, 4}),
		abWindow(1, sec, [ABBins]float64{8, 16, 32}),
		abWindow(1, sec, [ABBins]float64{64, 128, 256}),
		abWindow(0, sec, [ABBins]float64{512, 1024, 2048}),
		abWindow(2, sec, [ABBins]float64{1e6, 1e6, 1e6}), // neither arm
	}
	for _, tc := range []struct {
		guard                  int
		aBytes, bBytes, second float64
	}{
		{0, 1 + 2 + 4 + 512 + 1024 + 2048, 8 + 16 + 32 + 64 + 128 + 256, 0.2},
		{1, 2 + 4 + 1024 + 2048, 16 + 32 + 128 + 256, 0.16},
		{2, 4 + 2048, 32 + 256, 0.12},
		{3, 0, 0, 0},
	} {
		a, b := ABSums(ws, tc.guard)
		if a.Windows != 2 || b.Windows != 2 || a.Bytes != tc.aBytes || b.Bytes != tc.bBytes ||
			math.Abs(a.Seconds-tc.second) > 1e-12 || math.Abs(b.Seconds-tc.second) > 1e-12 ||
			a.Frames != tc.aBytes/64 || math.Abs(b.CPU-tc.second/10) > 1e-12 {
			t.Errorf("guard %d: A %+v, B %+v; want %v and %v bytes over %v s each", tc.guard, a, b, tc.aBytes, tc.bBytes, tc.second)
		}
	}
}

func TestABSchedule(t *testing.T) {
	seen := map[[4]int]int{}
	for seed := range uint64(50) {
		s := ABSchedule(seed, 100)
		if len(s) != 100 || !slices.Equal(s, ABSchedule(seed, 100)) {
			t.Fatalf("seed %d: %v, not 100 windows drawn alike twice", seed, s)
		}
		for i := 0; i < len(s); i += 4 {
			b := [4]int(s[i : i+4])
			if b != [4]int{0, 1, 1, 0} && b != [4]int{1, 0, 0, 1} {
				t.Fatalf("seed %d: block %d is %v, want ABBA or BAAB", seed, i/4, b)
			}
			seen[b]++
		}
		// A shorter schedule is the start of the longer one.
		if p := ABSchedule(seed, 37); !slices.Equal(p, s[:37]) {
			t.Errorf("seed %d: 37 windows %v, not the start of 100", seed, p)
		}
	}
	// 1,250 blocks: ABBA in 45% to 55% of them (4 standard errors of
	// fair odds are 5.7 points).
	if f := float64(seen[[4]int{0, 1, 1, 0}]) / 1250; f < 0.45 || f > 0.55 {
		t.Errorf("ABBA in %.3f of the blocks, want about half", f)
	}
	if slices.Equal(ABSchedule(1, 100), ABSchedule(2, 100)) {
		t.Error("seeds 1 and 2 gave the same schedule")
	}
	if len(ABSchedule(1, 0)) != 0 || len(ABSchedule(1, -1)) != 0 {
		t.Error("no windows: a schedule")
	}
}

// abRun is 8 windows, ABBA BAAB: A at aRate bytes a second, B at bRate,
// except in bin 0 of each window after a switch, which runs at the
// previous arm's rate; each arm's CPU is cpu[arm] seconds per second.
func abRun(aRate, bRate float64, cpu [2]float64) []ABWindow {
	sec := [ABBins]float64{0.02, 0.02, 0.06}
	rate := [2]float64{aRate, bRate}
	var ws []ABWindow
	arms := []int{0, 1, 1, 0, 1, 0, 0, 1}
	for i, arm := range arms {
		w := ABWindow{Arm: arm}
		for b := range ABBins {
			r := rate[arm]
			if b == 0 && i > 0 && arms[i-1] != arm {
				r = rate[arms[i-1]]
			}
			w.Bins[b] = ABBin{Seconds: sec[b], Bytes: r * sec[b], Frames: r * sec[b] / 64, CPU: cpu[arm] * sec[b]}
		}
		ws = append(ws, w)
	}
	return ws
}

func TestRunEffectAndCost(t *testing.T) {
	ws := abRun(100, 120, [2]float64{0.5, 0.45})
	// Guarded, the carry-over is left out: B's rate is 1.2 times A's, its
	// CPU per byte 0.45/120 against 0.5/100.
	for _, g := range []int{1, 2} {
		if e, ok := RunEffect(ws, g); !ok || math.Abs(e-math.Log(1.2)) > 1e-12 {
			t.Errorf("guard %d: effect %v, %v; want log 1.2", g, e, ok)
		}
		if c, ok := RunCost(ws, g); !ok || math.Abs(c-math.Log(0.45/120/(0.5/100))) > 1e-12 {
			t.Errorf("guard %d: cost %v, %v; want log 0.75", g, c, ok)
		}
	}
	// Unguarded: 5 of the 8 windows follow a switch (2 of A's, 3 of B's),
	// their first 20 ms at the other arm's rate.
	a := (4*0.1*100 + 2*0.02*(120-100)) / 0.4
	b := (4*0.1*120 + 3*0.02*(100-120)) / 0.4
	if e, ok := RunEffect(ws, 0); !ok || math.Abs(e-math.Log(b/a)) > 1e-12 {
		t.Errorf("guard 0: effect %v, %v; want log %v", e, ok, b/a)
	}
	for _, bad := range [][]ABWindow{nil, ws[:1], abRun(100, 0, [2]float64{1, 1})} {
		if _, ok := RunEffect(bad, 1); ok {
			t.Errorf("RunEffect(%d windows, one arm without bytes or time): an effect", len(bad))
		}
	}
	if _, ok := RunCost(abRun(100, 120, [2]float64{0.5, 0}), 1); ok {
		t.Error("RunCost with no CPU on B: a cost")
	}
}

func TestRunJackknife(t *testing.T) {
	// Two blocks, B at 100 in the first and 100*e^0.2 in the second, A at
	// 100 throughout: leaving out either gives the other's log ratio (0.2
	// or 0), and the jackknife's standard error is
	// sqrt(1/2 * 2 * 0.1^2) = 0.1.
	ws := append(abRun(100, 100, [2]float64{1, 1})[:4], abRun(100, 100*math.Exp(0.2), [2]float64{1, 1})[4:]...)
	if se, ok := RunJackknife(ws, 1, false); !ok || math.Abs(se-0.1) > 1e-12 {
		t.Errorf("two blocks 0.2 apart: %v, %v; want 0.1", se, ok)
	}
	// Three blocks, B at 100, 100 and 100*e^0.3: leaving out either of the
	// first two gives a = log((1 + e^0.3)/2), the third 0; the standard
	// error is sqrt(2/3 * (2 (a/3)^2 + (2a/3)^2)) = 2a/3.
	three := append(slices.Clone(ws[:4]), ws[:4]...)
	three = append(three, abRun(100, 100*math.Exp(0.3), [2]float64{1, 1})[:4]...)
	a := math.Log((1 + math.Exp(0.3)) / 2)
	if se, ok := RunJackknife(three, 1, false); !ok || math.Abs(se-2*a/3) > 1e-12 {
		t.Errorf("three blocks: %v, %v; want %v", se, ok, 2*a/3)
	}
	// Cost: B's CPU per byte e^0.2 times A's in the first block only.
	cpu := append(abRun(100, 100, [2]float64{1, math.Exp(0.2)})[:4], abRun(100, 100, [2]float64{1, 1})[4:]...)
	if se, ok := RunJackknife(cpu, 1, true); !ok || math.Abs(se-0.1) > 1e-12 {
		t.Errorf("cost, two blocks 0.2 apart: %v, %v; want 0.1", se, ok)
	}
	if se, ok := RunJackknife(abRun(100, 120, [2]float64{1, 1}), 1, false); !ok || se > 1e-12 {
		t.Errorf("the same ratio in every block: %v, %v; want 0", se, ok)
	}
	if _, ok := RunJackknife(ws[:4], 1, false); ok {
		t.Error("one block: a standard error")
	}
	// Leaving out the only block with B leaves B without an estimate.
	if _, ok := RunJackknife(append(ws[:4:4], ABWindow{}, ABWindow{}, ABWindow{}, ABWindow{}), 1, false); ok {
		t.Error("B only in one block: a standard error")
	}
}

// steinRuns is five runs of mean m and standard deviation s, then more.
func steinRuns(m, s float64, more ...float64) []float64 {
	d := make([]float64, 0, 5+len(more))
	for i := range 5 {
		d = append(d, m+s*float64(i-2)/math.Sqrt(2.5))
	}
	return append(d, more...)
}

func TestABInterval(t *testing.T) {
	// Five runs whose t is t(4)'s 97.5% quantile: the interval's low end
	// lies on 0, and P is 0.05.
	t4 := StudentT(0.975, 4)
	s := 0.05
	m := t4 * s / math.Sqrt(5)
	r := ABRule{MinRuns: 3, Stage1: 5, TargetHalfWidth: 3}
	res := ABInterval(steinRuns(m, s), r, abSpeed)
	if res.Runs != 5 || res.Stage1 != 5 || math.Abs(res.P-0.05) > 1e-9 || math.Abs(res.Percent.Low) > 1e-9 ||
		math.Abs(res.Percent.Median-100*math.Expm1(m)) > 1e-9 || math.Abs(res.HalfWidth-100*math.Expm1(m)) > 1e-9 || !res.Held {
		t.Errorf("t at the 97.5%% quantile: %+v; want P 0.05 and the interval's low end at 0", res)
	}
	// Stein's rule: (t(4) * s1 / log 1.03)^2 = 22.06, so 23 runs, and the
	// interval over those 23 alone, with the first stage's spread.
	need := int(math.Ceil(math.Pow(t4*s/math.Log(1.03), 2)))
	more := make([]float64, 30)
	for i := range more {
		more[i] = 0.1 * float64(i%2) // mean 0.05 over the next 18; 2 wild ones after
	}
	more[18], more[19] = 5, -5
	d := steinRuns(0.05, s, more...)
	res = ABInterval(d, r, abSpeed)
	want := mean(d[:23])
	if need != 23 || res.Needed != 23 || res.Runs != 23 || ABRunsNeeded(d, r) != 23 ||
		math.Abs(res.Percent.Median-100*math.Expm1(want)) > 1e-9 ||
		math.Abs(res.HalfWidth-100*math.Expm1(t4*s/math.Sqrt(23))) > 1e-9 {
		t.Errorf("%d needed: %+v", need, res)
	}
	// Not finite runs are left out, also from the first stage.
	nan := math.NaN()
	res = ABInterval([]float64{0.1, nan, 0.2, math.Inf(1), 0.3, 0.2, 0.1}, ABRule{MinRuns: 5, Stage1: 5}, abSpeed)
	if res.Stage1 != 3 || res.Runs != 5 || math.Abs(res.Percent.Median-100*math.Expm1(0.18)) > 1e-9 {
		t.Errorf("runs with NaN and Inf: %+v; want 3 in the first stage, 5 in all", res)
	}
	if res := ABInterval([]float64{0.1, nan, nan}, DefaultABRule, abSpeed); res.Verdict != ABTooFew || res.Needed != -1 || !math.IsNaN(res.P) {
		t.Errorf("one run: %+v", res)
	}
}

func mean(x []float64) float64 {
	m, _ := meanSD(x)
	return m
}

func TestABIntervalVerdicts(t *testing.T) {
	r := DefaultABRule
	l := math.Log1p
	for _, tc := range []struct {
		name string
		d    []float64
		want string
	}{
		{"2 runs", []float64{0.1, 0.12}, ABTooFew},
		{"wide", steinRuns(0, 0.2), ABTooWide},
		{"+10%", steinRuns(l(0.1), 0.02), ABFaster},
		{"-10%", steinRuns(l(-0.1), 0.02), ABSlower},
		{"+2%, inside +-5%, yet above 0", steinRuns(l(0.02), 0.005), ABFaster},
		{"0, narrow", steinRuns(0, 0.01), ABEquivalent},
		{"+3%, across 0 and past +5%", steinRuns(l(0.03), 0.03), ABNoDifference},
	} {
		if got := ABInterval(tc.d, r, abSpeed); got.Verdict != tc.want {
			t.Errorf("%s: %q (%+v), want %q", tc.name, got.Verdict, got, tc.want)
		}
	}
	// Fewer runs than MinRuns, however clear.
	if got := ABInterval([]float64{0.1, 0.1, 0.1, 0.1}, ABRule{MinRuns: 6, Stage1: 3}, abSpeed); got.Verdict != ABTooFew {
		t.Errorf("4 runs of 6: %q", got.Verdict)
	}
	// Cost words.
	if got := ABInterval(steinRuns(l(0.1), 0.02), r, ABWords{ABDearer, ABCheaper}); got.Verdict != ABDearer {
		t.Errorf("cost +10%%: %q", got.Verdict)
	}
	// P is below 0.05 exactly when the interval excludes 0.
	g := newSplitmix(7)
	for range 2000 {
		d := steinRuns(0.02*g.norm(), 0.01+0.05*g.float())
		res := ABInterval(d, ABRule{}, abSpeed)
		if (res.P < 0.05) != (res.Percent.Low > 0 || res.Percent.High < 0) {
			t.Fatalf("%v: P %v, interval %+v", d, res.P, res.Percent)
		}
	}
}

func TestABRunsNeeded(t *testing.T) {
	// (t(4) * 0.03 / log 1.03)^2 = 7.94.
	want := int(math.Ceil(math.Pow(StudentT(0.975, 4)*0.03/math.Log(1.03), 2)))
	if got := ABRunsNeeded(steinRuns(0.1, 0.03), DefaultABRule); got != want || want != 8 {
		t.Errorf("sd 0.03: %d, want %d (8)", got, want)
	}
	// At least the first stage's runs and MinRuns: 4 by the formula.
	d := steinRuns(0.1, 0.02)
	if got := ABRunsNeeded(d, DefaultABRule); got != 5 {
		t.Errorf("sd 0.02: %d, want the first stage's 5", got)
	}
	if got := ABRunsNeeded(d, ABRule{MinRuns: 8, Stage1: 5, TargetHalfWidth: 3}); got != 8 {
		t.Errorf("MinRuns 8: %d", got)
	}
	if got := ABRunsNeeded(d, ABRule{Stage1: 5}); got != 5 {
		t.Errorf("no target: %d, want the first stage's 5", got)
	}
	if got := ABRunsNeeded([]float64{0.1, math.NaN(), math.NaN()}, ABRule{Stage1: 3}); got != -1 {
		t.Errorf("one run in the first stage: %d, want -1", got)
	}
}

func TestABSentence(t *testing.T) {
	r := DefaultABRule
	cost := ABWords{ABDearer, ABCheaper}
	for _, tc := range []struct {
		res   ABResult
		words ABWords
		want  string
	}{
		{ABResult{Percent: Estimate{12.34, 8.06, 16.74}, Verdict: ABFaster}, abSpeed, "faster by 12.3% [8.1, 16.7]"},
		{ABResult{Percent: Estimate{-8, -12.1, -3.9}, Verdict: ABSlower}, abSpeed, "slower by 8.0% [3.9, 12.1]"},
		{ABResult{Percent: Estimate{5, 1, 9}, Verdict: ABDearer}, cost, "dearer by 5.0% [1.0, 9.0]"},
		{ABResult{Percent: Estimate{-1.2, -3, 0.6}, Verdict: ABEquivalent}, abSpeed, "equivalent within ±5% (-1.2% [-3.0, +0.6])"},
		{ABResult{Percent: Estimate{-1, -9.1, 7.6}, Verdict: ABNoDifference}, abSpeed, "no difference shown (-1.0% [-9.1, +7.6]); +18% is ruled out"},
		{ABResult{Percent: Estimate{4, -9.1, 19.6}, Verdict: ABNoDifference}, abSpeed, "no difference shown (+4.0% [-9.1, +19.6]); +18% is not ruled out"},
		{ABResult{HalfWidth: 12, Verdict: ABTooWide}, abSpeed, "too wide (±12.0%) for a verdict"},
		{ABResult{Verdict: ABTooFew}, abSpeed, "too few runs"},
	} {
		if got := tc.res.Sentence(r, tc.words); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.res, got, tc.want)
		}
	}
	noRef := r
	noRef.Reference = 0
	if got := (ABResult{Percent: Estimate{-1, -9.1, 7.6}, Verdict: ABNoDifference}).Sentence(noRef, abSpeed); got != "no difference shown (-1.0% [-9.1, +7.6])" {
		t.Errorf("no reference: %q", got)
	}
}

func TestABHolm(t *testing.T) {
	// The textbook case: P 0.01, 0.04, 0.03, 0.005 at 0.05. Sorted, 0.005
	// <= 0.05/4 and 0.01 <= 0.05/3 are rejected; 0.03 > 0.05/2 stops the
	// rule, so 0.03 and 0.04 are not. A result without an interval is no
	// part of the family.
	nan := math.NaN()
	rs := []ABResult{
		{P: 0.01, Percent: Estimate{10, 2, 18}, Verdict: ABFaster, Held: true},
		{P: 0.04, Percent: Estimate{3, 0.1, 4.9}, Verdict: ABFaster, Held: true},
		{P: 0.03, Percent: Estimate{-6, -11, -0.5}, Verdict: ABSlower, Held: true},
		{P: 0.005, Percent: Estimate{-8, -12, -4}, Verdict: ABSlower, Held: true},
		{P: nan, Verdict: ABTooFew, Held: true},
	}
	got := ABHolm(rs, DefaultABRule)
	if want := 0.05/4 + 0.05/3 + 0.05/2; math.Abs(got-want) > 1e-12 {
		t.Errorf("expected false verdicts %v, want %v", got, want)
	}
	for i, want := range []struct {
		verdict string
		held    bool
	}{{ABFaster, true}, {ABEquivalent, false}, {ABNoDifference, false}, {ABSlower, true}, {ABTooFew, true}} {
		if rs[i].Verdict != want.verdict || rs[i].Held != want.held {
			t.Errorf("P %v: %q held %v, want %q held %v", rs[i].P, rs[i].Verdict, rs[i].Held, want.verdict, want.held)
		}
	}
	// One comparison: Holm is the test itself.
	one := []ABResult{ABInterval(steinRuns(0.05, 0.02), DefaultABRule, abSpeed)}
	v := one[0].Verdict
	if e := ABHolm(one, DefaultABRule); e != 0.05 || one[0].Verdict != v || !one[0].Held || v != ABFaster {
		t.Errorf("one comparison: %+v (was %q), %v", one[0], v, e)
	}
}
