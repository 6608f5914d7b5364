package testkit

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testbed"
)

// NeedRoot skips t when test beds cannot be built here (not root, no
// CAP_NET_ADMIN, no ip command).
func NeedRoot(t testing.TB) {
	t.Helper()
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
}

// NeedTools fails t when one of tools is not on $PATH: the README's test
// command installs them, and a test that needs one must not pass silently.
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (the README's test command installs it): %v", tool, err)
		}
	}
}

// StartTapfwd builds a Forwarder bed and starts exe as `tapfwd run` on it
// (StartTapfwdOn); both are removed when t ends.
func StartTapfwd(t testing.TB, exe string, args ...string) (*testbed.Bed, *testbed.Process) {
	t.Helper()
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	return bed, StartTapfwdOn(t, bed, exe, args...)
}

// StartTapfwdOn runs exe as `tapfwd run` in bed's fwd namespace with the
// bed's devices (testbed.Bed.ForwarderArgs) and then args, waits until the
// lab answers, and stops it when t ends.
func StartTapfwdOn(t testing.TB, bed *testbed.Bed, exe string, args ...string) *testbed.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all := append(append([]string{"run"}, bed.ForwarderArgs()...), args...)
	fw, err := bed.StartForwarder(ctx, "tapfwd", exe, all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Stop() })
	return fw
}

// StartTapfwdHosts runs exe as `tapfwd run` on both hosts of h, each with
// its devices (testbed.Hosts.ForwarderArgs) and then args, waits until the
// labs reach each other, and stops both when t ends.
func StartTapfwdHosts(t testing.TB, h *testbed.Hosts, exe string, args ...string) [2]*testbed.Process {
	t.Helper()
	return StartTapfwdHostsEach(t, h, exe, func(int) []string { return args })
}

// StartTapfwdHostsEach is StartTapfwdHosts with flags of each host's own:
// host i's forwarder gets its devices and then args(i).
func StartTapfwdHostsEach(t testing.TB, h *testbed.Hosts, exe string, args func(host int) []string) [2]*testbed.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fws, err := h.StartForwarders(ctx, "tapfwd", exe, func(i int) []string {
		return append(append([]string{"run"}, h.ForwarderArgs(i)...), args(i)...)
	})
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

// BedRun runs args in namespace ns of bed and returns the output; it fails
// t when the command fails or takes more than 20 s.
func BedRun(t testing.TB, bed *testbed.Bed, ns string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := bed.Run(ctx, ns, args[0], args[1:]...)
	if err != nil {
		t.Fatalf("%s in %s: %v", strings.Join(args, " "), ns, err)
	}
	return out
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
