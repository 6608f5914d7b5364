package matrix

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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
	Reps int
	// Visit runs the rows on a fresh bed for c in repetition rep. It
	// returns the records made; the error is a set-up failure (bed,
	// forwarder) or the forwarder dying, after which the remaining rows
	// are not run.
	Visit func(ctx context.Context, c *report.Config, rep int) ([]Record[S], error)
	Meter *Meter
	Log   *slog.Logger
}

// Run visits every configuration not skipped Reps times. Each repetition
// visits the configurations in turn, starting one further along each time
// (A B C, B C A, ...), so slow drifts of a shared machine spread over all
// of them. A visit that fails before its first record is tried once more
// (a bed or forwarder that did not come up on a loaded machine). A
// configuration whose first visit still fails is skipped with the reason;
// a later failed visit records the rows it did not run as failed. When ctx
// ends, Run returns an error wrapping ErrInterrupted.
func Run[S any](ctx context.Context, p Plan[S]) ([]Record[S], error) {
	var out []Record[S]
	for rep := 1; rep <= p.Reps; rep++ {
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
				p.Meter.total -= (p.Reps-rep+1)*len(p.Rows) - len(recs)
				p.Log.Warn("skipping configuration", "config", c.Name, "reason", c.Skipped)
				continue
			}
			p.Meter.total -= len(p.Rows) - len(recs)
			p.Log.Warn("repetition failed", "config", c.Name, "rep", rep, "err", err)
			for _, row := range p.Rows[len(recs):] {
				out = append(out, Record[S]{Config: c.Name, Row: row, Rep: rep, Err: err.Error()})
			}
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
