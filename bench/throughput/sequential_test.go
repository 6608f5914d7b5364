package throughput

import (
	"bytes"
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

// TestSequentialRun checks the sequential default run end to end on
// made-up figures: a clear difference stops after the first stage with
// its verdict; moderate noise stops at the pairs its first stage asked
// for; noise that the target cannot be reached through runs to the
// budget and is reported too wide, with the pairs it would have needed.
func TestSequentialRun(t *testing.T) {
	w := "tcp-4KB-P1-w2l"
	r := sequentialRun(t, 1.3, 0.01, time.Minute, 0)
	c := r.Comparison(NAPIOn, NAPIOff, w)
	if r.Settings.Reps != stats.Stage1Reps || r.Settings.Sequential.Stopped != matrix.StopTarget ||
		c.Verdict != stats.Faster || c.Stopped != matrix.StopTarget || c.Pairs != 6 {
		t.Errorf("+30%%, 1%% noise: %d repetitions, stopped by %q; comparison %+v", r.Settings.Reps, r.Settings.Sequential.Stopped, c)
	}

	r = sequentialRun(t, 1.1, 0.06, time.Minute, 0)
	c = r.Comparison(NAPIOn, NAPIOff, w)
	if c.Needed <= 6 || r.Settings.Reps != c.Needed || c.Pairs != c.Needed || c.HalfWidth > stats.TargetHalfWidth || c.Stopped != matrix.StopTarget {
		t.Errorf("+10%%, 6%% noise: %d repetitions; comparison %+v; want the pairs needed, within the target", r.Settings.Reps, c)
	}

	r = sequentialRun(t, 1, 0.4, 300*time.Millisecond, 10*time.Millisecond)
	c = r.Comparison(NAPIOn, NAPIOff, w)
	if r.Settings.Sequential.Stopped != matrix.StopBudget || r.Settings.Reps < stats.Stage1Reps || r.Settings.Reps > 30 ||
		c.Verdict != stats.TooWide || c.Stopped != matrix.StopBudget || c.Needed <= c.Pairs {
		t.Errorf("40%% noise, 0.3 s budget at 10 ms a repetition: %d repetitions, stopped by %q; comparison %+v",
			r.Settings.Reps, r.Settings.Sequential.Stopped, c)
	}
	var txt bytes.Buffer
	if err := r.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sequential: a first stage of 6", "stopped as the next would have overrun the budget",
		"(needs " + strconv.Itoa(c.Needed) + " pairs; budget)", "Stein's two-stage 95% interval", strconv.Itoa(c.Pairs) + "/" + strconv.Itoa(c.Needed), "Repetitions per configuration"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, txt.String())
		}
	}
	n := strconv.Itoa(r.Settings.Reps)
	if !hasRow(txt.String(), NAPIOn, n, n, "0") {
		t.Errorf("no repetitions row for napi-on: %s repetitions, %s runs, none failed", n, n)
	}
}

// hasRow reports whether text has a line of exactly these fields.
func hasRow(text string, fields ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.Join(strings.Fields(line), " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
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
	if d := p.Describe(0); d != "iperf3 client on CPU 0 beside tapfwd's worker, server on CPU 1" {
		t.Errorf("Describe: %q", d)
	}
	if d := (&Placement{Name: Scheduler}).Describe(0); d != "iperf3 placed by the scheduler, tapfwd's worker on CPU 0" {
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
		Settings: Settings{Method: report.Method{Reps: 8, Seed: 1, Resamples: 500, Level: stats.Level}, RunSeconds: 2, OmitSeconds: 1,
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

// TestTwoModes checks that a cell whose runs fall in two modes says so,
// with the runs of each, and that the report shows what differs between
// the modes in the traces: here the client beside the worker.
func TestTwoModes(t *testing.T) {
	r := bimodalReport(t)
	c := r.Cell(NAPIOff, "tcp-128B-P1-w2l")
	if len(c.Modes) != 2 || c.Modes[0].Runs != 4 || joinInts(c.Modes[0].Reps) != "2,3,5,8" || math.Abs(c.Modes[1].Median-0.5858) > 0.01 {
		t.Fatalf("modes %+v", c.Modes)
	}
	var txt bytes.Buffer
	if err := r.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	out := txt.String()
	if !strings.Contains(out, "Runs in two modes") || !strings.Contains(out, "x4 (reps 2,3,5,8)") {
		t.Errorf("text lacks the modes:\n%s", out)
	}
	// The mode table: the client beside the worker 100% of the time in the
	// slow mode, 0% in the fast one.
	var slowRow, fastRow string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 6 && f[0] == NAPIOff && f[2] == "slow" {
			slowRow = line
		}
		if len(f) > 6 && f[0] == NAPIOff && f[2] == "fast" {
			fastRow = line
		}
	}
	if f := strings.Fields(slowRow); len(f) < 8 || f[7] != "100" {
		t.Errorf("slow mode row %q: want client beside worker 100", slowRow)
	}
	if f := strings.Fields(fastRow); len(f) < 8 || f[7] != "0.0" {
		t.Errorf("fast mode row %q: want client beside worker 0.0", fastRow)
	}
	if strings.Contains(out, "Trace of every run") {
		t.Error("the per-run trace without Trace set")
	}
	r.Trace = true
	txt.Reset()
	r.Document().WriteText(&txt)
	_, tr, _ := strings.Cut(txt.String(), "Trace of every run")
	tr, _, _ = strings.Cut(tr, "Configurations")
	if n := strings.Count(tr, "\nnapi-on   tcp-128B-P1-w2l"); n != 8 {
		t.Errorf("trace section: %d napi-on rows, want 8:\n%s", n, txt.String())
	}
}

// TestPackingSection checks that the runs of a cell are split by how the
// sender's TCP packed them, with each state's median and repetitions, and
// that the per-run trace names each run's state; a cell whose traces do
// not tell is left out.
func TestPackingSection(t *testing.T) {
	r := bimodalReport(t)
	r.Trace = true
	var txt bytes.Buffer
	if err := r.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(txt.String(), "Runs by how the sender's TCP packed its data")
	sec, _, _ = strings.Cut(sec, "\n\n")
	if !ok {
		t.Fatalf("no packing section:\n%s", txt.String())
	}
	var row string
	for _, line := range strings.Split(sec, "\n") {
		if strings.HasPrefix(line, NAPIOn) {
			t.Errorf("napi-on, whose traces lack Tcp.OutSegs, listed: %q", line)
		}
		if strings.HasPrefix(line, NAPIOff) {
			row = line
		}
	}
	// Slow reps 2,3,5,8 at 0.36 x 1.02, 1, 1.02, 1.02 (median 0.3672), fast
	// 1,4,6,7 at 0.58 x 1.01, 1.01, 1, 1.01 (0.5858): 0.627.
	for _, want := range []string{"x4 (reps 2,3,5,8)", "x4 (reps 1,4,6,7)", "0.627"} {
		if !strings.Contains(row, want) {
			t.Errorf("napi-off row %q lacks %q", row, want)
		}
	}
	_, tr, _ := strings.Cut(txt.String(), "Trace of every run")
	if n, m := strings.Count(tr, "slow  per-segment"), strings.Count(tr, "fast  coalesced"); n != 4 || m != 4 {
		t.Errorf("trace table: %d slow per-segment and %d fast coalesced napi-off runs, want 4 and 4:\n%s", n, m, tr)
	}
}

// TestRunsRoundTrip writes a report with its traced runs as JSON and
// reads it back: the runs, their traces and the modes come back, and the
// trace renders from them.
func TestRunsRoundTrip(t *testing.T) {
	r := bimodalReport(t)
	back, _ := roundTrip(t, r)
	if len(back.Runs) != 16 || back.Runs[0].Trace == nil || len(back.Runs[0].Trace.Threads) != 2 || len(back.Cell(NAPIOff, "tcp-128B-P1-w2l").Modes) != 2 {
		t.Fatalf("read back: %d runs, first %+v", len(back.Runs), back.Runs[0])
	}
	back.Trace = true
	var a, b bytes.Buffer
	r.Trace = true
	r.Document().WriteText(&a)
	back.Document().WriteText(&b)
	if a.String() != b.String() {
		t.Errorf("rendered from JSON:\n%s\nwant:\n%s", b.String(), a.String())
	}
}

// TestReadSchemaV2 renders the committed runs of schema 2 again (the
// default run and the VXLAN one): their comparisons as they were made,
// under the rule and the words of then.
func TestReadSchemaV2(t *testing.T) {
	for _, path := range []string{"../../docs/results/2026-12-01-throughput-schema-2/throughput.json", "../../docs/results/2026-12-01-throughput-vxlan/throughput.json"} {
		r, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if r.Schema != SchemaV2 || r.Settings.Interval != "" || r.Settings.Sequential != nil || len(r.Runs) != 0 {
			t.Errorf("%s: schema %q, settings %+v", path, r.Schema, r.Settings)
		}
		var txt, md bytes.Buffer
		if err := r.Document().WriteText(&txt); err != nil {
			t.Fatal(err)
		}
		if err := r.Document().WriteMarkdown(&md); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"the median of the per-repetition differences", "9 repetitions interleaved", "iperf3 pinned: the wire side (client) to CPU 0"} {
			if !strings.Contains(txt.String(), want) {
				t.Errorf("%s: text lacks %q", path, want)
			}
		}
		if strings.Contains(txt.String(), "Stein") || strings.Contains(txt.String(), "Placement ") {
			t.Errorf("%s: rendered with what it was not made by", path)
		}
	}
	r, _ := Read("../../docs/results/2026-12-01-throughput-schema-2/throughput.json")
	var txt bytes.Buffer
	r.Document().WriteText(&txt)
	if !strings.Contains(txt.String(), "+0.015 [-0.085, +0.122] (+2.7%)  18%   9      interval +-18%: too wide for a verdict at the +-7.5% target") {
		t.Errorf("the committed 128 B row is not as committed:\n%s", txt.String())
	}
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
