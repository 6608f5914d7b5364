package throughput

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/trace"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
)

// fakeVisit is a visit that gives every workload the figure value says
// for the configuration and repetition, after pause.
func fakeVisit(o Options, value func(config string, rep int) float64, pause time.Duration) func(context.Context, *report.Config, int, *matrix.Meter) ([]record, error) {
	return func(_ context.Context, c *report.Config, rep int, m *matrix.Meter) ([]record, error) {
		time.Sleep(pause)
		var out []record
		for _, w := range o.Workloads {
			m.Step(c.Name, rep, w.Name)
			m.Done()
			out = append(out, record{Config: c.Name, Row: w.Name, Rep: rep, Sample: sample{Value: value(c.Name, rep)}})
		}
		return out, nil
	}
}

// sequentialRun runs napi-off against napi-on sequentially on one
// workload with made-up figures: napi-off 4 Gbit/s and napi-on ratio
// times that, each run moved by a log factor of sd noise; every
// repetition takes pause.
func sequentialRun(t *testing.T, ratio, noise float64, budget, pause time.Duration) *Report {
	t.Helper()
	cfgs, _ := report.SelectConfigs(Configs(DefaultTAPNAPI), []string{NAPIOff, NAPIOn})
	o := Options{Common: matrix.Common{Configs: cfgs, Reps: stats.Stage1Reps, Bootstrap: stats.Bootstrap{Seed: 1, Resamples: 500}},
		Workloads: Workloads([]int{4096}, []int{1}, []string{WireToLab}, false), Duration: time.Second, Budget: budget}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	r := newReport(o)
	rng := rand.New(rand.NewPCG(2, 2))
	value := func(config string, rep int) float64 {
		v := 4 * math.Exp(noise*rng.NormFloat64())
		if config == NAPIOn {
			v *= ratio
		}
		return v
	}
	runs, end, err := matrix.Run(context.Background(), r.plan(o, fakeVisit(o, value, pause/2)))
	if err != nil {
		t.Fatal(err)
	}
	r.finish(runs, end, o.Bootstrap)
	return r
}

func TestPlace(t *testing.T) {
	ws := Workloads([]int{128}, []int{1, 4}, []string{WireToLab}, false)
	pin := DefaultPin()
	if pin == nil {
		pin = &iperf.Pinning{Wire: 0, Lab: 1}
	}
	got, err := Place(ws, PlaceAuto, pin)
	if err != nil || got[0].Placement.Name != Pinned || got[0].Placement.Iperf != pin || got[1].Placement.Name != Scheduler || got[1].Placement.Iperf != nil {
		t.Errorf("auto: %+v, %v; want one stream pinned, four by the scheduler", got, err)
	}
	got, _ = Place(ws, PlaceBoth, pin)
	if len(got) != 4 || got[0].Name != "tcp-128B-P1-w2l@pinned" || got[3].Name != "tcp-128B-P4-w2l@scheduler" || got[3].Placement.Name != Scheduler {
		t.Errorf("both: %+v", got)
	}
	if got, _ := Place(ws, PlacePinned, nil); got[0].Placement.Name != Scheduler {
		t.Errorf("pinned without CPUs to pin to: %+v", got[0].Placement)
	}
	if _, err := Place(ws, "everywhere", pin); err == nil || !strings.Contains(err.Error(), "known: auto, pinned, scheduler, both") {
		t.Errorf("unknown mode: %v", err)
	}
	p := Placement{Name: Pinned, Iperf: &iperf.Pinning{Wire: 0, Lab: 1}}
	if d := p.Describe(0); d != "iperf3 client on CPU 0 where tapfwd's worker starts, server on CPU 1" {
		t.Errorf("Describe: %q", d)
	}
	if d := (&Placement{Name: Scheduler}).Describe(0); d != "iperf3 placed by the scheduler, tapfwd's worker starting on CPU 0" {
		t.Errorf("Describe: %q", d)
	}
}

// bimodalReport is a report of napi-off and napi-on on one workload whose
// napi-off runs fall in two modes, every run traced: in the slow runs the
// iperf3 client shared the worker's CPU, in the fast ones it did not.
func bimodalReport(t *testing.T) *Report {
	t.Helper()
	cfgs, _ := report.SelectConfigs(Configs(DefaultTAPNAPI), []string{NAPIOff, NAPIOn})
	w := Workloads([]int{128}, []int{1}, []string{WireToLab}, false)
	worker := 0
	r := &Report{Header: report.Header{Schema: Schema}, Configs: cfgs, Workloads: w,
		Settings: Settings{Method: report.Method{Reps: 8, Intervals: report.Intervals{Seed: 1, Resamples: 500, Level: stats.Level}}, RunSeconds: 2, OmitSeconds: 1,
			Paired: true, Interval: SteinInterval, MinReps: stats.MinReps, TargetHalfWidth: stats.TargetHalfWidth, WorkerCPU: &worker}}
	slow := map[int]bool{2: true, 3: true, 5: true, 8: true}
	for rep := 1; rep <= 8; rep++ {
		for _, c := range []string{NAPIOff, NAPIOn} {
			v, client := 0.58, []float64{0, 1}
			if slow[rep] {
				v, client = 0.36, []float64{1, 0}
			}
			tr := &trace.Run{Threads: []trace.Thread{
				{Role: trace.Worker, OnCPU: []float64{1, 0}, RunSeconds: 2.4, WaitSeconds: 0.3},
				{Role: trace.Client, OnCPU: client, RunSeconds: 1.5},
			}, NetRX: []int64{90, 10}, Sender: map[string]int64{"Ip.OutRequests": 1000, "IpExt.OutOctets": 1000 * 1448}}
			if c == NAPIOff {
				// napi-off's traces count segments too (napi-on's do not):
				// one a packet in the slow runs, 30 in the fast ones.
				tr.Sender["Tcp.OutSegs"] = 1000
				if !slow[rep] {
					tr.Sender["Tcp.OutSegs"], tr.Sender["IpExt.OutOctets"] = 30_000, 30_000*1448
				}
			}
			r.runs = append(r.runs, record{Config: c, Row: w[0].Name, Rep: rep, Sample: sample{Value: v * (1 + 0.01*float64(rep%3)), Trace: tr}})
		}
	}
	r.finish(r.runs, matrix.Ending{Reps: 8, Stopped: matrix.StopReps}, stats.Bootstrap{Seed: 1, Resamples: 500})
	return r
}

// TestKthreadPinned checks that on the one-host bed the TAP's NAPI
// kthread of napi-threaded is pinned to the CPU beside the iperf3 server
// (the second), and nothing else is, without changing the caller's
// configurations; on the two-host bed it is left alone.
func TestKthreadPinned(t *testing.T) {
	cpus := FirstCPUs(2)
	if len(cpus) < 2 {
		t.Skip("one CPU: nothing to pin apart")
	}
	cfgs, _ := report.SelectConfigs(Configs(DefaultTAPNAPI), []string{NAPIOn, NAPIThreaded})
	o := Options{Common: matrix.Common{Configs: cfgs}}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	th := o.Configs[1]
	if th.Run.TAPNAPICPU == nil || *th.Run.TAPNAPICPU != cpus[1] || !strings.HasSuffix(strings.Join(th.Args, " "), "--tap-napi-cpu "+strconv.Itoa(cpus[1])) ||
		!strings.Contains(th.Description, "its NAPI kthread on CPU") {
		t.Errorf("napi-threaded: %+v", th)
	}
	if o.Configs[0].Run.TAPNAPICPU != nil || cfgs[1].Run.TAPNAPICPU != nil {
		t.Errorf("pinned napi-on's kthread (%v) or the caller's configuration (%v)", o.Configs[0].Run.TAPNAPICPU, cfgs[1].Run.TAPNAPICPU)
	}
	o = Options{Common: matrix.Common{Configs: cfgs, Lab: matrix.Lab{Topology: matrix.VXLAN}}}
	if err := o.defaults(); err != nil || o.Configs[1].Run.TAPNAPICPU != nil {
		t.Errorf("vxlan: %+v, %v", o.Configs[1].Run, err)
	}
}
