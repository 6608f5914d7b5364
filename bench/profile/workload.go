package profile

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/tapfwd/tapfwd/bench/latency"
	"github.com/tapfwd/tapfwd/bench/rr"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Workload is a load to profile: one of the throughput guard's iperf3
// workloads, or, with RR set, a request/response point of the latency
// bench (UDP requests from the wire, echoed in the lab, at a fixed rate
// with the receiver's delay).
type Workload struct {
	throughput.Workload
	RR *latency.Point `json:"rr,omitempty"`
}

// IperfWorkloads are ws as workloads to profile.
func IperfWorkloads(ws []throughput.Workload) []Workload {
	out := make([]Workload, len(ws))
	for i, w := range ws {
		out[i] = Workload{Workload: w}
	}
	return out
}

// RRPrefix starts the name of a request/response workload: rr-12K-0us
// is the latency bench's point 12K/0us.
const RRPrefix = "rr-"

// RRUnit is the figure of a request/response workload: its median
// round-trip time.
const RRUnit = "µs p50"

// RRWorkload is the latency bench's point p as a workload.
func RRWorkload(p latency.Point) Workload {
	return Workload{RR: &p, Workload: throughput.Workload{Name: RRPrefix + strings.ReplaceAll(p.Name, "/", "-"),
		Proto: "udp", Len: rr.DefaultPayload, Streams: 1, Direction: throughput.WireToLab, Unit: RRUnit}}
}

// ParseRRWorkload parses a request/response workload's name
// (rr-RATE-DELAY, e.g. rr-5K-38us).
func ParseRRWorkload(name string) (Workload, error) {
	ps, err := latency.ParsePoints(strings.Replace(strings.TrimPrefix(name, RRPrefix), "-", "/", 1))
	if err != nil || len(ps) != 1 || !strings.HasPrefix(name, RRPrefix) {
		return Workload{}, fmt.Errorf("workload %q: want rr-RATE-DELAY, e.g. rr-5K-0us or rr-5K-38us", name)
	}
	return RRWorkload(ps[0]), nil
}

// RTT is what a request/response workload's run measured, over the
// whole run (warm-up and the profilers' cost included): context, not a
// measurement (tapfwd-bench latency measures that).
type RTT struct {
	Rate        float64 `json:"rate"`
	LossPercent float64 `json:"loss_percent"`
	P50         float64 `json:"p50_us"`
	P99         float64 `json:"p99_us"`
}

// rrThreads are the threads a request/response run makes, by thread id,
// as rr tells them.
type rrThreads struct {
	mu    sync.Mutex
	roles map[int]string
}

func (t *rrThreads) add(role string, tid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.roles == nil {
		t.roles = map[int]string{}
	}
	t.roles[tid] = role
}

func (t *rrThreads) get() map[int]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.roles)
}

// load runs w's traffic across bed for d, its figure into res; the
// threads of a request/response run go to own.
func load(ctx context.Context, bed *testbed.Bed, w Workload, d time.Duration, res *Result, own *rrThreads) error {
	if w.RR == nil {
		ir, err := iperf.Run(ctx, bed, w.Iperf(d, 0))
		res.Figure = ir.BitsPerSecond / 1e9
		if w.Unit == throughput.Kpps && w.Len > 0 {
			res.Figure = ir.BitsPerSecond / 8 / float64(w.Len) / 1e3
		}
		return err
	}
	r, err := rr.RoundTrips(ctx, bed, rr.Options{Rate: float64(w.RR.Rate), Delay: w.RR.Delay, Duration: d, Warmup: -1,
		SenderFIFO: latency.SenderFIFO, Thread: own.add})
	if err != nil {
		return err
	}
	us := func(q float64) float64 { return float64(r.RTT.Quantile(q)) / 1e3 }
	res.RTT = &RTT{Rate: r.Rate(), LossPercent: r.LossPercent(), P50: us(0.5), P99: us(0.99)}
	res.Figure = res.RTT.P50
	return nil
}
