package matrix

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tapfwd/tapfwd/bench/report"
)

// ErrInterrupted is returned (wrapped) when ctx ends mid-run.
var ErrInterrupted = errors.New("bench interrupted")

// Interrupted is the error of a run whose ctx ended.
func Interrupted(ctx context.Context) error {
	return fmt.Errorf("%w: %v", ErrInterrupted, context.Cause(ctx))
}

// Record is one run of one configuration on one row (a workload, a point):
// the experiment's sample S, or Err when the run gave none.
type Record[S any] struct {
	Config, Row string
	Rep         int
	Err         string
	Sample      S
}

// Plan is an experiment's matrix.
type Plan[S any] struct {
	// Configs in report order; Run marks the ones it gives up on as
	// skipped, with the reason.
	Configs []report.Config
	// Rows every visit runs, in order.
	Rows []string
	// Reps is the number of repetitions; with More set, the first stage:
	// these always run, and More decides on the rest.
	Reps int
	// More, when set, is asked after each repetition from Reps on how
	// many more repetitions the records so far still need; 0 ends the
	// run.
	More func(recs []Record[S]) int
	// Budget, when positive, bounds a run with More: no repetition past
	// Reps starts that would end after Budget from the start, at the mean
	// time of a repetition so far.
	Budget time.Duration
	// Visit runs the rows on a fresh bed for c in repetition rep. It
	// returns the records made; the error is a set-up failure (bed,
	// forwarder) or the forwarder dying, after which the remaining rows
	// are not run.
	Visit func(ctx context.Context, c *report.Config, rep int) ([]Record[S], error)
	Meter *Meter
	Log   *slog.Logger
	// now is the clock Budget is kept by; nil is time.Now.
	now func() time.Time
}

// MaxReps is the most repetitions a run makes, however many More asks
// for.
const MaxReps = 1000

// Why a run ended (Ending.Stopped).
const (
	StopReps   = "reps"   // the Reps repetitions asked for ran (no More)
	StopTarget = "target" // More asked for no more
	StopBudget = "budget" // the next repetition would have ended past Budget
	StopMax    = "max"    // MaxReps ran
)

// Ending is how a run ended: the repetitions it made and why it made no
// more.
type Ending struct {
	Reps    int
	Stopped string
}

// Run visits every configuration not skipped in interleaved repetitions:
// Reps of them, then, with More set, as many more as More asks for within
// Budget. Each repetition visits the configurations in turn, starting one
// further along each time (A B C, B C A, ...), so slow drifts of a shared
// machine spread over all of them. A visit that fails before its first
// record is tried once more (a bed or forwarder that did not come up on a
// loaded machine). A configuration whose first visit still fails is
// skipped with the reason; a later failed visit records the rows it did
// not run as failed. When ctx ends, Run returns an error wrapping
// ErrInterrupted.
func Run[S any](ctx context.Context, p Plan[S]) ([]Record[S], Ending, error) {
	now := p.now
	if now == nil {
		now = time.Now
	}
	start := now()
	var out []Record[S]
	reps, end := p.Reps, Ending{Stopped: StopReps}
	for rep := 1; rep <= reps; rep++ {
		var err error
		if out, err = p.repetition(ctx, rep, reps, out); err != nil {
			return nil, Ending{}, err
		}
		end.Reps = rep
		if p.More == nil || rep < p.Reps {
			continue
		}
		more := min(p.More(out), MaxReps-rep)
		per := now().Sub(start) / time.Duration(rep)
		switch {
		case more <= 0 && rep == MaxReps:
			end.Stopped = StopMax
		case more <= 0:
			end.Stopped = StopTarget
		case p.Budget > 0 && time.Duration(rep+1)*per > p.Budget:
			end.Stopped = StopBudget
		default:
			next := rep + more
			if p.Budget > 0 && per > 0 {
				next = min(next, int(p.Budget/per))
			}
			p.Meter.plan(next, Active(p.Configs)*len(p.Rows))
			reps = next
			continue
		}
		break
	}
	return out, end, nil
}

// repetition visits every configuration not skipped once, the rep-th of
// reps planned, and returns out with the records added.
func (p *Plan[S]) repetition(ctx context.Context, rep, reps int, out []Record[S]) ([]Record[S], error) {
	for i := range p.Configs {
		c := &p.Configs[(i+rep-1)%len(p.Configs)]
		if c.Skipped != "" {
			continue
		}
		recs, err := p.Visit(ctx, c, rep)
		if err != nil && len(recs) == 0 && ctx.Err() == nil {
			p.Log.Warn("set-up failed, trying once more", "config", c.Name, "rep", rep, "err", err)
			recs, err = p.Visit(ctx, c, rep)
		}
		out = append(out, recs...)
		if ctx.Err() != nil {
			return nil, Interrupted(ctx)
		}
		if err == nil {
			continue
		}
		if !hasValues(out, c.Name) {
			c.Skipped = err.Error()
			p.Meter.total -= (reps-rep+1)*len(p.Rows) - len(recs)
			p.Log.Warn("skipping configuration", "config", c.Name, "reason", c.Skipped)
			continue
		}
		p.Meter.total -= len(p.Rows) - len(recs)
		p.Log.Warn("repetition failed", "config", c.Name, "rep", rep, "err", err)
		for _, row := range p.Rows[len(recs):] {
			out = append(out, Record[S]{Config: c.Name, Row: row, Rep: rep, Err: err.Error()})
		}
	}
	return out, nil
}

func hasValues[S any](recs []Record[S], config string) bool {
	for _, r := range recs {
		if r.Config == config && r.Err == "" {
			return true
		}
	}
	return false
}

// Active counts the configurations not skipped.
func Active(cs []report.Config) int {
	n := 0
	for _, c := range cs {
		if c.Skipped == "" {
			n++
		}
	}
	return n
}
