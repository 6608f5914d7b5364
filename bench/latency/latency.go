package latency

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/rr"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/napi"
)

// Options configure Run.
type Options struct {
	matrix.Common // Configs nil means DefaultConfigs
	// Points to run on each configuration's bed; nil means ReferencePoints.
	Points []Point
	// Duration of each measured run; 0 means 2 s.
	Duration time.Duration
	// Warmup before each run, not counted; 0 means 200 ms.
	Warmup time.Duration
	// Payload is the UDP payload in bytes; 0 means rr.DefaultPayload.
	Payload int
	// Calibrate names the configuration on which each point's rate is
	// checked before the matrix runs (and capped where it cannot be
	// sustained); empty runs every point at its asked rate.
	Calibrate string
}

// SenderFIFO is the SCHED_FIFO priority of the request sender's thread
// (rr.Options.SenderFIFO): the reference ran its client with chrt -f 50.
const SenderFIFO = 50

type record = matrix.Record[Sample]

func (o *Options) defaults() error {
	o.Defaults(func() []report.Config {
		cs, _ := report.SelectConfigs(Configs(), DefaultConfigs)
		return cs
	})
	if o.Points == nil {
		o.Points = ReferencePoints
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if o.Warmup <= 0 {
		o.Warmup = 200 * time.Millisecond
	}
	if o.Payload <= 0 {
		o.Payload = rr.DefaultPayload
	}
	if len(o.Configs) == 0 || len(o.Points) == 0 {
		return errors.New("latency: nothing to measure: no configuration or no point")
	}
	return nil
}

// Run measures every configuration at every point, in the interleaved
// repetitions of matrix.Run: each visit builds a fresh bed, runs the
// configuration's set-up, starts the forwarder if any and runs every point
// on it. Before that, when Calibrate names a configuration, each point's
// rate is probed on it and capped where the machine cannot sustain it, so
// every configuration runs the same rates.
//
// A configuration the kernel cannot do is skipped with the reason before
// anything runs; the rest follows matrix.Run's rules. When ctx ends,
// everything started is stopped and removed, and the error wraps
// matrix.ErrInterrupted.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	r := &Report{
		Header: report.Header{Schema: Schema, Started: time.Now().UTC(), Host: matrix.ProbeHost(o.TUNFeatures, false)},
		Settings: Settings{Method: report.NewMethod(o.Reps, o.Bootstrap), RunSeconds: o.Duration.Seconds(),
			WarmupSeconds: o.Warmup.Seconds(), PayloadBytes: o.Payload, SenderFIFO: SenderFIFO},
		Configs: append([]report.Config(nil), o.Configs...),
		Points:  append([]Point(nil), o.Points...),
	}
	checkConfigs(r.Configs, o.TUNFeatures)
	var why []string
	for _, c := range r.Configs {
		if c.Skipped != "" {
			o.Log.Info("skipping configuration", "config", c.Name, "reason", c.Skipped)
			why = append(why, c.Name+": "+c.Skipped)
		}
	}
	if matrix.Active(r.Configs) == 0 {
		return nil, fmt.Errorf("latency: every configuration was skipped (%s)", strings.Join(why, "; "))
	}
	guess := o.Duration + o.Warmup + 700*time.Millisecond // a run, plus its share of a bed
	m := matrix.NewMeter(o.Progress, matrix.Active(r.Configs)*o.Reps*len(r.Points), o.Reps, guess)
	if o.Calibrate != "" {
		if err := r.calibrate(ctx, o, m); err != nil {
			return nil, err
		}
	}
	rows := make([]string, len(r.Points))
	for i, p := range r.Points {
		rows[i] = p.Name
	}
	var err error
	r.runs, _, err = matrix.Run(ctx, matrix.Plan[Sample]{
		Configs: r.Configs, Rows: rows, Reps: o.Reps, Meter: m, Log: o.Log,
		Visit: func(ctx context.Context, c *report.Config, rep int) ([]record, error) {
			return visit(ctx, o, c, r.Points, rep, m)
		},
	})
	if err != nil {
		return nil, err
	}
	r.Finished = time.Now().UTC()
	r.notes()
	r.analyze(o.Bootstrap)
	return r, nil
}

// checkConfigs marks what cannot run here as skipped: TAP features the
// kernel lacks, NIC NAPI modes its netdev family lacks, and ethtool
// missing for a set-up.
func checkConfigs(cs []report.Config, tunFeatures uint32) {
	var napiFeat *napi.Features
	var napiErr error
	for i := range cs {
		c := &cs[i]
		if c.Skipped != "" || !matrix.CheckKernel(c, tunFeatures) {
			continue
		}
		if mode := c.Run.NICNAPIThreaded; mode != napi.ThreadedDisabled {
			if napiFeat == nil && napiErr == nil {
				napiFeat, napiErr = napiFeatures()
			}
			if napiErr != nil {
				c.Skipped = napiErr.Error()
				continue
			}
			if err := napiSupports(*napiFeat, mode); err != nil {
				c.Skipped = err.Error()
				continue
			}
		}
		for _, s := range c.Setup {
			if _, err := exec.LookPath(s[0]); err != nil {
				c.Skipped = fmt.Sprintf("%s not found (its set-up runs %s): install it, e.g. apt-get install %s", s[0], strings.Join(s, " "), s[0])
				break
			}
		}
	}
}

func napiFeatures() (*napi.Features, error) {
	c, err := napi.Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	f := c.Features()
	return &f, nil
}

// napiSupports says whether the kernel can set NAPI instances to mode, in
// the napi package's words when it cannot.
func napiSupports(f napi.Features, mode napi.Threaded) error {
	kernel, _ := matrix.Uname()
	switch {
	case !f.NAPIGet || !f.NAPISet || !f.Threaded:
		return &napi.FeatureError{Feature: "per-NAPI threaded polling (napi-set threaded)", Since: "6.17", Kernel: kernel}
	case mode == napi.ThreadedBusyPoll && !f.BusyPoll:
		return &napi.FeatureError{Feature: "threaded NAPI busy polling (threaded busy-poll)", Since: "6.19", Kernel: kernel}
	}
	return nil
}

// visit runs every point on a fresh bed for c.
func visit(ctx context.Context, o Options, c *report.Config, points []Point, rep int, m *matrix.Meter) ([]record, error) {
	var runs []record
	err := o.Lab.Visit(ctx, c, rep, func(bed *testbed.Bed, fws matrix.Forwarders) error {
		for _, p := range points {
			if err := fws.Alive(); err != nil {
				return err
			}
			m.Step(c.Name, rep, p.Name)
			res, err := rr.RoundTrips(ctx, bed, rrOptions(o, p.Rate, p.Delay, o.Duration))
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.Done()
			run := record{Config: c.Name, Row: p.Name, Rep: rep}
			switch {
			case err != nil:
				run.Err = matrix.ErrLine(err)
			case res.Received == 0:
				run.Err = fmt.Sprintf("no reply to %d requests", res.Sent)
			default:
				run.Sample = sampleOf(rep, res)
			}
			if run.Err != "" {
				o.Log.Warn("run failed", "config", c.Name, "rep", rep, "point", p.Name, "err", run.Err)
			}
			runs = append(runs, run)
			if err != nil || res.Rate() < sustainRate*float64(p.Rate) || res.LossPercent() > sustainLoss {
				// Overloaded: let the queues drain before the next point.
				if err := settle(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return runs, err
}

func rrOptions(o Options, rate int, delay, length time.Duration) rr.Options {
	return rr.Options{Rate: float64(rate), Delay: delay, Duration: length,
		Warmup: o.Warmup, Payload: o.Payload, Drain: drainTime, SenderFIFO: SenderFIFO}
}

func sampleOf(rep int, res *rr.Result) Sample {
	q := func(x float64) float64 { return float64(res.RTT.Quantile(x)) }
	return Sample{
		Rep: rep, Sent: res.Sent, Arrived: res.Arrived, Received: res.Received, Reordered: res.Reordered,
		Missed: res.Missed, SendErrors: res.SendErrors, Rate: res.Rate(), LossPercent: res.LossPercent(),
		RTT: Percentiles{Min: float64(res.RTT.Min()), P5: q(0.05), P50: q(0.5), P95: q(0.95), P99: q(0.99),
			P999: q(0.999), Max: float64(res.RTT.Max())},
		SendLagP50: float64(res.SendLag.Quantile(0.5)), SendLagP99: float64(res.SendLag.Quantile(0.99)),
		SenderFIFO: res.SenderFIFO, SenderCPU: res.SenderCPU,
	}
}
