package kernel

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/netns"
)

// TestDeltas: counter by counter differences; SNMPDelta names only the
// counters that moved, sorted, with how much.
func TestDeltas(t *testing.T) {
	a := netns.LinkStats{RxPackets: 10, TxPackets: 20, RxBytes: 30, TxBytes: 40, RxErrors: 5, TxErrors: 6, RxDropped: 7, TxDropped: 8}
	b := netns.LinkStats{RxPackets: 1, TxPackets: 2, RxBytes: 3, TxBytes: 4, RxErrors: 1, TxErrors: 2, RxDropped: 3, TxDropped: 4}
	want := netns.LinkStats{RxPackets: 9, TxPackets: 18, RxBytes: 27, TxBytes: 36, RxErrors: 4, TxErrors: 4, RxDropped: 4, TxDropped: 4}
	if got := NetdevDelta(a, b); got != want {
		t.Errorf("NetdevDelta = %+v, want %+v", got, want)
	}
	now := procfs.Counters{"Udp.InDatagrams": 15, "Udp.InErrors": 3, "Tcp.RetransSegs": 2, "Ip.Forwarding": 1}
	then := procfs.Counters{"Udp.InDatagrams": 5, "Udp.InErrors": 3, "Tcp.RetransSegs": 0, "Ip.Forwarding": 1}
	if got := SNMPDelta(now, then); got != "Tcp.RetransSegs=2 Udp.InDatagrams=10" {
		t.Errorf("SNMPDelta = %q", got)
	}
	if got := SNMPDelta(then, then); got != "" {
		t.Errorf("SNMPDelta of equal counters = %q", got)
	}
}

// TestProcess reads this test process: its status, thread count, fds
// (one more with a file open), CPU time (more after spinning) and every
// thread's CPU list; a process that is gone fails the test.
func TestProcess(t *testing.T) {
	pid := os.Getpid()
	if st := Status(t, pid); st["Pid"] != fmt.Sprint(pid) || !strings.HasPrefix(st["Name"], "kernel.test") {
		t.Errorf("Status: Pid %q Name %q", st["Pid"], st["Name"])
	}
	threads := ProcStatus(t, pid, "Threads")
	if threads < 1 {
		t.Errorf("Threads = %d", threads)
	}
	pinned, n := ThreadsPinned(pid), 0
	for _, k := range pinned {
		n += k
	}
	if n < threads-2 || n > threads+2 {
		t.Errorf("ThreadsPinned counts %d threads (%v), status says %d", n, pinned, threads)
	}
	fds := FDCount(t, pid)
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if got := FDCount(t, pid); got != fds+1 {
		t.Errorf("FDCount with one more file open: %d, before %d", got, fds)
	}
	f.Close()
	// spin until the scheduler counts 30 ms more on a CPU; the tick-based
	// CPU time grows with it
	cpu := CPUTime(t, pid)
	run, _ := SchedStat(pid)
	for deadline := time.Now().Add(5 * time.Second); ; runtime.Gosched() {
		if now, _ := SchedStat(pid); now >= run+30*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SchedStat's run time stayed at %v for 5 s of spinning", run)
		}
	}
	if CPUTime(t, pid) <= cpu {
		t.Errorf("CPUTime did not grow from %v", cpu)
	}
	r := &testkit.Recorder{TB: t}
	gone := exitedPid(t)
	Status(r, gone)
	FDCount(r, gone)
	if len(r.Errs) != 2 || !strings.Contains(r.Errs[0], "is gone") {
		t.Errorf("a process that is gone: %q", r.Errs)
	}
}

// exitedPid is the id of a process that has exited and been reaped.
func exitedPid(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// TestCheckDropped: a process setpriv made nobody without capabilities
// and with no_new_privs passes; this one (root) fails on every count.
func TestCheckDropped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping privileged test: not root (setpriv cannot drop to nobody)")
	}
	need.Tools(t, "setpriv")
	c := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		"--bounding-set=-all", "--no-new-privs", "sleep", "10")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st := Status(t, c.Process.Pid); st["Name"] == "sleep" || time.Now().After(deadline) {
			break
		}
	}
	r := &testkit.Recorder{TB: t}
	CheckDropped(r, c.Process.Pid)
	if len(r.Errs) != 0 {
		t.Errorf("a dropped process: %q", r.Errs)
	}
	r = &testkit.Recorder{TB: t}
	CheckDropped(r, os.Getpid())
	if joined := strings.Join(r.Errs, "\n"); !strings.Contains(joined, "CapEff") || !strings.Contains(joined, "Uid") || !strings.Contains(joined, "NoNewPrivs") {
		t.Errorf("root passed as dropped: %q", r.Errs)
	}
}
