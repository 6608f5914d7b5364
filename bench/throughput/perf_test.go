package throughput

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
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

// TestGuard checks the guard's analysis: tapfwd is compared with the
// bridge in pairs on every row (and the sequential rule takes those
// pairs), the targets are judged by the whole interval, and a saved
// report gives back the per-repetition ratios that compare reads.
func TestGuard(t *testing.T) {
	r := guardRun(t)
	if r.Settings.Reps != stats.Stage1Reps || r.Settings.Sequential.Stopped != matrix.StopTarget || len(r.Comparisons) != len(guardRatios) {
		t.Fatalf("%d repetitions, stopped by %q, %d comparisons; want %d, target, %d",
			r.Settings.Reps, r.Settings.Sequential.Stopped, len(r.Comparisons), stats.Stage1Reps, len(guardRatios))
	}
	for w, want := range guardRatios {
		c := r.Comparison(Default, Bridge, w)
		if c == nil || math.Abs(c.Ratio.Median/want-1) > 0.02 || c.Pairs != stats.Stage1Reps {
			t.Errorf("%s: comparison %+v, want a ratio near %v over %d pairs", w, c, want, stats.Stage1Reps)
		}
	}
	var txt bytes.Buffer
	if err := r.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for w, want := range map[string][]string{
		"tcp-default-P1-w2l": {">= 0.95 no", "<= 1.05 no"},
		"tcp-default-P1-l2w": {">= 0.95 yes", "<= 1.05 yes"},
		"tcp-mtu-P1-w2l":     {">= 1.00 open", "<= 1.05 no"},
		"tcp-default-P4-w2l": {">= 0.90 yes"},
		"udp-64B-w2l":        {">= 0.90 no", "] - -"}, // no cost target
	} {
		line := fieldLine(txt.String(), w, Default)
		for _, s := range want {
			if !strings.Contains(line, s) {
				t.Errorf("%s: the bridge table's row %q lacks %q", w, line, s)
			}
		}
	}
	for _, s := range []string{"Against the bridge", "every forwarder against the bridge"} {
		if !strings.Contains(txt.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, txt.String())
		}
	}
	back, _ := roundTrip(t, r)
	got := back.BridgeRatios(Default, "udp-64B-w2l")
	want := r.BridgeRatios(Default, "udp-64B-w2l")
	if len(got) != stats.Stage1Reps || len(want) != len(got) {
		t.Fatalf("bridge ratios from JSON %v, as run %v", got, want)
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-12 || math.Abs(got[i]-0.5) > 0.05 {
			t.Errorf("bridge ratio %d: %v from JSON, %v as run, want about 0.5", i, got[i], want[i])
		}
	}
	dir := t.TempDir()
	if err := r.WriteCharts(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "napi.png")); err == nil {
		t.Error("a run without the TAP NAPI modes drew their chart")
	}
}

// fieldLine is the first line of text whose first fields are these, its
// fields joined by single spaces.
func fieldLine(text string, first ...string) string {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(first) && strings.Join(f[:len(first)], " ") == strings.Join(first, " ") {
			return strings.Join(f, " ")
		}
	}
	return ""
}
