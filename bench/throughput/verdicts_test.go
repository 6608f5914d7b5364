package throughput

import (
	"math"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/cost"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

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
		Settings: Settings{Method: report.Method{Reps: reps, Intervals: report.Intervals{Seed: 1, Resamples: 1000, Level: stats.Level}}, RunSeconds: 2,
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
