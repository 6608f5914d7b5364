package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/testbed"
	"github.com/tapfwd/tapfwd/testbed/iperf"
)

// httpGet fetches url from inside ns. The socket is made on the locked
// thread of bed.Do (an http.Client would dial from another goroutine, in
// the wrong namespace).
func httpGet(t *testing.T, bed *testbed.Bed, ns, rawURL string) (int, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	var conn net.Conn
	if err := bed.Do(ns, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", u.Host, 2*time.Second)
		return err
	}); err != nil {
		return 0, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", u.RequestURI(), u.Host)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func scrape(t *testing.T, bed *testbed.Bed) string {
	t.Helper()
	code, body, err := httpGet(t, bed, bed.FwdNS, "http://127.0.0.1:9310/metrics")
	if err != nil || code != 200 {
		t.Fatalf("scrape: %d %v", code, err)
	}
	return body
}

// sample sums the series of name whose labels contain every want pair.
func sample(text, name string, want ...string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

// TestMetricsScrape checks a live /metrics page with promtool while iperf3
// runs, and that the byte counters agree with what iperf3 moved.
func TestMetricsScrape(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	needTools(t, "iperf3", "promtool")
	bed, fw := startForwarder(t)
	nic := `device="` + bed.NIC + `"`
	tapDev := `device="` + bed.LabIf + `"`
	before := scrape(t, bed)

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
			if _, body, err := httpGet(t, bed, bed.FwdNS, "http://127.0.0.1:9310/metrics"); err == nil {
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
	after := scrape(t, bed)
	if len(during) < 3 {
		t.Fatalf("only %d scrapes during the run", len(during))
	}
	mid := during[len(during)/2]
	if sample(mid, "tapfwd_receive_bytes_total", nic) <= sample(before, "tapfwd_receive_bytes_total", nic) {
		t.Error("the scrape taken during the run shows no traffic")
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(mid)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	// iperf3 counts TCP payload; tapfwd counts whole Ethernet frames, which
	// with GSO super-frames adds well under 1% of headers.
	got := sample(after, "tapfwd_receive_bytes_total", nic) - sample(before, "tapfwd_receive_bytes_total", nic)
	tx := sample(after, "tapfwd_transmit_bytes_total", tapDev) - sample(before, "tapfwd_transmit_bytes_total", tapDev)
	ratio := got / float64(r.Bytes)
	t.Logf("iperf3 %d bytes, tapfwd NIC receive %.0f (ratio %.4f), TAP transmit %.0f", r.Bytes, got, ratio, tx)
	if ratio < 0.97 || ratio > 1.05 {
		t.Errorf("tapfwd counted %.0f bytes from the wire, iperf3 moved %d (ratio %.3f)", got, r.Bytes, ratio)
	}
	// Lossless, but userspace GRO merges segments: each merged frame's
	// headers (at most Ethernet+VLAN+IPv6+TCP with options: 138 bytes)
	// are no longer sent separately.
	merged := sample(after, "tapfwd_gro_merged_frames_total", nic) - sample(before, "tapfwd_gro_merged_frames_total", nic)
	if tx > got || got-tx > merged*138 {
		t.Errorf("TAP transmit bytes %.0f, NIC receive bytes %.0f, %v frames merged: bytes went missing", tx, got, merged)
	}
	if v := sample(after, "tapfwd_tap_info", tapDev, `napi="true"`, `vnet_hdr="true"`); v != 1 {
		t.Errorf("tapfwd_tap_info for the TAP = %v", v)
	}
	if v := sample(after, "tapfwd_queue_info", tapDev, `queue="0"`); v != 1 {
		t.Errorf("tapfwd_queue_info = %v", v)
	}
	if sample(after, "tapfwd_batch_frames_count", nic) == 0 || sample(after, "process_cpu_seconds_total") == 0 {
		t.Error("batch histogram or process metrics missing")
	}
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestPrometheusServer runs a real Prometheus against tapfwd on loopback
// in the forwarder's namespace and asks its HTTP API for the TAP's rate.
func TestPrometheusServer(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	needTools(t, "iperf3", "prometheus")
	bed, fw := startForwarder(t, "--metrics-addr", "127.0.0.1:9310")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	os.WriteFile(cfg, []byte(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tapfwd
    static_configs:
      - targets: ["127.0.0.1:9310"]
`), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prom := bed.Command(ctx, bed.FwdNS, "prometheus", "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address=127.0.0.1:9090")
	var log strings.Builder
	prom.Stdout, prom.Stderr = &log, &log
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		prom.Process.Kill()
		prom.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _, err := httpGet(t, bed, bed.FwdNS, "http://127.0.0.1:9090/-/ready"); err == nil && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 20 s:\n%s", log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Prometheus throttles its first target sync (about 5 s): wait until
	// it has scraped tapfwd at least twice before sending traffic.
	for {
		if v := promQuery(t, bed, `count_over_time(up{job="tapfwd"}[1m]) >= 2`); v >= 2 {
			break
		}
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatalf("prometheus never scraped tapfwd:\n%s", log.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
	// lab -> wire: the TAP is where tapfwd receives.
	if _, err := iperf.Run(ctx, bed, iperf.Options{Duration: 4 * time.Second, Reverse: true}); err != nil {
		t.Fatal(err)
	}
	rate := promQuery(t, bed, fmt.Sprintf(`sum(rate(tapfwd_receive_bytes_total{device=%q}[20s]))`, bed.LabIf))
	t.Logf("Prometheus: rate(tapfwd_receive_bytes_total{device=%q}[20s]) = %.3g bytes/s", bed.LabIf, rate)
	// 4 s of iperf3 averaged over 20 s is gigabits; idle chatter is bytes.
	if rate < 1e6 {
		t.Fatalf("Prometheus saw no real TAP receive rate; its log:\n%s", log.String())
	}
	fw.Stop()
}

// promQuery runs an instant query against the Prometheus in bed's fwd
// namespace and returns the first result's value (0 for none).
func promQuery(t *testing.T, bed *testbed.Bed, query string) float64 {
	t.Helper()
	_, body, err := httpGet(t, bed, bed.FwdNS, "http://127.0.0.1:9090/api/v1/query?"+url.Values{"query": {query}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Status string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || resp.Status != "success" {
		t.Fatalf("query %s: %v %s", query, err, body)
	}
	if len(resp.Data.Result) == 0 {
		return 0
	}
	s, _ := resp.Data.Result[0].Value[1].(string)
	v, _ := strconv.ParseFloat(s, 64)
	return v
}
