package throughput

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/cost"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// TestCostCells checks the cost of every configuration, the bridge and
// the direct veth included: the machine's figure with its interval, its
// parts, the forwarder's share where there is a forwarder, and the ratio
// to the bridge.
func TestCostCells(t *testing.T) {
	r := synthetic(t)
	for _, c := range r.Cells {
		k := c.Cost
		if k == nil {
			t.Errorf("%s/%s: no cost", c.Config, c.Workload)
			continue
		}
		want := PerGbit
		if strings.HasPrefix(c.Workload, "udp") {
			want = PerMpkt
		}
		if k.Unit != want || len(k.Samples) != c.Reps || !(k.Machine.Low <= k.Machine.Median && k.Machine.Median <= k.Machine.High) {
			t.Errorf("%s/%s: cost %+v", c.Config, c.Workload, k)
		}
		if math.Abs(k.User+k.System+k.Softirq-k.Machine.Median) > 1e-9 {
			t.Errorf("%s/%s: parts %v + %v + %v, machine %v", c.Config, c.Workload, k.User, k.System, k.Softirq, k.Machine.Median)
		}
		kind := r.Config(c.Config).Kind
		if hasFwd := kind == report.KindTapfwd || kind == report.KindNaive; hasFwd != (k.Forwarder > 0) {
			t.Errorf("%s/%s (%s): forwarder's share %v", c.Config, c.Workload, kind, k.Forwarder)
		}
		if math.Abs(k.ForwarderUser+k.ForwarderSystem-k.Forwarder) > 1e-9 || math.Abs(k.ForwarderSystem-3*k.ForwarderUser) > 1e-9 {
			t.Errorf("%s/%s: forwarder %v = user %v + kernel %v?", c.Config, c.Workload, k.Forwarder, k.ForwarderUser, k.ForwarderSystem)
		}
		if k.RatioToBridge == nil || !(k.RatioToBridge.Low <= k.RatioToBridge.Median && k.RatioToBridge.Median <= k.RatioToBridge.High) {
			t.Errorf("%s/%s: cost ratio to the bridge %+v", c.Config, c.Workload, k.RatioToBridge)
		}
	}
	w := r.Workloads[0].Name
	if k := r.Cell(Bridge, w).Cost; *k.RatioToBridge != (stats.Estimate{Median: 1, Low: 1, High: 1}) {
		t.Errorf("bridge's cost ratio to itself %+v", k.RatioToBridge)
	}
	if k := r.Cell(NAPIOn, w).Cost; math.Abs(k.RatioToBridge.Median-1.5) > 1e-9 || math.Abs(k.Machine.Median-0.45*1.06) > 1e-9 {
		t.Errorf("napi-on's cost %v, ratio to the bridge %v; want 0.477 and 1.5", k.Machine.Median, k.RatioToBridge.Median)
	}
	if k := r.Cell(Direct, w).Cost; math.Abs(k.RatioToBridge.Median-2.0/3) > 1e-9 {
		t.Errorf("direct's cost ratio to the bridge %v, want 0.667", k.RatioToBridge.Median)
	}

	var txt bytes.Buffer
	if err := r.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "Cost: CPU seconds of the whole machine per unit delivered") {
		t.Error("text report lacks the cost table")
	}
	rows := 0
	for _, line := range strings.Split(txt.String(), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == "udp-64B-w2l" && f[2] == PerMpkt {
			rows++
		}
	}
	if rows != 8 {
		t.Errorf("%d cost rows for udp-64B-w2l in s/Mpkt, want one per configuration that ran (8)", rows)
	}
	if strings.Contains(txt.String(), "Forwarder CPU per gigabit delivered") {
		t.Error("text report has the schema 1 forwarder-only table beside the cost table")
	}
	recs := csvRecords(t, r)
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, rec := range recs[1:] {
		if rec[col["cost_unit"]] == "" || rec[col["cost_machine_median"]] == "" || rec[col["cost_ratio_to_bridge"]] == "" {
			t.Errorf("CSV row without its cost: %v", rec)
		}
		if fwd := rec[col["cost_forwarder_median"]] != "0"; fwd != (rec[col["cost_forwarder_system_median"]] != "") {
			t.Errorf("CSV row: forwarder %q, its kernel share %q", rec[col["cost_forwarder_median"]], rec[col["cost_forwarder_system_median"]])
		}
	}
}

// TestSetCost checks the units a run's cost is divided by: TCP payload
// (the IP bytes less 52 bytes of headers per packet) in gigabits, UDP
// datagrams in millions.
func TestSetCost(t *testing.T) {
	spent := cost.Spent{Machine: cost.Times{User: time.Second, System: time.Second, Softirq: 2 * time.Second}, Process: time.Second}
	var s sample
	// 10^6 packets of 1448 bytes of payload: 11.584 Gbit.
	s.setCost(Workload{Proto: "tcp"}, spent, procfs.Received{IPPackets: 1e6, IPOctets: 1e6 * (1448 + tcpHeaderBytes)}, true)
	if gbit := 1448e6 * 8 / 1e9; !s.HasCost || math.Abs(s.Cost.Total-4/gbit) > 1e-12 || math.Abs(s.FwdCPUPerGbit-1/gbit) > 1e-12 || math.Abs(s.Cost.Process-1/gbit) > 1e-12 {
		t.Errorf("TCP: %+v, forwarder %v", s.Cost, s.FwdCPUPerGbit)
	}
	s = sample{}
	// 2 million datagrams of 64 bytes.
	s.setCost(Workload{Proto: "udp", Len: 64}, spent, procfs.Received{UDPDatagrams: 2e6, IPPackets: 2e6, IPOctets: 2e6 * 92}, false)
	if !s.HasCost || s.Cost.Total != 2 || s.Cost.Softirq != 1 || s.FwdCPUPerGbit != 0 {
		t.Errorf("UDP without a forwarder: %+v, forwarder %v", s.Cost, s.FwdCPUPerGbit)
	}
	s = sample{}
	s.setCost(Workload{Proto: "tcp"}, spent, procfs.Received{}, true)
	if s.HasCost {
		t.Errorf("nothing delivered, yet a cost: %+v", s.Cost)
	}
}

// noisy builds a report of napi-off and napi-on runs on one workload:
// reps repetitions, napi-on 20% above napi-off, each run moved by
// +-spread (a fraction) in a fixed pattern.
func noisy(t *testing.T, reps int, spread float64) *Report {
	t.Helper()
	w := Workloads([]int{4096}, []int{1}, []string{WireToLab}, false)
	cfgs, _ := report.SelectConfigs(Configs(DefaultTAPNAPI), []string{NAPIOff, NAPIOn})
	r := &Report{Configs: cfgs, Workloads: w,
		Settings: Settings{Method: report.Method{Reps: reps, Seed: 1, Resamples: 1000, Level: stats.Level}, RunSeconds: 2,
			Paired: true, Interval: SteinInterval, MinReps: stats.MinReps, TargetHalfWidth: stats.TargetHalfWidth}}
	pattern := []float64{0, 1, -1, 0.5, -0.5, 0.8, -0.8, 0.2, -0.2, 0.6}
	for rep := 1; rep <= reps; rep++ {
		off := 4 * (1 + spread*pattern[(rep-1)%len(pattern)])
		on := 4.8 * (1 + spread*pattern[(rep+2)%len(pattern)])
		r.runs = append(r.runs,
			record{Config: NAPIOff, Row: w[0].Name, Rep: rep, Sample: sample{Value: off}},
			record{Config: NAPIOn, Row: w[0].Name, Rep: rep, Sample: sample{Value: on}})
	}
	r.analyze(stats.Bootstrap{Seed: 1, Resamples: 1000})
	return r
}

// TestVerdictRule checks the verdicts the report gives and how it words
// them: too few repetitions at 3, a verdict at 4 with a narrow interval,
// and an interval wider than the target named with its width instead of
// a verdict.
func TestVerdictRule(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reps   int
		spread float64
		want   string
	}{
		{"3 repetitions", 3, 0.01, stats.TooFewSamples},
		{"4 repetitions", 4, 0.01, stats.Faster},
		{"10 repetitions, noisy", 10, 0.25, stats.TooWide},
	} {
		r := noisy(t, tc.reps, tc.spread)
		c := r.Comparison(NAPIOn, NAPIOff, r.Workloads[0].Name)
		if c == nil || c.Verdict != tc.want || c.Pairs != tc.reps {
			t.Errorf("%s: comparison %+v, want verdict %q over %d pairs", tc.name, c, tc.want, tc.reps)
			continue
		}
		var txt bytes.Buffer
		if err := r.Document().WriteText(&txt); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if tc.want == stats.TooWide {
			want = "interval +-" + report.PctAbs(c.HalfWidth) + ": too wide for a verdict at the +-7.5% target"
			if c.HalfWidth <= 7.5 {
				t.Errorf("%s: half-width %v", tc.name, c.HalfWidth)
			}
		}
		if !strings.Contains(txt.String(), want) || !strings.Contains(txt.String(), "at least 4 pairs") {
			t.Errorf("%s: text report lacks %q or the rule:\n%s", tc.name, want, txt.String())
		}
	}
}

// TestReadSchemaV1 renders the committed run of the first schema again:
// its verdicts as they were made, under the rule they were made by.
func TestReadSchemaV1(t *testing.T) {
	r, err := Read("../../docs/results/2026-11-30-throughput-first-schema/throughput.json")
	if err != nil {
		t.Fatal(err)
	}
	if r.Schema != SchemaV1 || r.Settings.Rule() != (stats.Rule{MinReps: 3}) || r.Settings.Paired {
		t.Errorf("schema %q, rule %+v, paired %v", r.Schema, r.Settings.Rule(), r.Settings.Paired)
	}
	var txt, md bytes.Buffer
	if err := r.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := r.Document().WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"at least 3 repetitions each", "IFF_NAPI off -> on: TCP wire->lab, 1 stream", "4.27 [3.12, 4.76]", "Forwarder CPU per gigabit delivered", "no significant difference"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text of the schema 1 report lacks %q", want)
		}
	}
	if strings.Contains(txt.String(), "Cost:") || strings.Contains(txt.String(), "too wide") {
		t.Error("schema 1 report rendered with cost or the width target it was not made under")
	}
}
