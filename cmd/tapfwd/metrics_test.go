package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testbed/iperf"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestMetricsScrape checks a live /metrics page with promtool while iperf3
// runs, and that the byte counters agree with what iperf3 moved.
func TestMetricsScrape(t *testing.T) {
	testkit.NeedRoot(t)
	testkit.NeedTools(t, "iperf3", "promtool")
	bed, fw := startForwarder(t)
	nic := `device="` + bed.NIC + `"`
	tapDev := `device="` + bed.LabIf + `"`
	before := testkit.Scrape(t, bed)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var during []string
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			if _, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://127.0.0.1:9310/metrics"); err == nil {
				mu.Lock()
				during = append(during, body)
				mu.Unlock()
			}
		}
	}()
	r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 3 * time.Second})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	after := testkit.Scrape(t, bed)
	if len(during) < 3 {
		t.Fatalf("only %d scrapes during the run", len(during))
	}
	mid := during[len(during)/2]
	if testkit.Sample(mid, "tapfwd_bytes_total", nic, `direction="rx"`) <= testkit.Sample(before, "tapfwd_bytes_total", nic, `direction="rx"`) {
		t.Error("the scrape taken during the run shows no traffic")
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(mid)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	// iperf3 counts TCP payload; tapfwd counts whole Ethernet frames, which
	// with GSO super-frames adds well under 1% of headers.
	got := testkit.Sample(after, "tapfwd_bytes_total", nic, `direction="rx"`) - testkit.Sample(before, "tapfwd_bytes_total", nic, `direction="rx"`)
	tx := testkit.Sample(after, "tapfwd_bytes_total", tapDev, `direction="tx"`) - testkit.Sample(before, "tapfwd_bytes_total", tapDev, `direction="tx"`)
	ratio := got / float64(r.Bytes)
	t.Logf("iperf3 %d bytes, tapfwd NIC receive %.0f (ratio %.4f), TAP transmit %.0f", r.Bytes, got, ratio, tx)
	if ratio < 0.97 || ratio > 1.05 {
		t.Errorf("tapfwd counted %.0f bytes from the wire, iperf3 moved %d (ratio %.3f)", got, r.Bytes, ratio)
	}
	// Lossless, but userspace GRO merges segments: each merged frame's
	// headers (at most Ethernet+VLAN+IPv6+TCP with options: 138 bytes)
	// are no longer sent separately.
	merged := testkit.Sample(after, "tapfwd_gro_merged_frames_total", nic) - testkit.Sample(before, "tapfwd_gro_merged_frames_total", nic)
	if tx > got || got-tx > merged*138 {
		t.Errorf("TAP transmit bytes %.0f, NIC receive bytes %.0f, %v frames merged: bytes went missing", tx, got, merged)
	}
	if v := testkit.Sample(after, "tapfwd_tap_info", tapDev, `napi="true"`, `vnet_hdr="true"`); v != 1 {
		t.Errorf("tapfwd_tap_info for the TAP = %v", v)
	}
	if v := testkit.Sample(after, "tapfwd_queue_info", tapDev, `queue="0"`); v != 1 {
		t.Errorf("tapfwd_queue_info = %v", v)
	}
	if testkit.Sample(after, "tapfwd_batch_frames_count", nic) == 0 || testkit.Sample(after, "process_cpu_seconds_total") == 0 {
		t.Error("batch histogram or process metrics missing")
	}
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestPrometheusServer runs a real Prometheus against tapfwd on loopback
// in the forwarder's namespace and asks its HTTP API for the TAP's rate.
func TestPrometheusServer(t *testing.T) {
	testkit.NeedRoot(t)
	testkit.NeedTools(t, "iperf3", "prometheus")
	bed, fw := startForwarder(t, "--metrics-addr", "127.0.0.1:9310")
	prom := testkit.StartPrometheus(t, bed, `global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tapfwd
    static_configs:
      - targets: ["127.0.0.1:9310"]
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	// Prometheus throttles its first target sync (about 5 s): wait until
	// it has scraped tapfwd at least twice before sending traffic.
	for {
		if v := testkit.PromQuery(t, bed, `count_over_time(up{job="tapfwd"}[1m]) >= 2`); v >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus never scraped tapfwd:\n%s", prom.Log())
		}
		time.Sleep(300 * time.Millisecond)
	}
	// lab -> wire: the TAP is where tapfwd receives.
	if _, err := iperf.Run(ctx, bed, iperf.Options{Duration: 4 * time.Second, Reverse: true}); err != nil {
		t.Fatal(err)
	}
	rate := testkit.PromQuery(t, bed, fmt.Sprintf(`sum(rate(tapfwd_bytes_total{device=%q,direction="rx"}[20s]))`, bed.LabIf))
	t.Logf(`Prometheus: rate(tapfwd_bytes_total{device=%q,direction="rx"}[20s]) = %.3g bytes/s`, bed.LabIf, rate)
	// 4 s of iperf3 averaged over 20 s is gigabits; idle chatter is bytes.
	if rate < 1e6 {
		t.Fatalf("Prometheus saw no real TAP receive rate; its log:\n%s", prom.Log())
	}
	fw.Stop()
}
