package latency

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/rr"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Calibration: what a probe must show for its rate to stand, and how the
// rate is searched (see calibrate).
const (
	sustainRate = 0.95 // of the asked rate, sent
	sustainLoss = 0.5  // percent, at most
	sustainP50x = 3    // the median round trip, at most this times the unloaded one
	// sustainSenderCPU: the sender thread may use at most this share of a
	// CPU. Beyond it the load generator, not the path, is the limit, and a
	// SCHED_FIFO sender that nearly never sleeps starves its CPU's
	// ksoftirqd, which holds its own requests back: the rate collapses.
	sustainSenderCPU = 0.5
	capHeadroom      = 0.8             // a capped point runs at this share of the highest rate that held
	baselineRate     = 1000            // the unloaded probe: 1K requests/s, no delay
	probeLength      = 1 * time.Second // each probe
	capStep          = 0.8             // going down: this share
	capFloor         = 1000            // never below 1K requests per second
	capTries         = 6               // probes per point at most
	capRound         = 1000            // caps are whole thousands
	drainTime        = 200 * time.Millisecond
	settleTime       = time.Second // after a probe that did not hold
)

// calibrate probes each point's rate on the calibration configuration and
// caps the rates it cannot sustain. A configuration that will not start
// leaves the rates as asked, with a note.
//
// First a probe at baselineRate without delay gives the unloaded median
// round trip. A rate holds when a probe sends at least sustainRate of it,
// loses at most sustainLoss percent, and its median round trip stays within
// sustainP50x times the unloaded one (more means a standing queue: at the
// reference's points the delay fills nearly the whole period, so a receiver
// a little slower than the reference's falls behind for good), and the
// sender thread used at most sustainSenderCPU of a CPU. The tail is not
// judged: on a shared machine one stall of another process moves a 1 s
// probe's 99th percentile. A point whose asked rate does not hold is
// searched (see capPoint).
func (r *Report) calibrate(ctx context.Context, o Options, m *matrix.Meter) error {
	c := report.FindConfig(r.Configs, o.Calibrate)
	if c == nil {
		c = &report.Config{Name: o.Calibrate, Skipped: "not among the configurations run"}
	}
	if c.Skipped != "" {
		r.Notes = append(r.Notes, fmt.Sprintf("Rates not calibrated: %s is skipped (%s); every point ran at its asked rate.", c.Name, c.Skipped))
		return nil
	}
	o.Log.Info("calibrating the rates", "config", c.Name)
	err := o.Lab.Visit(ctx, c, 0, func(bed *testbed.Bed, fws matrix.Forwarders) error {
		pr := &prober{ctx: ctx, o: o, m: m, bed: bed, fws: fws, config: c.Name}
		base, err := pr.probe(point(baselineRate, 0), baselineRate, 1)
		if err != nil {
			return err
		}
		if base.Received == 0 {
			return fmt.Errorf("no reply to %d requests at %s/0us", base.Sent, RateName(baselineRate))
		}
		pr.unloaded = base.RTT.Quantile(0.5)
		r.Settings.CalibratedOn = c.Name
		r.Settings.UnloadedP50 = float64(pr.unloaded)
		o.Log.Info("calibration baseline", "rate", baselineRate, "p50", pr.unloaded)
		for i := range r.Points {
			if err := pr.capPoint(&r.Points[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return matrix.Interrupted(ctx)
		}
		r.Settings.CalibratedOn, r.Settings.UnloadedP50 = "", 0
		r.Notes = append(r.Notes, fmt.Sprintf("Rates not calibrated: %s failed (%v); every point ran at its asked rate.", c.Name, err))
		for i := range r.Points {
			r.Points[i].Rate, r.Points[i].Capped = r.Points[i].AskedRate, ""
		}
	}
	return nil
}

// prober runs calibration probes on one bed.
type prober struct {
	ctx      context.Context
	o        Options
	m        *matrix.Meter
	bed      *testbed.Bed
	fws      matrix.Forwarders
	config   string
	unloaded time.Duration // the median round trip at baselineRate
}

// probe runs p's delay at rate for probeLength; n counts the probes of p.
func (pr *prober) probe(p Point, rate int, n int) (*rr.Result, error) {
	if err := pr.fws.Alive(); err != nil {
		return nil, err
	}
	pr.m.Note(matrix.Progress{Config: "calibrating on " + pr.config,
		Row: fmt.Sprintf("%s at %s (probe %d)", p.Name, RateName(rate), n)})
	return rr.RoundTrips(pr.ctx, pr.bed, rrOptions(pr.o, rate, p.Delay, probeLength))
}

// held says whether a probe of p at rate sustained it.
func (pr *prober) held(p *Point, res *rr.Result, rate int) bool {
	ok := res.Rate() >= sustainRate*float64(rate) && res.LossPercent() <= sustainLoss &&
		res.RTT.Quantile(0.5) <= sustainP50x*pr.unloaded && res.SenderCPU <= sustainSenderCPU
	pr.o.Log.Info("calibration probe", "point", p.Name, "rate", rate, "sent_per_s", int(res.Rate()),
		"loss_percent", res.LossPercent(), "p50", res.RTT.Quantile(0.5), "sender_cpu", res.SenderCPU, "sustained", ok)
	return ok
}

// capPoint probes p at its asked rate and, when that does not hold,
// searches: first capStep of the reply rate its probe got, then down by
// capStep until a rate holds, then up by bisection (geometric) towards the
// lowest rate that failed, until the two are within an eighth, capTries
// probes in all. The point then runs at capHeadroom of the highest rate
// that held, which leaves the configurations slower than the calibration
// one some room, and a noisy probe some margin.
func (pr *prober) capPoint(p *Point) error {
	first, err := pr.probe(*p, p.AskedRate, 1)
	if err != nil {
		return err
	}
	if pr.held(p, first, p.AskedRate) {
		return nil
	}
	if err := settle(pr.ctx); err != nil {
		return err
	}
	lo, hi := 0, p.AskedRate // highest rate that held, lowest that failed
	back := math.Min(float64(first.Sent), float64(first.Received)) / first.Duration.Seconds()
	next := roundRate(capStep * back)
	for n := 2; n <= capTries && next < hi && next > lo; n++ {
		res, err := pr.probe(*p, next, n)
		if err != nil {
			return err
		}
		if pr.held(p, res, next) {
			lo = next
		} else {
			hi = next
			if err := settle(pr.ctx); err != nil {
				return err
			}
		}
		if lo == 0 {
			if next == capFloor {
				break // nothing lower to try
			}
			next = roundRate(capStep * float64(next))
			continue
		}
		if hi-lo <= max(capRound, lo/8) {
			break // close enough
		}
		next = roundRate(math.Sqrt(float64(lo) * float64(hi)))
	}
	if lo == 0 {
		p.Rate = min(next, hi)
		p.Capped = fmt.Sprintf("not sustained here even at %s (%v probes through %s; at %s: %s)",
			RateName(p.Rate), probeLength, pr.config, RateName(p.AskedRate), probeSummary(first))
		return nil
	}
	p.Rate = roundRate(capHeadroom * float64(lo))
	p.Capped = fmt.Sprintf("%s not reachable here: capped at %s, %.0f%% of the %s that held in %v probes through %s (at %s: %s)",
		RateName(p.AskedRate), RateName(p.Rate), 100*capHeadroom, RateName(lo), probeLength, pr.config, RateName(p.AskedRate), probeSummary(first))
	return nil
}

// settle waits settleTime after a probe that overloaded the bed. Queues
// that filled (a CPU's backlog, socket buffers) take a while to drain, and
// meanwhile the next probe's sender can block on its full send buffer and
// send next to nothing: seen here after probes at several times the
// sustainable rate.
func settle(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settleTime):
		return nil
	}
}

// roundRate rounds a rate down to whole capRound, at least capFloor.
func roundRate(v float64) int {
	return max(int(v)/capRound*capRound, capFloor)
}

func probeSummary(res *rr.Result) string {
	if res == nil {
		return "no result"
	}
	return fmt.Sprintf("%s requests/s sent, %.0f%% without reply, p50 %s us", kRate(res.Rate()), res.LossPercent(), report.Num(float64(res.RTT.Quantile(0.5))/1e3))
}
