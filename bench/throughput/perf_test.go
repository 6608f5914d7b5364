package throughput

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/cost"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
)

// guardRatios are made-up figures of tapfwd over the bridge's per
// workload of the guard: clearly short of the target, clearly past it,
// and on it.
var guardRatios = map[string]float64{
	"tcp-default-P1-w2l": 0.7, "tcp-default-P1-l2w": 1.1, "tcp-mtu-P1-w2l": 1, "tcp-default-P4-w2l": 0.97, "udp-64B-w2l": 0.5,
}

// guardRun runs the guard (Default against the bridge on PerfWorkloads,
// paired, sequential) on made-up figures with 1% noise: tapfwd at
// guardRatios of the bridge's throughput and at 1.5 times its CPU per
// unit on wire->lab, 1.0 times on lab->wire.
func guardRun(t *testing.T) *Report {
	t.Helper()
	cfgs, err := report.SelectConfigs(KnownConfigs(DefaultTAPNAPI, DefaultLevers()), []string{Default, Bridge})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Common: matrix.Common{Configs: cfgs, Reps: stats.Stage1Reps, Bootstrap: stats.Bootstrap{Seed: 1, Resamples: 500}},
		Workloads: PerfWorkloads(), Duration: time.Second, Budget: time.Minute, AgainstBridge: true}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	r := newReport(o)
	rng := rand.New(rand.NewPCG(3, 3))
	visit := func(_ context.Context, c *report.Config, rep int, m *matrix.Meter) ([]record, error) {
		var out []record
		for _, w := range o.Workloads {
			v, k := 10*math.Exp(0.01*rng.NormFloat64()), 1.0
			if c.Name == Default {
				v *= guardRatios[w.Name]
				if w.Direction == WireToLab {
					k = 1.5
				}
			}
			k *= math.Exp(0.01 * rng.NormFloat64())
			out = append(out, record{Config: c.Name, Row: w.Name, Rep: rep,
				Sample: sample{Value: v, Cost: cost.PerUnit{Total: k, User: k / 2, System: k / 2}, HasCost: true}})
		}
		return out, nil
	}
	runs, end, err := matrix.Run(context.Background(), r.plan(o, visit))
	if err != nil {
		t.Fatal(err)
	}
	r.finish(runs, end, o.Bootstrap)
	return r
}
