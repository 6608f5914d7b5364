package forwarding

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
)

// TestMetricsScrape checks a live /metrics page with promtool while iperf3
// runs, and that the byte counters agree with what iperf3 moved.
func TestMetricsScrape(t *testing.T) {
	testkit.NeedRoot(t, "iperf3", "promtool")
	bed, fw := testkit.Start(t, testkit.Tapfwd(t))
	nic := `device="` + bed.NIC + `"`
	tapDev := `device="` + bed.LabIf + `"`
	before := prom.Scrape(t, bed)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	scraper := prom.StartScraper(t, bed, 300*time.Millisecond)
	r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 3 * time.Second})
	during, _ := scraper.Stop()
	if err != nil {
		t.Fatal(err)
	}
	after := prom.Scrape(t, bed)
	if len(during) < 3 {
		t.Fatalf("only %d scrapes during the run", len(during))
	}
	mid := during[len(during)/2]
	if prom.Sample(mid, "tapfwd_bytes_total", nic, `direction="rx"`) <= prom.Sample(before, "tapfwd_bytes_total", nic, `direction="rx"`) {
		t.Error("the scrape taken during the run shows no traffic")
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(mid)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	// iperf3 counts TCP payload; tapfwd counts whole Ethernet frames, which
	// with GSO super-frames adds well under 1% of headers.
	got := prom.Sample(after, "tapfwd_bytes_total", nic, `direction="rx"`) - prom.Sample(before, "tapfwd_bytes_total", nic, `direction="rx"`)
	tx := prom.Sample(after, "tapfwd_bytes_total", tapDev, `direction="tx"`) - prom.Sample(before, "tapfwd_bytes_total", tapDev, `direction="tx"`)
	ratio := got / float64(r.Bytes)
	t.Logf("iperf3 %d bytes, tapfwd NIC receive %.0f (ratio %.4f), TAP transmit %.0f", r.Bytes, got, ratio, tx)
	if ratio < 0.97 || ratio > 1.05 {
		t.Errorf("tapfwd counted %.0f bytes from the wire, iperf3 moved %d (ratio %.3f)", got, r.Bytes, ratio)
	}
	// Lossless, but userspace GRO merges segments: each merged frame's
	// headers (at most Ethernet+VLAN+IPv6+TCP with options: 138 bytes)
	// are no longer sent separately.
	merged := prom.Sample(after, "tapfwd_gro_merged_frames_total", nic) - prom.Sample(before, "tapfwd_gro_merged_frames_total", nic)
	if tx > got || got-tx > merged*138 {
		t.Errorf("TAP transmit bytes %.0f, NIC receive bytes %.0f, %v frames merged: bytes went missing", tx, got, merged)
	}
	if v := prom.Sample(after, "tapfwd_tap_info", tapDev, `napi="true"`, `vnet_hdr="true"`); v != 1 {
		t.Errorf("tapfwd_tap_info for the TAP = %v", v)
	}
	if v := prom.Sample(after, "tapfwd_queue_info", tapDev, `queue="0"`); v != 1 {
		t.Errorf("tapfwd_queue_info = %v", v)
	}
	if prom.Sample(after, "tapfwd_batch_frames_count", nic) == 0 || prom.Sample(after, "process_cpu_seconds_total") == 0 {
		t.Error("batch histogram or process metrics missing")
	}
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestPrometheusServer runs a real Prometheus against tapfwd on loopback
// in the forwarder's namespace and asks its HTTP API for the TAP's rate.
func TestPrometheusServer(t *testing.T) {
	testkit.NeedRoot(t, "iperf3", "prometheus")
	bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--metrics-addr", "127.0.0.1:9310")
	server := prom.StartServer(t, bed, `global:
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
		if v := prom.Query(t, bed, `count_over_time(up{job="tapfwd"}[1m]) >= 2`); v >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus never scraped tapfwd:\n%s", server.Output())
		}
		time.Sleep(300 * time.Millisecond)
	}
	// lab -> wire: the TAP is where tapfwd receives.
	if _, err := iperf.Run(ctx, bed, iperf.Options{Duration: 4 * time.Second, Reverse: true}); err != nil {
		t.Fatal(err)
	}
	rate := prom.Query(t, bed, fmt.Sprintf(`sum(rate(tapfwd_bytes_total{device=%q,direction="rx"}[20s]))`, bed.LabIf))
	t.Logf(`Prometheus: rate(tapfwd_bytes_total{device=%q,direction="rx"}[20s]) = %.3g bytes/s`, bed.LabIf, rate)
	// 4 s of iperf3 averaged over 20 s is gigabits; idle chatter is bytes.
	if rate < 1e6 {
		t.Fatalf("Prometheus saw no real TAP receive rate; its log:\n%s", server.Output())
	}
	fw.Stop()
}

// statusSchema names the layout of /status that status describes.
const statusSchema = "tapfwd-status/1"

// status is what TestStatus reads of /status (and tapfwd status --json).
type status struct {
	Schema        string  `json:"schema"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	RateSeconds   float64 `json:"rate_seconds"`
	NIC           string  `json:"nic"`
	TAP           struct {
		Name       string `json:"name"`
		Netns      string `json:"netns"`
		VnetHdr    bool   `json:"vnet_hdr"`
		Persistent bool   `json:"persistent"`
	} `json:"tap"`
	Queues []struct {
		NICToTAP dirStatus `json:"nic_to_tap"`
		TAPToNIC dirStatus `json:"tap_to_nic"`
	} `json:"queues"`
	VMPorts []struct {
		Dev string `json:"dev"`
	} `json:"vm_ports"`
}

// dirStatus is one direction of a queue in /status.
type dirStatus struct {
	RxPackets        uint64  `json:"rx_packets"`
	TxPackets        uint64  `json:"tx_packets"`
	RxBytesPerSecond float64 `json:"rx_bytes_per_second"`
}

// TestStatus: /status and tapfwd status describe a running forwarder, and
// its counters agree with /metrics (each status value lies between two
// scrapes taken around it); tapfwd status names the process that answered.
func TestStatus(t *testing.T) {
	bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--vm-ports", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// The first rate window ends 5 s after the start.
	time.Sleep(6*time.Second - time.Since(start))
	before := prom.ParseCounts(prom.Scrape(t, bed), bed)
	code, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/status")
	if err != nil || code != 200 {
		t.Fatalf("GET /status: %d %v", code, err)
	}
	after := prom.ParseCounts(prom.Scrape(t, bed), bed)
	var st status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if st.Schema != statusSchema || st.TAP.Name != bed.LabIf || st.TAP.Netns != bed.LabNS || st.NIC != bed.NIC ||
		!st.TAP.VnetHdr || st.TAP.Persistent || len(st.Queues) != 1 || len(st.VMPorts) != 1 || st.UptimeSeconds < 5 {
		t.Errorf("status: %+v", st)
	}
	q := st.Queues[0]
	for _, c := range []struct {
		what          string
		got, lo, hi   float64
		nonZeroNeeded bool
	}{
		{"NIC rx", float64(q.NICToTAP.RxPackets), before.NICRx, after.NICRx, true},
		{"TAP tx", float64(q.NICToTAP.TxPackets), before.TAPTx, after.TAPTx, true},
		{"TAP rx", float64(q.TAPToNIC.RxPackets), before.TAPRx, after.TAPRx, true},
		{"NIC tx", float64(q.TAPToNIC.TxPackets), before.NICTx, after.NICTx, true},
	} {
		if c.got < c.lo || c.got > c.hi || (c.nonZeroNeeded && c.got == 0) {
			t.Errorf("%s: status %v, /metrics %v then %v", c.what, c.got, c.lo, c.hi)
		}
	}
	if st.RateSeconds == 0 || q.NICToTAP.RxBytesPerSecond <= 0 {
		t.Errorf("no rates after 6 s of traffic: window %v s, NIC->TAP %v B/s", st.RateSeconds, q.NICToTAP.RxBytesPerSecond)
	}
	out := testkit.BedRun(t, bed, bed.FwdNS, testkit.Tapfwd(t), "status")
	answered := fmt.Sprintf("answered at %s by pid %d (tapfwd, user root)\n", testkit.MetricsAddr, fw.Pid())
	for _, want := range []string{answered, "TAP " + bed.LabIf + " in network namespace " + bed.LabNS, "NIC " + bed.NIC, "nic->tap", st.VMPorts[0].Dev} {
		if !strings.Contains(out, want) {
			t.Errorf("tapfwd status lacks %q:\n%s", want, out)
		}
	}
	if out := testkit.BedRun(t, bed, bed.FwdNS, testkit.Tapfwd(t), "status", "--json"); !strings.Contains(out, `"schema": "`+statusSchema+`"`) {
		t.Errorf("tapfwd status --json:\n%s", out)
	}
}
