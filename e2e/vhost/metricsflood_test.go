package vhost

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// floodConns is how many idle connections TestMetricsFlood opens, and
// floodFds how many more fds tapfwd may then hold.
const floodConns, floodFds = 3000, 300

// TestMetricsFlood (issue 35): a local user opens 3,000 connections to
// tapfwd's metrics port, each left idle after one GET /status. tapfwd's
// fds grow by at most 300, /metrics still answers within 2 s, and a
// vhost-user front-end still connects to its VM port and runs.
func TestMetricsFlood(t *testing.T) {
	testkit.NeedRoot(t)
	raiseNofile(t, floodConns+1000)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), "--vhost-user", filepath.Join(t.TempDir(), "vhost"), "--vm-ports", "1")
	port := vhostPorts(t, bed, 1)[0]
	fds0 := countFds(t, fw.Pid())
	start := time.Now()
	if err := bed.Do(bed.FwdNS, func() error { return flood(t, floodConns) }); err != nil {
		t.Fatalf("%v; tapfwd said:\n%s", err, fw.Tail(5))
	}
	fds := countFds(t, fw.Pid())
	t.Logf("%d idle connections in %v: tapfwd's fds %d -> %d", floodConns, time.Since(start).Round(time.Millisecond), fds0, fds)
	if fds-fds0 > floodFds {
		t.Errorf("tapfwd holds %d fds more after %d idle connections, want at most %d", fds-fds0, floodConns, floodFds)
	}
	start = time.Now()
	code, _, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/metrics")
	if took := time.Since(start); err != nil || code != http.StatusOK || took > 2*time.Second {
		t.Errorf("GET /metrics behind the idle connections: %d, %v after %v; want 200 within 2 s", code, err, took)
	}
	d, err := vhostusertest.Dial(port.Socket, vhostusertest.Config{})
	if err != nil {
		t.Fatalf("a front-end behind the idle connections: %v; tapfwd said:\n%s", err, fw.Tail(5))
	}
	defer d.Close()
	for deadline := time.Now().Add(5 * time.Second); vhostPorts(t, bed, 1)[0].State != "running"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("port 0 is %s with a front-end connected, want running", vhostPorts(t, bed, 1)[0].State)
		}
	}
}

// flood opens n connections to the metrics port, one after another, and
// leaves each open and idle after one GET /status; they are closed when t
// ends. It runs in the namespace tapfwd serves in (bed.Do).
func flood(t *testing.T, n int) error {
	for i := range n {
		c, err := net.DialTimeout("tcp", testkit.MetricsAddr, 2*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /status HTTP/1.1\r\nHost: %s\r\n\r\n", testkit.MetricsAddr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return fmt.Errorf("GET /status on connection %d: %w", i, err)
		}
		resp.Body.Close() // read to its end: the connection stays open, idle
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /status on connection %d: %s", i, resp.Status)
		}
	}
	return nil
}

// countFds is how many fds process pid holds.
func countFds(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// raiseNofile raises this process's soft RLIMIT_NOFILE to at least n.
func raiseNofile(t *testing.T, n uint64) {
	t.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur >= n {
		return
	}
	l.Cur, l.Max = n, max(l.Max, n) // root may raise the hard limit too
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatalf("raising RLIMIT_NOFILE to %d: %v", n, err)
	}
}
