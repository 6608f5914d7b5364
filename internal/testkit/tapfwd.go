package testkit

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// MetricsAddr is where tapfwd serves /metrics and /status by default, in
// the namespace it runs in (a bed's fwd namespace).
const MetricsAddr = "127.0.0.1:9310"

// Start builds a Forwarder bed and starts exe as `tapfwd run` on it
// (StartOn); both are removed when t ends.
func Start(t testing.TB, exe string, args ...string) (*testbed.Bed, *testbed.Process) {
	t.Helper()
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	return bed, StartOn(t, bed, exe, args...)
}

// StartOn runs exe as `tapfwd run` on bed with args
// (testbed.Bed.StartTapfwd), waits until the lab answers, and stops it
// when t ends.
func StartOn(t testing.TB, bed *testbed.Bed, exe string, args ...string) *testbed.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fw, err := bed.StartTapfwd(ctx, exe, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Stop() })
	return fw
}

// StartHosts runs exe as `tapfwd run` on both hosts of h, host i's with
// its devices and then args(i) (testbed.Hosts.StartTapfwd; args may be
// nil), waits until the labs reach each other, and stops both when t ends.
func StartHosts(t testing.TB, h *testbed.Hosts, exe string, args func(host int) []string) [2]*testbed.Process {
	t.Helper()
	if args == nil {
		args = func(int) []string { return nil }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fws, err := h.StartTapfwd(ctx, exe, args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, fw := range fws {
			fw.Stop()
		}
	})
	return fws
}

// WaitExit waits up to limit for the forwarder to exit on its own and
// returns how long that took; it fails t if it is still running.
func WaitExit(t testing.TB, fw *testbed.Process, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !fw.Exited() {
		if time.Since(start) > limit {
			t.Fatalf("tapfwd still running %v later", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// ReachableWithin pings the lab from the wire until it answers and returns
// how long that took; it fails t after limit.
func ReachableWithin(t testing.TB, bed *testbed.Bed, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := bed.WaitLabReachable(ctx, limit); err != nil {
		t.Fatalf("lab not reachable within %v: %v", limit, err)
	}
	return time.Since(start)
}

var readyLine = regexp.MustCompile(`time=(\S+) level=INFO msg="ready: every worker runs"`)

// ReadyAt is when fw logged that every worker runs (what it tells systemd
// with READY=1). It waits up to 10 s for the line: on a busy machine a
// worker may get there after the lab already answers. It fails t when
// there is none.
func ReadyAt(t testing.TB, fw *testbed.Process) time.Time {
	t.Helper()
	var m []string
	for deadline := time.Now().Add(10 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		m = readyLine.FindStringSubmatch(fw.Output())
	}
	if m == nil {
		t.Fatalf("tapfwd logged no ready line:\n%s", fw.Output())
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// QueueTotals are the per-queue totals tapfwd logs when it stops.
type QueueTotals struct {
	NICRx, TAPTx, TAPRx, NICTx, Drops, Errors int
}

var totalsRE = regexp.MustCompile(`queue totals" queue=(\d+) nic_rx_packets=(\d+) tap_tx_packets=(\d+) tap_rx_packets=(\d+) nic_tx_packets=(\d+) drops=(\d+) errors=(\d+)`)

// Totals parses the queue totals in tapfwd's log, by queue; it fails t
// when there are none.
func Totals(t testing.TB, log string) map[int]QueueTotals {
	t.Helper()
	out := map[int]QueueTotals{}
	for _, m := range totalsRE.FindAllStringSubmatch(log, -1) {
		n := make([]int, 7)
		for i := range n {
			n[i], _ = strconv.Atoi(m[i+1])
		}
		out[n[0]] = QueueTotals{n[1], n[2], n[3], n[4], n[5], n[6]}
	}
	if len(out) == 0 {
		t.Fatalf("no queue totals in tapfwd's log:\n%s", log)
	}
	return out
}
