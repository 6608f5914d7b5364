package iperf

import (
	"context"
	"encoding/json"
	"flag"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

var update = flag.Bool("update", false, "capture fresh iperf3 JSON samples into testdata/ (needs root and iperf3)")

// lookup walks a decoded JSON document along path.
func lookup(t *testing.T, doc any, path ...string) float64 {
	t.Helper()
	for _, k := range path {
		m, ok := doc.(map[string]any)
		if !ok {
			t.Fatalf("JSON path %v: %q is not an object", path, k)
		}
		doc = m[k]
	}
	f, ok := doc.(float64)
	if !ok {
		t.Fatalf("JSON path %v: %v is not a number", path, doc)
	}
	return f
}

func TestParseSamples(t *testing.T) {
	for _, tc := range []struct {
		file         string
		udp, reverse bool
	}{
		{file: "tcp.json"},
		{file: "tcp_reverse.json", reverse: true},
		{file: "udp.json", udp: true},
		{file: "udp_reverse.json", udp: true, reverse: true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			r, err := parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Raw) != string(raw) {
				t.Error("Raw is not the input")
			}
			if r.BitsPerSecond <= 0 || r.Bytes <= 0 {
				t.Errorf("BitsPerSecond %v Bytes %d, want > 0", r.BitsPerSecond, r.Bytes)
			}
			if got, want := r.BitsPerSecond, lookup(t, doc, "end", "sum_received", "bits_per_second"); got != want {
				t.Errorf("BitsPerSecond %v, want end.sum_received %v", got, want)
			}
			if got, want := r.Bytes, int64(lookup(t, doc, "end", "sum_received", "bytes")); got != want {
				t.Errorf("Bytes %v, want end.sum_received %v", got, want)
			}
			host := lookup(t, doc, "end", "cpu_utilization_percent", "host_total")
			remote := lookup(t, doc, "end", "cpu_utilization_percent", "remote_total")
			if tc.reverse {
				host, remote = remote, host
			}
			if r.SenderCPU != host || r.ReceiverCPU != remote {
				t.Errorf("SenderCPU %v ReceiverCPU %v, want %v %v", r.SenderCPU, r.ReceiverCPU, host, remote)
			}
			if tc.udp {
				// The receiver's window, in both directions.
				if got, want := r.Packets, int64(lookup(t, doc, "end", "sum_received", "packets")); got != want || got <= 0 {
					t.Errorf("Packets %d, want end.sum_received %d (> 0)", got, want)
				}
				if got, want := r.LostPackets, int64(lookup(t, doc, "end", "sum_received", "lost_packets")); got != want {
					t.Errorf("LostPackets %d, want %d", got, want)
				}
				if sent := int64(lookup(t, doc, "end", "sum", "packets")); tc.reverse && sent <= r.Packets {
					t.Errorf("reverse sample: the sender's count %d is not above the receiver's window %d; the sample no longer shows why sum_received is used", sent, r.Packets)
				}
				if want := 100 * float64(r.LostPackets) / float64(r.Packets); math.Abs(r.LostPercent-want) > 1e-9 {
					t.Errorf("LostPercent %v, want %v", r.LostPercent, want)
				}
				if r.Retransmits != 0 {
					t.Errorf("UDP Retransmits %d", r.Retransmits)
				}
				return
			}
			if got, want := r.SentBytes, int64(lookup(t, doc, "end", "sum_sent", "bytes")); got != want || got <= 0 {
				t.Errorf("SentBytes %d, want end.sum_sent %d (> 0)", got, want)
			}
			if got, want := r.Retransmits, int(lookup(t, doc, "end", "sum_sent", "retransmits")); got != want {
				t.Errorf("Retransmits %d, want %d", got, want)
			}
			if r.Packets != 0 || r.LostPackets != 0 {
				t.Errorf("TCP Packets %d LostPackets %d, want 0", r.Packets, r.LostPackets)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"start":{},"end":{},"error":"unable to connect to server: Connection refused"}`, "iperf3: unable to connect"},
		{`not json`, "parsing iperf3 JSON"},
		{`{"start":{"test_start":{"protocol":"SCTP"}},"end":{}}`, "unknown protocol"},
		{`{"start":{"test_start":{"protocol":"TCP"}},"end":{}}`, "without end.sum_sent"},
		{`{"start":{"test_start":{"protocol":"UDP"}},"end":{}}`, "without end.sum"},
	} {
		_, err := parse([]byte(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%s) = %v, want error containing %q", tc.raw, err, tc.want)
		}
	}
}

// TestCapture refreshes testdata/ from real runs:
//
//	go test ./testbed/iperf -run TestCapture -args -update
func TestCapture(t *testing.T) {
	if !*update {
		t.Skip("run with -args -update to capture testdata")
	}
	b := testbed.NewForTest(t, testbed.Config{Mode: testbed.Direct})
	for name, opt := range map[string]Options{
		"tcp.json":         {Duration: time.Second, Streams: 2},
		"tcp_reverse.json": {Duration: time.Second, Reverse: true},
		"udp.json":         {Duration: time.Second, UDP: true, Len: 64, Bitrate: "0"},
	} {
		r, err := Run(context.Background(), b, opt)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join("testdata", name), r.Raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func needIperf(t *testing.T) {
	t.Helper()
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	need.Tools(t, "iperf3")
}

func checkSane(t *testing.T, what string, r Result, d time.Duration) {
	t.Helper()
	if r.BitsPerSecond <= 0 || r.Bytes <= 0 {
		t.Errorf("%s: BitsPerSecond %v Bytes %d, want > 0", what, r.BitsPerSecond, r.Bytes)
	}
	// Bytes over the test time should give about the reported rate.
	if got := float64(r.Bytes) * 8 / d.Seconds(); got < r.BitsPerSecond/2 || got > r.BitsPerSecond*2 {
		t.Errorf("%s: %d bytes in %v is %.3g bit/s, reported %.3g", what, r.Bytes, d, got, r.BitsPerSecond)
	}
	maxCPU := 100 * float64(runtime.NumCPU())
	if r.SenderCPU <= 0 || r.SenderCPU > maxCPU || r.ReceiverCPU <= 0 || r.ReceiverCPU > maxCPU {
		t.Errorf("%s: SenderCPU %v ReceiverCPU %v, want in (0, %v]", what, r.SenderCPU, r.ReceiverCPU, maxCPU)
	}
	if r.Retransmits < 0 || len(r.Raw) == 0 {
		t.Errorf("%s: Retransmits %d, %d bytes of JSON", what, r.Retransmits, len(r.Raw))
	}
}

// TestRun measures each baseline bed in both directions. The figures are
// logged, never asserted: a shared machine moves them too much for a bound.
func TestRun(t *testing.T) {
	needIperf(t)
	const d = 2 * time.Second
	for _, mode := range []testbed.Mode{testbed.Direct, testbed.Bridge} {
		t.Run(mode.String(), func(t *testing.T) {
			b := testbed.NewReachableForTest(t, testbed.Config{Mode: mode})
			ctx := context.Background()
			for _, rev := range []bool{false, true} {
				dir := "wire->lab"
				if rev {
					dir = "lab->wire"
				}
				r, err := Run(ctx, b, Options{Duration: d, Reverse: rev})
				if err != nil {
					t.Fatalf("TCP %s: %v", dir, err)
				}
				checkSane(t, "TCP "+dir, r, d)
				t.Logf("%s TCP %s: %.2f Gbit/s, %d retransmits, CPU sender %.0f%% receiver %.0f%%",
					mode, dir, r.BitsPerSecond/1e9, r.Retransmits, r.SenderCPU, r.ReceiverCPU)
			}
			if mode != testbed.Bridge {
				return
			}
			r, err := Run(ctx, b, Options{Duration: d, UDP: true, Len: 64, Bitrate: "0"})
			if err != nil {
				t.Fatalf("UDP: %v", err)
			}
			checkSane(t, "UDP", r, d)
			if r.Packets <= 0 || r.LostPackets < 0 || r.LostPackets > r.Packets || r.LostPercent < 0 || r.LostPercent > 100 {
				t.Errorf("UDP: Packets %d LostPackets %d LostPercent %v", r.Packets, r.LostPackets, r.LostPercent)
			}
			if r.Retransmits != 0 {
				t.Errorf("UDP: Retransmits %d", r.Retransmits)
			}
			t.Logf("%s UDP 64 B wire->lab: %.0f kpps sent, %.1f%% lost, %.3f Gbit/s received",
				mode, float64(r.Packets)/d.Seconds()/1e3, r.LostPercent, r.BitsPerSecond/1e9)
		})
	}
}

// TestRunWithoutPath runs on a Forwarder bed with no forwarder: the lab has
// no address, so the server cannot bind, and Run must say so promptly.
func TestRunWithoutPath(t *testing.T) {
	needIperf(t)
	b := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	start := time.Now()
	_, err := Run(context.Background(), b, Options{Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "server") {
		t.Errorf("Run without a path: %v, want a server error", err)
	}
	t.Log(err)
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("Run took %v to fail", el)
	}
}

func TestRunNoIperf(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Run(context.Background(), &testbed.Bed{}, Options{})
	if err == nil || err.Error() != "iperf3 not found: install it with apt-get install iperf3" {
		t.Errorf("Run without iperf3: %v", err)
	}
}

// TestRunPinned checks that Pin puts the client and the server on the CPUs
// asked, as a user would check: Cpus_allowed_list of the iperf3 processes
// in each namespace while the test runs.
func TestRunPinned(t *testing.T) {
	needIperf(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to tell the two sides apart")
	}
	b := testbed.NewReachableForTest(t, testbed.Config{Mode: testbed.Direct})
	ctx := context.Background()
	ip, err := exec.LookPath("ip")
	if err != nil {
		ip = "/usr/sbin/ip"
	}
	pin := &Pinning{Wire: 1, Lab: 0}
	seen := map[string]string{} // namespace -> Cpus_allowed_list of its iperf3
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, b, Options{Duration: 2 * time.Second, UDP: true, Len: 64, Bitrate: "10M", Pin: pin})
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if seen[b.WireNS] != "1" || seen[b.LabNS] != "0" {
				t.Errorf("iperf3 CPUs by namespace: %v; want the wire side on 1, the lab side on 0", seen)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		for _, ns := range []string{b.WireNS, b.LabNS} {
			out, err := exec.Command(ip, "netns", "pids", ns).Output()
			if err != nil {
				continue
			}
			for _, pid := range strings.Fields(string(out)) {
				status, err := os.ReadFile("/proc/" + pid + "/status")
				if err != nil || !strings.Contains(string(status), "Name:\tiperf3\n") {
					continue
				}
				for _, l := range strings.Split(string(status), "\n") {
					if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:\t"); ok {
						seen[ns] = v
					}
				}
			}
		}
	}
}

// TestRunOmit checks that Omit runs a pre-test that the figures leave out:
// iperf3 reports the omit it was given, marks the first interval omitted,
// and the bytes are those of the measured second only.
func TestRunOmit(t *testing.T) {
	needIperf(t)
	b := testbed.NewReachableForTest(t, testbed.Config{Mode: testbed.Direct})
	ctx := context.Background()
	start := time.Now()
	r, err := Run(ctx, b, Options{Duration: time.Second, Omit: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 2*time.Second {
		t.Errorf("a 1 s run with 1 s omitted took %v, want at least 2 s", el)
	}
	checkSane(t, "TCP with omit", r, time.Second)
	var doc struct {
		Start struct {
			TestStart struct {
				Omit int `json:"omit"`
			} `json:"test_start"`
		} `json:"start"`
		Intervals []struct {
			Sum struct {
				Bytes   int64 `json:"bytes"`
				Omitted bool  `json:"omitted"`
			} `json:"sum"`
		} `json:"intervals"`
	}
	if err := json.Unmarshal(r.Raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Start.TestStart.Omit != 1 {
		t.Errorf("iperf3 reports omit %d, want 1 (0.5 s rounded up)", doc.Start.TestStart.Omit)
	}
	var omitted, kept int64
	for _, iv := range doc.Intervals {
		if iv.Sum.Omitted {
			omitted += iv.Sum.Bytes
		} else {
			kept += iv.Sum.Bytes
		}
	}
	if omitted == 0 || kept == 0 {
		t.Errorf("intervals: %d bytes omitted, %d kept; want both", omitted, kept)
	}
	t.Logf("omitted %d bytes, measured %d (receiver %d)", omitted, kept, r.Bytes)
}

// TestRunAddr runs iperf3 to another address of the lab (Options.Addr), and
// across the two-host bed's bridges (a Hosts view).
func TestRunAddr(t *testing.T) {
	needIperf(t)
	ctx := context.Background()
	b := testbed.NewForTest(t, testbed.Config{Mode: testbed.Direct})
	x := b.LabAddr.Addr().As4()
	other := netip.AddrFrom4([4]byte{x[0], x[1], x[2], 3})
	if _, err := b.Run(ctx, b.LabNS, "ip", "addr", "add", other.String()+"/24", "dev", b.LabIf); err != nil {
		t.Fatal(err)
	}
	r, err := Run(ctx, b, Options{Duration: time.Second, Addr: other})
	if err != nil {
		t.Fatal(err)
	}
	checkSane(t, "TCP to "+other.String(), r, time.Second)

	h := testbed.NewHostsForTest(t, testbed.HostsConfig{Mode: testbed.HostsBridge})
	if err := h.WaitReachable(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	r, err = Run(ctx, h.View(0, 1), Options{Duration: time.Second, Reverse: true})
	if err != nil {
		t.Fatal(err)
	}
	checkSane(t, "TCP lab 2 -> lab 1 over VXLAN and bridges", r, time.Second)
	t.Logf("two-host bridge bed, lab 2 -> lab 1: %.2f Gbit/s", r.BitsPerSecond/1e9)
}

// TestRunBytes sends a byte count (-n) instead of running for a time, both
// ways: the sender reports at least that much sent, the receiver no more
// than was sent.
func TestRunBytes(t *testing.T) {
	needIperf(t)
	b := testbed.NewReachableForTest(t, testbed.Config{Mode: testbed.Direct})
	ctx := context.Background()
	const n = 50 << 20
	for _, rev := range []bool{false, true} {
		r, err := Run(ctx, b, Options{Bytes: n, Reverse: rev})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("reverse %v: sent %d bytes, received %d", rev, r.SentBytes, r.Bytes)
		if r.SentBytes < n {
			t.Errorf("reverse %v: sent %d bytes, want at least %d", rev, r.SentBytes, n)
		}
		if r.Bytes <= 0 || r.Bytes > r.SentBytes {
			t.Errorf("reverse %v: received %d of %d bytes sent", rev, r.Bytes, r.SentBytes)
		}
	}
	if _, err := Run(ctx, b, Options{Bytes: -1}); err == nil {
		t.Error("Bytes -1 accepted")
	}
}
