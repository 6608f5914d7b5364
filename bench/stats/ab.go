package stats

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// An A/B run compares two arms inside one run of the forwarder: it
// switches between them every window (100 ms) in blocks of four, ABBA or
// BAAB, so that what drifts over seconds (the host's load, a neighbour's
// burst, the CPU's clock) falls on both arms alike and cancels in their
// ratio. Every window's counters are split into ABBins time bins; the
// first bins of a window carry over the previous arm's state (queues
// still draining, a NAPI instance still scheduled), so a guard leaves
// them out. Each run gives one estimate of B against A, and the runs of
// an experiment give the interval (ABInterval). docs/design/ab-method.md
// explains the method and gives the simulation's figures.

// ABBins is the number of time bins each window's counters are split
// into.
const ABBins = 3

// ABGuards are the guards a window's bins allow: guard g leaves out bins
// [0, g), the first ABGuards[g] of every window, where what the previous
// arm left behind (frames queued under it, a NAPI poll it scheduled) is
// still delivered under the new one.
var ABGuards = [ABBins]time.Duration{0, 20 * time.Millisecond, 40 * time.Millisecond}

// ABBin is one time bin of a window: the seconds it lasted, the bytes
// and frames delivered in it, and the CPU seconds the run's own threads
// spent in it.
type ABBin struct{ Seconds, Bytes, Frames, CPU float64 }

// ABWindow is one window of an A/B run: the arm it ran (0 is A, 1 is B)
// and its counters in bins.
type ABWindow struct {
	Arm  int
	Bins [ABBins]ABBin
}

// ABSum is one arm's counters summed over a run's windows: how many
// windows, and their bins' seconds, bytes, frames and CPU seconds.
type ABSum struct {
	Windows                     int
	Seconds, Bytes, Frames, CPU float64
}

// ABSums sums ws's bins [guard, ABBins) by arm: a for arm 0, b for arm 1.
// Windows of another arm are left out. Summing first and dividing once
// weighs each window by its time, so a window stalled at a twentieth of
// the rate counts for what it delivered, not as a log ratio of -3 (the
// mean of per-window log ratios is at the mercy of such stalls).
func ABSums(ws []ABWindow, guard int) (a, b ABSum) {
	guard = max(0, min(guard, ABBins))
	for _, w := range ws {
		var s *ABSum
		switch w.Arm {
		case 0:
			s = &a
		case 1:
			s = &b
		default:
			continue
		}
		s.Windows++
		for _, bin := range w.Bins[guard:] {
			s.Seconds += bin.Seconds
			s.Bytes += bin.Bytes
			s.Frames += bin.Frames
			s.CPU += bin.CPU
		}
	}
	return a, b
}

// abStream is the PCG stream of ABSchedule: fixed, so that a seed alone
// names a schedule.
const abStream = 0xab5c4ed

// ABSchedule is the arm of each of n windows: blocks of 4, each ABBA or
// BAAB with even odds, drawn from a PCG generator seeded with seed (the
// same seed, the same schedule). Within a block the arms' times are
// balanced about its middle, so a drift that is linear over the block
// cancels; the random choice keeps a periodic disturbance from locking
// onto one arm. A last partial block is the start of a full one.
func ABSchedule(seed uint64, n int) []int {
	r := rand.New(rand.NewPCG(seed, abStream))
	arms := make([]int, 0, max(n, 0)+3)
	for len(arms) < n {
		if r.IntN(2) == 0 {
			arms = append(arms, 0, 1, 1, 0)
		} else {
			arms = append(arms, 1, 0, 0, 1)
		}
	}
	return arms[:max(n, 0)]
}

// RunEffect is the run's effect of B on throughput, the natural log of
// B's rate over A's, each arm's rate its bytes over its seconds summed
// over its windows' bins from guard on:
//
//	log((sum B.Bytes / sum B.Seconds) / (sum A.Bytes / sum A.Seconds))
//
// False when an arm has no seconds or no bytes.
func RunEffect(ws []ABWindow, guard int) (float64, bool) {
	a, b := ABSums(ws, guard)
	return rateRatio(a, b)
}

// RunCost is the run's effect of B on the CPU cost of a byte, the
// natural log of B's CPU seconds per byte over A's:
//
//	log((sum B.CPU / sum B.Bytes) / (sum A.CPU / sum A.Bytes))
//
// False when an arm has no CPU time or no bytes.
func RunCost(ws []ABWindow, guard int) (float64, bool) {
	a, b := ABSums(ws, guard)
	return costRatio(a, b)
}

// rateRatio is RunEffect of the arms' sums.
func rateRatio(a, b ABSum) (float64, bool) {
	if !(a.Seconds > 0 && a.Bytes > 0 && b.Seconds > 0 && b.Bytes > 0) {
		return 0, false
	}
	return math.Log(b.Bytes/b.Seconds) - math.Log(a.Bytes/a.Seconds), true
}

// costRatio is RunCost of the arms' sums.
func costRatio(a, b ABSum) (float64, bool) {
	if !(a.CPU > 0 && a.Bytes > 0 && b.CPU > 0 && b.Bytes > 0) {
		return 0, false
	}
	return math.Log(b.CPU/b.Bytes) - math.Log(a.CPU/a.Bytes), true
}

// RunJackknife is the delete-one-block jackknife standard error of the
// run's effect (of its cost when cost is true), a block being 4
// consecutive windows (one ABBA or BAAB): with g blocks and the estimate
// e_j of the run without block j,
//
//	sqrt((g-1)/g * sum (e_j - mean e)^2)
//
// It says how much the run's own windows leave its estimate in doubt,
// and so whether a run was noisy; it is a diagnostic only, never the
// interval. Windows within a run are correlated and stalls hit runs
// whole, so it understates how far runs differ; the interval is taken
// over runs (ABInterval). False with fewer than 2 blocks or when leaving
// a block out leaves an arm without an estimate.
func RunJackknife(ws []ABWindow, guard int, cost bool) (float64, bool) {
	est := rateRatio
	if cost {
		est = costRatio
	}
	g := (len(ws) + 3) / 4
	if g < 2 {
		return 0, false
	}
	ta, tb := ABSums(ws, guard)
	e := make([]float64, g)
	var mean float64
	for j := range e {
		ba, bb := ABSums(ws[4*j:min(4*j+4, len(ws))], guard)
		v, ok := est(less(ta, ba), less(tb, bb))
		if !ok {
			return 0, false
		}
		e[j] = v
		mean += v / float64(g)
	}
	var ss float64
	for _, v := range e {
		ss += (v - mean) * (v - mean)
	}
	return math.Sqrt(float64(g-1) / float64(g) * ss), true
}

// less is s without the windows of t (nothing at all when t is all of
// s, rather than what rounding leaves).
func less(s, t ABSum) ABSum {
	if s.Windows <= t.Windows {
		return ABSum{}
	}
	return ABSum{s.Windows - t.Windows, s.Seconds - t.Seconds, s.Bytes - t.Bytes, s.Frames - t.Frames, s.CPU - t.CPU}
}

// ABRule says how many runs an A/B experiment makes and when its
// interval gets a verdict. A zero MinRuns or Stage1 takes
// DefaultABRule's; a zero TargetHalfWidth asks for no more runs than
// those; a zero MaxHalfWidth, Equivalence or Reference sets no limit, no
// equivalence and no reference.
type ABRule struct {
	// MinRuns is the fewest runs that get any verdict: with fewer the
	// interval rests on too few runs for its level to mean much.
	MinRuns int
	// Stage1 is the runs of Stein's first stage, whose spread fixes the
	// interval's width and the runs it needs (ABRunsNeeded).
	Stage1 int
	// TargetHalfWidth, in percent, is the half-width Stein's rule asks
	// for runs enough to reach.
	TargetHalfWidth float64
	// MaxHalfWidth, in percent, is the widest interval that gets a
	// verdict; wider is ABTooWide.
	MaxHalfWidth float64
	// Equivalence, in percent: an interval wholly inside +-Equivalence
	// that does not exclude 0 is ABEquivalent, a difference too small to
	// matter.
	Equivalence float64
	// Reference, in percent, is the effect a reader asks about (the
	// smallest gain the QEMU IFF_NAPI patch reported, +18%): a "no
	// difference shown" says whether its interval rules it out.
	Reference float64
}

// DefaultABRule is the A/B bench's rule: a first stage of 5 runs,
// Stein's rule aiming at +-3%, no verdict wider than +-10%, differences
// within +-5% equivalent, and +18% the effect asked about. A first stage
// of 3 would rest s1 on 2 degrees of freedom (t = 4.30): on simulated
// quiet runs a +20% difference then got its verdict from the first stage
// 6 times in 10 (the interval too wide the rest), against 99 in 100 with
// 5 (t = 2.78), and Stein's rule asked for more runs in all (20 against
// 15 on average with a budget of 30).
var DefaultABRule = ABRule{MinRuns: 3, Stage1: 5, TargetHalfWidth: 3, MaxHalfWidth: 10, Equivalence: 5, Reference: 18}

// The verdicts of an A/B interval. ABFaster and ABSlower are the words of
// a throughput comparison; a cost comparison uses ABDearer and ABCheaper
// (ABWords).
const (
	ABFaster       = "faster"              // the interval lies above 0
	ABSlower       = "slower"              // the interval lies below 0
	ABDearer       = "dearer"              // the interval lies above 0 (cost)
	ABCheaper      = "cheaper"             // the interval lies below 0 (cost)
	ABEquivalent   = "equivalent"          // across 0, wholly inside +-Equivalence
	ABNoDifference = "no difference shown" // across 0, reaching past +-Equivalence
	ABTooWide      = "too wide"            // half-width above MaxHalfWidth
	ABTooFew       = "too few runs"        // fewer runs than MinRuns
)

// ABWords name the verdicts on an interval wholly above 0 (B's figure
// larger than A's) or wholly below.
type ABWords struct{ Above, Below string }

// ABResult is an A/B experiment's interval and verdict.
type ABResult struct {
	// Percent is B against A in percent, 100 * (exp(mean) - 1), with the
	// interval's ends transformed alike.
	Percent Estimate `json:"percent"`
	// HalfWidth is 100 * expm1(t * s1 / sqrt(Runs)), the factor in
	// percent by which each end lies from the estimate.
	HalfWidth float64 `json:"half_width_percent"`
	// Runs is how many runs the interval is over, Stage1 how many of them
	// were the first stage's, Needed how many Stein's rule asked for (-1
	// when the first stage had fewer than 2).
	Runs   int `json:"runs"`
	Stage1 int `json:"stage1_runs"`
	Needed int `json:"runs_needed"`
	// P is the two-sided p-value of a mean effect of 0, from the same t
	// (Stage1 - 1 degrees of freedom, s1) as the interval: below 0.05
	// exactly when the interval excludes 0. NaN without an interval.
	P float64 `json:"p"`
	// Jackknife is the median over the runs of RunJackknife, in percent
	// (100 * expm1 of it), for the report to show beside the interval:
	// a diagnostic of the runs' own noise, set by the caller; 0 when not
	// given.
	Jackknife float64 `json:"jackknife_percent,omitempty"`
	// Verdict is one of the AB verdicts, the words' Above or Below for a
	// difference.
	Verdict string `json:"verdict"`
	// Held is false when ABHolm took a difference back, across a
	// report's comparisons, to no difference (or equivalence); true
	// otherwise.
	Held bool `json:"held"`
}

func (r ABRule) defaults() ABRule {
	if r.MinRuns <= 0 {
		r.MinRuns = DefaultABRule.MinRuns
	}
	if r.Stage1 <= 0 {
		r.Stage1 = DefaultABRule.Stage1
	}
	return r
}

// ABInterval is Stein's two-stage interval of the mean effect over the
// per-run estimates d (RunEffect or RunCost, natural logs), in the order
// the runs were made. The standard deviation s1 of the first r.Stage1
// runs' k estimates fixes how many runs the experiment needs,
//
//	Needed = max(k, MinRuns, ceil((t(k-1) * s1 / log(1 + TargetHalfWidth/100))^2))
//
// and the interval is over the first n = min(Needed, len(d)) runs:
//
//	mean(d[:n]) +- t(k-1) * s1 / sqrt(n)
//
// with t(k-1) the 97.5% quantile of Student's t with k-1 degrees of
// freedom. Because n depends on the first stage's spread alone, its
// coverage is exactly 95% for normal estimates however many runs the
// rule asks for (Stein 1945): an experiment can decide after its first
// stage how long to go on, without the inflation that stopping when an
// interval happens to look narrow brings. The interval is over runs, not
// windows: a run's windows are correlated, and a stall or the host's
// state hits a run whole, so only the spread between runs says how far
// the next run may land (the jackknife within a run is a diagnostic).
// Runs past n (made for another comparison that needed more) are left
// out, as are estimates that are not finite.
//
// The verdict, in order: ABTooFew with fewer than r.MinRuns runs (or
// fewer than 2 in the first stage); ABTooWide with a half-width above
// r.MaxHalfWidth; words.Above when the interval lies wholly above 0,
// words.Below when wholly below (even when it also lies inside
// +-Equivalence: a difference shown is reported as one, however small);
// ABEquivalent when it lies wholly inside +-r.Equivalence; else
// ABNoDifference.
func ABInterval(d []float64, r ABRule, words ABWords) ABResult {
	r = r.defaults()
	d, k := finiteRuns(d, r.Stage1)
	nan := math.NaN()
	if k < 2 {
		return ABResult{Percent: Estimate{nan, nan, nan}, HalfWidth: nan, Runs: len(d), Stage1: k, Needed: -1, P: nan, Verdict: ABTooFew, Held: true}
	}
	st := stein(d, k, r.MinRuns, r.TargetHalfWidth)
	n, m, h := st.N, st.Mean, st.Half
	out := ABResult{
		Percent:   Estimate{100 * math.Expm1(m), 100 * math.Expm1(m-h), 100 * math.Expm1(m+h)},
		HalfWidth: 100 * math.Expm1(h),
		Runs:      n,
		Stage1:    k,
		Needed:    st.Need,
		P:         twoSidedP(m, st.SE, k-1),
		Held:      true,
	}
	switch lo, hi := out.Percent.Low, out.Percent.High; {
	case n < r.MinRuns:
		out.Verdict = ABTooFew
	case r.MaxHalfWidth > 0 && !(out.HalfWidth <= r.MaxHalfWidth):
		out.Verdict = ABTooWide
	case lo > 0:
		out.Verdict = words.Above
	case hi < 0:
		out.Verdict = words.Below
	default:
		out.Verdict = equivalentOr(out, r)
	}
	return out
}

// equivalentOr is the verdict on an interval that does not exclude 0:
// ABEquivalent when it lies wholly inside +-r.Equivalence, else
// ABNoDifference.
func equivalentOr(res ABResult, r ABRule) string {
	if r.Equivalence > 0 && res.Percent.Low >= -r.Equivalence && res.Percent.High <= r.Equivalence {
		return ABEquivalent
	}
	return ABNoDifference
}

// ABRunsNeeded is how many runs ABInterval's rule asks for, from the
// spread of the first r.Stage1 runs of d alone (see ABInterval); -1 when
// fewer than 2 of them are finite, as no number of runs is then known to
// be enough.
func ABRunsNeeded(d []float64, r ABRule) int {
	r = r.defaults()
	d, k := finiteRuns(d, r.Stage1)
	if k < 2 {
		return -1
	}
	return stein(d, k, r.MinRuns, r.TargetHalfWidth).Need
}

// finiteRuns is d without the estimates that are not finite, and how
// many of those left came from the first stage1 runs.
func finiteRuns(d []float64, stage1 int) ([]float64, int) {
	out := make([]float64, 0, len(d))
	k := 0
	for i, v := range d {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		out = append(out, v)
		if i < stage1 {
			k++
		}
	}
	return out, k
}

// twoSidedP is P(|T| >= |m/se|) for Student's T with df degrees of
// freedom, I_x(df/2, 1/2) with x = df/(df+t^2) (twice 1 - tCDF, without
// the rounding of the subtraction): 0 for a mean away from 0 without
// spread, 1 for a mean of 0.
func twoSidedP(m, se float64, df int) float64 {
	switch {
	case m == 0:
		return 1
	case se == 0:
		return 0
	}
	t, n := m/se, float64(df)
	return regIncBeta(n/2, 0.5, n/(n+t*t))
}

// Sentence is the result in words, for a report: one of
//
//	faster by 12.3% [8.1, 16.7]
//	slower by 8.0% [3.9, 12.1]             (how much less, both ends)
//	equivalent within ±5% (-1.2% [-3.0, +0.6])
//	no difference shown (-1.0% [-9.1, +7.6]); +18% is ruled out
//	no difference shown (-1.0% [-9.1, +19.6]); +18% is not ruled out
//	too wide (±12.0%) for a verdict
//	too few runs
//
// with words's Above and Below for faster and slower. A reference lies
// inside an interval that does not rule it out; without one
// (rule.Reference 0) the clause is left off.
func (r ABResult) Sentence(rule ABRule, words ABWords) string {
	p := r.Percent
	switch r.Verdict {
	case ABTooFew:
		return ABTooFew
	case ABTooWide:
		return fmt.Sprintf("%s (±%.1f%%) for a verdict", ABTooWide, r.HalfWidth)
	case words.Above:
		return fmt.Sprintf("%s by %.1f%% [%.1f, %.1f]", r.Verdict, p.Median, p.Low, p.High)
	case words.Below:
		return fmt.Sprintf("%s by %.1f%% [%.1f, %.1f]", r.Verdict, -p.Median, -p.High, -p.Low)
	case ABEquivalent:
		return fmt.Sprintf("%s within ±%g%% (%+.1f%% [%+.1f, %+.1f])", ABEquivalent, rule.Equivalence, p.Median, p.Low, p.High)
	}
	s := fmt.Sprintf("%s (%+.1f%% [%+.1f, %+.1f])", r.Verdict, p.Median, p.Low, p.High)
	if ref := rule.Reference; ref != 0 {
		not := ""
		if p.Low <= ref && ref <= p.High {
			not = "not "
		}
		s += fmt.Sprintf("; %+g%% is %sruled out", ref, not)
	}
	return s
}

// holmLevel is the family-wise level of ABHolm: the chance, across one
// report's comparisons, of any difference claimed where there is none.
const holmLevel = 1 - Level

// ABHolm applies Holm's step-down rule at level 0.05 to one report's
// comparisons, so that the chance of any false difference among them,
// not only in each, stays within 5%: the m results with a p-value are
// taken from the smallest P up, the i-th (from 0) tested at
// 0.05/(m-i), and the first P above its level stops the rule, leaving
// it and every larger one not rejected. A difference (a verdict other
// than ABTooFew, ABTooWide, ABEquivalent and ABNoDifference) whose P is
// not rejected becomes ABEquivalent when its interval lies inside
// +-rule.Equivalence, else ABNoDifference, with Held false; the rest
// keep their verdicts. With one comparison it changes nothing, as P is
// below 0.05 exactly when the interval excludes 0. It returns the sum of
// the levels the hypotheses were tested at, a bound on the expected
// number of false differences if there were none, for the report to
// state.
func ABHolm(rs []ABResult, rule ABRule) (expectedFalse float64) {
	idx := make([]int, 0, len(rs))
	for i, r := range rs {
		if !math.IsNaN(r.P) {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(i, j int) int { return cmp.Compare(rs[i].P, rs[j].P) })
	m := len(idx)
	rejected := 0
	for i, j := range idx {
		level := holmLevel / float64(m-i)
		expectedFalse += level
		if rs[j].P > level {
			break
		}
		rejected++
	}
	for _, j := range idx[rejected:] {
		if isDifference(rs[j].Verdict) {
			rs[j].Verdict = equivalentOr(rs[j], rule)
			rs[j].Held = false
		}
	}
	return expectedFalse
}

// isDifference reports whether verdict claims a difference (the words'
// Above or Below).
func isDifference(verdict string) bool {
	switch verdict {
	case ABTooFew, ABTooWide, ABEquivalent, ABNoDifference:
		return false
	}
	return true
}
