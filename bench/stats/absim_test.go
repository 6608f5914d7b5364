package stats

import (
	"fmt"
	"math"
	"testing"
)

// abNoise is the noise of a simulated A/B run, modelled on what 100 ms
// windows of tapfwd on a shared 2-vCPU VM show.
type abNoise struct {
	name   string
	sigma  float64 // log-sd of a window's rate
	rho    float64 // lag-1 correlation of the windows' log rates (AR(1))
	level  float64 // log-sd of a run's level against another's
	drift  float64 // amplitude of the slow drift across a run (log)
	stalls float64 // mean stalls per run: 1 to 3 s at 5% of the rate
}

var (
	abQuiet  = abNoise{name: "quiet", sigma: 0.20, rho: 0.13, level: 0.05, drift: 0.05}
	abLoaded = abNoise{name: "loaded", sigma: 0.77, rho: 0.62, level: 0.28, drift: 0.3}
)

func (n abNoise) withStalls() abNoise {
	n.name += ", stalls"
	n.stalls = 0.7
	return n
}

// abSim draws A/B runs: arm B's rate is exp(effect) times A's, the
// effect of each run drawn around delta with sd tau. Its generator is a
// splitmix64 held by value, so that under the race detector (which
// checks every access to memory shared beyond a function) thousands of
// experiments stay quick.
type abSim struct {
	noise      abNoise
	delta, tau float64
	delay      float64 // seconds each of B's 64 B frames takes beyond A's
	rng        splitmix
	seed       uint64     // ABSchedule's seed of the last run
	ws         []ABWindow // the last run's windows
	switched   []int      // the windows that follow a switch of arm
	carry      []float64  // their bin 0's bytes under carry-over
}

func newABSim(noise abNoise, delta, tau float64, seed uint64) *abSim {
	return &abSim{noise: noise, delta: delta, tau: tau, rng: newSplitmix(seed), seed: seed << 32}
}

const abBytesPerSecond = 32e6 // 64 B frames at 500,000 a second

// binLen is the bins' nominal length in seconds; the last overruns by up
// to 4 ms.
var binLen = [ABBins]float64{0.02, 0.02, 0.06}

// run draws one run of 80 to 100 windows without carry-over into s.ws,
// and what bin 0 of each window after a switch delivers with it (at the
// previous arm's rate) into s.carry; withCarry swaps those in.
func (s *abSim) run() {
	r, nz := s.rng, s.noise
	n := 80 + int(r.next()%21)
	s.seed++
	arms := ABSchedule(s.seed, n)
	gain := [2]float64{1, math.Exp(s.delta + s.tau*r.norm())}
	level := nz.level * r.norm()
	// The drift: a sine of period 2 to 8 s, turned a window at a time,
	// and a slope.
	step := 2 * math.Pi * 0.1 / (2 + 6*r.float())
	phase := 2 * math.Pi * r.float()
	sin, cos, sinStep, cosStep := math.Sin(phase), math.Cos(phase), math.Sin(step), math.Cos(step)
	slope := nz.drift * r.norm() / 10
	var stalls [][2]float64
	for range r.poisson(nz.stalls) {
		at := 10 * r.float()
		stalls = append(stalls, [2]float64{at, at + 1 + 2*r.float()})
	}
	s.ws, s.switched, s.carry = s.ws[:0], s.switched[:0], s.carry[:0]
	e := nz.sigma * r.norm()
	innov := nz.sigma * math.Sqrt(1-nz.rho*nz.rho)
	t := 0.0
	for i, arm := range arms {
		if i > 0 {
			e = nz.rho*e + innov*r.norm()
		}
		drift := nz.drift*sin + slope*(t-5)
		sin, cos = sin*cosStep+cos*sinStep, cos*cosStep-sin*sinStep
		rate := abBytesPerSecond * math.Exp(level+drift+e)
		w := ABWindow{Arm: arm}
		for b := range ABBins {
			sec := binLen[b]
			if b == ABBins-1 {
				sec += 0.004 * r.float()
			}
			bytes := s.armRate(rate, gain, arm) * sec * stalled(stalls, t, sec)
			w.Bins[b] = ABBin{Seconds: sec, Bytes: bytes, Frames: bytes / 64, CPU: 0.8 * sec}
			if b == 0 && i > 0 && arms[i-1] != arm {
				s.switched = append(s.switched, i)
				s.carry = append(s.carry, s.armRate(rate, gain, arms[i-1])*sec*stalled(stalls, t, sec))
			}
			t += sec
		}
		s.ws = append(s.ws, w)
	}
	s.rng = r
}

// armRate is an arm's rate in bytes a second when A's is rate: gain[arm]
// times it, and for B with a delay per frame, 64 B frames each that much
// slower.
func (s *abSim) armRate(rate float64, gain [2]float64, arm int) float64 {
	rate *= gain[arm]
	if arm == 1 && s.delay > 0 {
		rate = 64 / (64/rate + s.delay)
	}
	return rate
}

// withCarry swaps bin 0's bytes of the windows after a switch with what
// they deliver under carry-over (or back).
func (s *abSim) withCarry() {
	for j, i := range s.switched {
		b := &s.ws[i].Bins[0]
		b.Bytes, s.carry[j] = s.carry[j], b.Bytes
		b.Frames = b.Bytes / 64
	}
}

// stalled is the share of the normal rate a bin from t lasting sec gets:
// 5% while a stall covers it.
func stalled(stalls [][2]float64, t, sec float64) float64 {
	f := 1.0
	for _, s := range stalls {
		if o := min(t+sec, s[1]) - max(t, s[0]); o > 0 {
			f -= 0.95 * o / sec
		}
	}
	return max(f, 0.05)
}

// splitmix is Steele, Lea and Flood's splitmix64 generator, with the
// second normal of a Box-Muller pair kept for the next draw.
type splitmix struct {
	state uint64
	spare float64
	has   bool
}

func newSplitmix(seed uint64) splitmix { return splitmix{state: seed} }

func (r *splitmix) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// float is uniform on [0, 1).
func (r *splitmix) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// norm is a standard normal draw (Box-Muller).
func (r *splitmix) norm() float64 {
	if r.has {
		r.has = false
		return r.spare
	}
	m := math.Sqrt(-2 * math.Log(1-r.float()))
	s, c := math.Sincos(2 * math.Pi * r.float())
	r.spare, r.has = m*s, true
	return m * c
}

func (r *splitmix) poisson(mean float64) int {
	n, p, l := 0, r.float(), math.Exp(-mean)
	for p > l {
		n++
		p *= r.float()
	}
	return n
}

// abVariant is one reading of a simulated run: with or without
// carry-over from the previous arm, and the guard.
type abVariant struct {
	carry bool
	guard int
}

func (v abVariant) String() string {
	c := "no carry-over"
	if v.carry {
		c = "carry-over"
	}
	return fmt.Sprintf("guard %v, %s", ABGuards[v.guard], c)
}

// abOutcome tallies a case's experiments for one variant.
type abOutcome struct {
	verdicts      map[string]int
	hits, runs, n int
	percent       float64 // the estimates' sum
}

// experiments runs trials A/B experiments as the bench makes them: the
// first stage's runs, then as many as ABRunsNeeded asks for (of the
// variant that asks most), at most budget; each variant's interval is
// ABInterval over its estimates, which takes the runs its own rule
// asked for. The interval holds the truth when it holds delta (the mean
// effect, as a percent).
func (s *abSim) experiments(trials, budget int, vs []abVariant, w ABWords) []abOutcome {
	out := make([]abOutcome, len(vs))
	for i := range out {
		out[i].verdicts = map[string]int{}
	}
	d := make([][]float64, len(vs))
	truth := 100 * math.Expm1(s.delta)
	for range trials {
		for i := range d {
			d[i] = d[i][:0]
		}
		need := DefaultABRule.Stage1
		for runs := 0; runs < min(need, budget); runs++ {
			s.readRun(vs, d)
			if runs+1 == DefaultABRule.Stage1 {
				for i := range d {
					need = max(need, ABRunsNeeded(d[i], DefaultABRule))
				}
			}
		}
		for i := range vs {
			res := ABInterval(d[i], DefaultABRule, w)
			if res.Percent.Low <= truth && truth <= res.Percent.High {
				out[i].hits++
			}
			out[i].verdicts[res.Verdict]++
			out[i].runs += res.Runs
			out[i].percent += res.Percent.Median
			out[i].n++
		}
	}
	return out
}

// readRun draws a run and appends its effect under each variant to d.
func (s *abSim) readRun(vs []abVariant, d [][]float64) {
	s.run()
	for pass := range 2 {
		if pass == 1 {
			s.withCarry()
		}
		for i, v := range vs {
			if v.carry == (pass == 1) {
				e, ok := RunEffect(s.ws, v.guard)
				if !ok {
					e = math.NaN()
				}
				d[i] = append(d[i], e)
			}
		}
	}
}

func (o abOutcome) coverage() float64 { return float64(o.hits) / float64(o.n) }

func (o abOutcome) share(verdict string) float64 {
	return float64(o.verdicts[verdict]) / float64(o.n)
}

var abSpeed = ABWords{ABFaster, ABSlower}

// abTrials is the experiments each simulated case runs: 2,000, or 250
// under the race detector and -short. The race detector slows the
// simulation some fifteen times (every load of a window is checked), and
// there it is the code's races that are checked, not its figures.
func abTrials() int {
	if raceEnabled || testing.Short() {
		return 250
	}
	return 2000
}

// abBand is the range the coverage of a 95% interval over n experiments
// must fall in: 95% +- 3 standard errors, and never narrower than 93% to
// 97% (the band at 2,000).
func abBand(n int) (lo, hi float64) {
	w := max(0.02, 3*math.Sqrt(0.95*0.05/float64(n)))
	return 0.95 - w, 0.95 + w
}

// The noises of the simulated cases.
var abNoises = []abNoise{abQuiet, abQuiet.withStalls(), abLoaded, abLoaded.withStalls()}

// TestABCoverage checks ABInterval's coverage of the true mean effect
// (+10%, varying between runs with sd 0.03) on simulated experiments of
// at most 10 runs, 2,000 of them a case (fixed seeds: the same figures
// every time, with a standard error of 0.5 points): quiet and loaded,
// with and without stalls, it must hold 93% to 97% with a 20 ms guard
// against carry-over, and with no guard where there is no carry-over
// (measured: 94.4% to 94.9%). Logged, and checked to fall short in quiet
// runs: no guard with carry-over. The first 20 ms after each switch (2.5
// windows in 4 follow one) then run at the other arm's rate, which
// shrinks the effect by about a tenth; quiet runs narrow the interval
// enough for that bias to bring coverage down to 79% to 82%, while
// loaded runs' wide intervals hide it (93% to 94%), which is no reason
// to trust them unguarded.
func TestABCoverage(t *testing.T) {
	vs := []abVariant{{true, 1}, {false, 0}, {true, 0}}
	for i, nz := range abNoises {
		t.Run(nz.name, func(t *testing.T) {
			t.Parallel()
			s := newABSim(nz, math.Log(1.1), 0.03, uint64(i+1))
			out := s.experiments(abTrials(), 10, vs, abSpeed)
			for j, o := range out {
				t.Logf("%-15s %-28v coverage %.3f, %.1f runs, %v", nz.name, vs[j], o.coverage(), o.meanRuns(), o.verdicts)
			}
			for j, o := range out[:2] {
				if lo, hi := abBand(o.n); o.coverage() < lo || o.coverage() > hi {
					t.Errorf("%v: coverage %.3f, want %.3f to %.3f", vs[j], o.coverage(), lo, hi)
				}
			}
			if c := out[2].coverage(); nz.sigma < 0.5 && c > 0.9 {
				t.Errorf("%s, carry-over without a guard: coverage %.3f; the carry-over's bias should show", nz.name, c)
			}
		})
	}
}

// TestABEarly checks that a clear difference (+20%, quiet runs) is found
// by the first stage: ABInterval over its runs says faster in at least
// 95% of 2,000 experiments, and never slower. With a first stage of 3
// runs it did in 59% only: t(2) = 4.30 and a spread on 2 degrees of
// freedom leave the interval wider than MaxHalfWidth 4 times in 10 (and
// even with no width limit 5.4% of them across 0); 5 runs (t(4) = 2.78)
// did in 98.7%, and cut the runs Stein's rule asks for.
func TestABEarly(t *testing.T) {
	t.Parallel()
	s := newABSim(abQuiet, math.Log(1.2), 0, 21)
	o := s.experiments(abTrials(), DefaultABRule.Stage1, []abVariant{{true, 1}}, abSpeed)[0]
	t.Logf("+20%%, quiet, first stage of %d runs: %v", DefaultABRule.Stage1, o.verdicts)
	if f := o.share(ABFaster); f < 0.95 || o.verdicts[ABSlower] > 0 {
		t.Errorf("+20%%, quiet: faster in %.3f after the first stage, %d slower; want at least 0.95 and none", f, o.verdicts[ABSlower])
	}
}

// TestABAA checks A against A (no effect at all): the interval covers 0
// in 93% to 97% of 2,000 experiments, quiet with the bench's budget of
// 30 runs (Stein's rule stops at about 15) and loaded with 10; quiet
// experiments mostly (at least 80%) end equivalent within +-5%.
func TestABAA(t *testing.T) {
	for i, tc := range []struct {
		noise  abNoise
		budget int
	}{{abQuiet, 30}, {abLoaded.withStalls(), 10}} {
		t.Run(tc.noise.name, func(t *testing.T) {
			t.Parallel()
			o := newABSim(tc.noise, 0, 0, uint64(31+i)).experiments(abTrials(), tc.budget, []abVariant{{true, 1}}, abSpeed)[0]
			t.Logf("A/A, %s, budget %d: coverage %.3f, %.1f runs, %v", tc.noise.name, tc.budget, o.coverage(), o.meanRuns(), o.verdicts)
			if lo, hi := abBand(o.n); o.coverage() < lo || o.coverage() > hi {
				t.Errorf("A/A: coverage of 0 %.3f, want %.3f to %.3f", o.coverage(), lo, hi)
			}
			if e := o.share(ABEquivalent); tc.noise.sigma < 0.5 && e < 0.8 {
				t.Errorf("A/A, quiet: equivalent in %.3f, want at least 0.8", e)
			}
		})
	}
}

// TestABPositiveControl checks the bench's positive control: B delays
// each 64 B frame by 10 us, at 2 us a frame without it a slowdown to
// about a sixth (-83%). In quiet runs with stalls, with the bench's
// budget of 30 runs, every one of 200 experiments (25 under the race
// detector) must say slower, and
// their estimates average -80% to -86%. (With 10 runs, 1 in 5 was too
// wide: the delay's share of a frame's time moves with A's rate, so
// the effect varies between runs, and a verdict needs +-10% of it.)
func TestABPositiveControl(t *testing.T) {
	t.Parallel()
	s := newABSim(abQuiet.withStalls(), 0, 0, 41)
	s.delay = 10e-6
	o := s.experiments(abTrials()/10, 30, []abVariant{{true, 1}}, abSpeed)[0]
	m := o.percent / float64(o.n)
	t.Logf("10 us a frame: %.1f%% on average, %.1f runs, %v", m, o.meanRuns(), o.verdicts)
	if o.share(ABSlower) < 1 || m < -86 || m > -80 {
		t.Errorf("10 us a frame: %v, %.1f%% on average; want all slower by about 83%%", o.verdicts, m)
	}
}

func (o abOutcome) meanRuns() float64 { return float64(o.runs) / float64(o.n) }
