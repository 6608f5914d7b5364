package vxlan

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
)

// TestFleetPrometheus's Prometheus scrapes both forwarders under a job
// name that is not "tapfwd" (the rules must select none), every 100 ms:
// rate() extrapolates a window's increase by up to about two scrape
// intervals, so the shorter they are against the seconds the test lasts,
// the closer the recorded rates stay to the bytes that moved.
const (
	fleetJob    = "lab-fleet"
	fleetScrape = 100 * time.Millisecond
	// fleetBytes is what iperf3 sends each way.
	fleetBytes = 256 << 20
)

// TestFleetPrometheus runs tapfwd on both hosts of the two-host VXLAN bed,
// each serving /metrics on its underlay address, and one real Prometheus
// in host 1's namespace that scrapes both across the underlay (the hosts'
// own network, never the tunnel the forwarders carry) with
// deploy/prometheus/rules.yml loaded. iperf3 then moves a known byte count
// from each lab to the other, and the recording rules must add up: the
// fleet's rate is the sum of the per-host ones, each per-host rate is
// rate() of exactly the bytes Prometheus scraped, and those are the iperf3
// bytes (each forwarder takes every frame between the labs once: from its
// TAP or from its VXLAN device) plus the frames' headers.
func TestFleetPrometheus(t *testing.T) {
	testkit.NeedRoot(t, "iperf3", "prometheus")
	h := testbed.NewHostsForTest(t, testbed.HostsConfig{})
	var targets [2]string
	for i, host := range h.Host {
		targets[i] = netip.AddrPortFrom(host.UnderlayAddr.Addr(), 9310).String()
	}
	fws := testkit.StartHosts(t, h, testkit.Tapfwd(t), func(i int) []string { return []string{"--metrics-addr", targets[i]} })
	host1 := h.View(1, 0) // its FwdNS is host 1's namespace, where Prometheus runs
	server := prom.StartServer(t, host1, fleetPromConfig(t, targets))
	waitFleetScraped(t, host1, server)

	start := time.Now()
	moved := fleetTraffic(t, h)
	// Evaluate at a time with a rule evaluation (every second) after
	// every byte was scraped; its minute must still reach back to before
	// the traffic.
	at := time.Now().Add(2 * time.Second)
	waitFleetEvaluated(t, host1, at)
	if at.Sub(start) > 55*time.Second {
		t.Fatalf("the traffic took %v: the rules' 1m window no longer covers it", at.Sub(start))
	}

	var perHost, slack float64
	for i, inst := range targets {
		rate, s := checkFleetHost(t, host1, i, inst, at, moved)
		perHost += rate
		slack = max(slack, s)
	}
	fleet := prom.QueryAt(t, host1, fmt.Sprintf(`job:tapfwd_bytes_received:rate1m{job=%q}`, fleetJob), at)
	t.Logf("fleet: job:tapfwd_bytes_received:rate1m = %.6g B/s, the hosts' sum %.6g B/s", fleet, perHost)
	if math.Abs(fleet-perHost) > slack*fleet || fleet == 0 {
		t.Errorf("job:tapfwd_bytes_received:rate1m = %v, the per-host rates add up to %v: want within %.4f of each other", fleet, perHost, slack)
	}
	for i, fw := range fws {
		if err := fw.Stop(); err != nil {
			t.Errorf("tapfwd on host %d did not exit 0 on SIGTERM: %v\n%s", i+1, err, fw.Output())
		}
	}
}

// fleetPromConfig is the Prometheus configuration of TestFleetPrometheus:
// the repository's rules, one target per host.
func fleetPromConfig(t *testing.T, targets [2]string) string {
	rules := filepath.Join(testkit.ModuleRoot(t), "deploy/prometheus/rules.yml")
	return fmt.Sprintf(`global:
  scrape_interval: %v
  scrape_timeout: %v
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: %s
    static_configs:
      - targets: [%q, %q]
`, fleetScrape, fleetScrape, rules, fleetJob, targets[0], targets[1])
}

// fleetWarmScrapes is how many times Prometheus scrapes each forwarder
// before the traffic: the more samples the minute holds, the less rate()
// may extrapolate (checkFleetHost).
const fleetWarmScrapes = 40

// waitFleetScraped waits until the per-host rule has a value for both
// forwarders (Prometheus loaded the rules and scraped each twice; its
// first target sync is throttled, about 5 s) and each was scraped
// fleetWarmScrapes times.
func waitFleetScraped(t *testing.T, host1 *testbed.Bed, server *testbed.Process) {
	deadline := time.Now().Add(25 * time.Second)
	rule := fmt.Sprintf(`count(instance:tapfwd_bytes_received:rate1m{job=%q})`, fleetJob)
	warm := fmt.Sprintf(`count(count_over_time(tapfwd_build_info{job=%q}[1m]) >= %d)`, fleetJob, fleetWarmScrapes)
	for prom.Query(t, host1, rule) != 2 || prom.Query(t, host1, warm) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("prometheus has not scraped both forwarders %d times after 25 s:\n%s", fleetWarmScrapes, server.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitFleetEvaluated waits until the rules' last evaluation at or before
// time at is written whole: the group writes its rules one after the
// other, so the fleet rule's sample is the last to carry that
// evaluation's time.
func waitFleetEvaluated(t *testing.T, host1 *testbed.Bed, at time.Time) {
	time.Sleep(time.Until(at) + time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		first := prom.QueryAt(t, host1, `min(timestamp(instance_device_queue_direction:tapfwd_bytes:rate1m))`, at)
		last := prom.QueryAt(t, host1, `timestamp(job:tapfwd_bytes_received:rate1m)`, at)
		if first > 0 && first == last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rules evaluated at %.3f are not all written (the fleet rule's last sample is at %.3f)", first, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fleetMoved is what iperf3 moved between the labs, both ways together.
type fleetMoved struct {
	Received, Sent int64 // bytes the receivers counted, the senders wrote
	Retransmits    int
}

// fleetTraffic sends fleetBytes from lab 2 to lab 1 and from lab 1 to lab
// 2. In both runs the client receives (-R): an iperf3 receiver that is the
// client counts to the byte count, while a server stops counting when the
// client says it is done (iperf.Result.SentBytes).
func fleetTraffic(t *testing.T, h *testbed.Hosts) fleetMoved {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var m fleetMoved
	for _, v := range []*testbed.Bed{h.View(0, 1), h.View(1, 0)} {
		r, err := iperf.Run(ctx, v, iperf.Options{Bytes: fleetBytes, Reverse: true})
		if err != nil {
			t.Fatalf("%s -> %s: %v", v.LabNS, v.WireNS, err)
		}
		t.Logf("%s -> %s: %d bytes sent, %d received, %.2f Gbit/s, %d retransmits",
			v.LabNS, v.WireNS, r.SentBytes, r.Bytes, r.BitsPerSecond/1e9, r.Retransmits)
		m.Received += r.Bytes
		m.Sent += r.SentBytes
		m.Retransmits += r.Retransmits
	}
	return m
}

// Bytes a frame of an established TCP connection between the labs
// carries besides its payload, as tapfwd counts it (Ethernet, not the
// vnet header): Ethernet 14, IPv4 20, TCP 20 and the 12-byte timestamp
// option Linux puts on every segment. A GSO super-frame carries them
// once, as one frame, and so does a pure ACK.
const frameHeaderBytes = 14 + 20 + 32

// Slack of the byte check, beyond frameHeaderBytes per frame:
//   - fleetSlack: what the model leaves out: iperf3's control connection
//     (its parameters and results, a few KB of JSON per run), the
//     handshakes (SYN options: 8 bytes over the model), and a few ARP
//     frames (24 bytes under it);
//   - retransmitSlack, per segment the senders retransmitted: the segment
//     again (at most an MSS, 1398 bytes here) and the SACK blocks (12-36
//     bytes) on the ACKs sent while the loss lasts, one per segment in
//     flight (thousands on this path).
const (
	fleetSlack      = 64 << 10
	retransmitSlack = 128 << 10
)

// checkFleetHost checks host i's per-host rate at time at: it and the sum
// of the per-device rule's received rates are rate() of exactly the bytes
// Prometheus scraped from the host over the rule's minute, and those are
// what iperf3 moved plus the frames' headers. It returns the rate and the
// share by which two rules of one evaluation may differ.
//
// Two rules of one evaluation need not see the same samples: Prometheus
// (2.42 here; rule_query_offset came in 2.53) evaluates a group's rules
// one after the other while scrapes go on, and a scrape stamped before
// the evaluation's time may be appended between two of them. The minute's
// increase is the same for both (the counters are flat once the traffic
// stopped), but the later rule's last sample is up to a scrape interval
// later, so it extrapolates less: each rule lies within rate()'s
// extrapolation of the minute's bytes, and so within that of the other.
func checkFleetHost(t *testing.T, host1 *testbed.Bed, i int, inst string, at time.Time, moved fleetMoved) (rate, slack float64) {
	q := func(format string, when time.Time) float64 {
		return prom.QueryAt(t, host1, fmt.Sprintf(format, inst), when)
	}
	rule := q(`instance:tapfwd_bytes_received:rate1m{instance=%q}`, at)
	devices := q(`sum(instance_device_queue_direction:tapfwd_bytes:rate1m{instance=%q,direction="rx"})`, at)
	eval := time.UnixMilli(int64(1e3 * q(`timestamp(instance:tapfwd_bytes_received:rate1m{instance=%q})`, at)))
	// What the rule's minute holds: the counters are monotonic, so max -
	// min is what rate() divides before it extrapolates.
	bytes := q(`sum(max_over_time(tapfwd_bytes_total{instance=%[1]q,direction="rx"}[1m]) - min_over_time(tapfwd_bytes_total{instance=%[1]q,direction="rx"}[1m]))`, eval)
	frames := q(`sum(max_over_time(tapfwd_packets_total{instance=%[1]q,direction="rx"}[1m]) - min_over_time(tapfwd_packets_total{instance=%[1]q,direction="rx"}[1m]))`, eval)
	samples := q(`min(count_over_time(tapfwd_bytes_total{instance=%q,direction="rx"}[1m]))`, eval)
	payload := bytes - frameHeaderBytes*frames
	t.Logf("host %d (%s): %.6g B/s at %s (x60: %.6g B, %.4f of the iperf3 bytes); the minute holds %.0f B in %.0f frames, %.0f scrapes; less %d B per frame: %.0f B; iperf3 received %d B, sent %d B",
		i+1, inst, rule, eval.Format("15:04:05.000"), 60*rule, 60*rule/float64(moved.Received), bytes, frames, samples,
		frameHeaderBytes, payload, moved.Received, moved.Sent)
	// rate() extends the window's increase past its first and last
	// samples by at most 1.1 mean scrape intervals each
	// (promql/functions.go: extrapolatedRate), and never shrinks it.
	slack = 2.2 / (samples - 1)
	for _, r := range []struct {
		name string
		rate float64
	}{{"instance:tapfwd_bytes_received:rate1m", rule}, {"the sum of its devices' received rates", devices}} {
		if f := 60 * r.rate / bytes; f < 1-1e-9 || f > 1+slack || samples < 2 {
			t.Errorf("host %d: %s (%v B/s) times 60 s is %.4f times the bytes of its minute (%.0f scrapes); want 1 to %.4f", i+1, r.name, r.rate, f, samples, 1+slack)
		}
	}
	if math.Abs(devices-rule) > slack*rule || rule == 0 {
		t.Errorf("host %d: instance:tapfwd_bytes_received:rate1m = %v, its devices' received rates add up to %v: want within %.4f of each other", i+1, rule, devices, slack)
	}
	low := float64(moved.Received) - fleetSlack
	high := float64(moved.Sent) + fleetSlack + retransmitSlack*float64(moved.Retransmits)
	if payload < low || payload > high {
		t.Errorf("host %d: the forwarder took %.0f bytes in %.0f frames, %.0f besides %d-byte headers; iperf3 moved %d (received) to %d (sent) with %d retransmits: want %.0f to %.0f",
			i+1, bytes, frames, payload, frameHeaderBytes, moved.Received, moved.Sent, moved.Retransmits, low, high)
	}
	return rule, slack
}
