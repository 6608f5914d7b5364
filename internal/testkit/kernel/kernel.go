package kernel

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/netns"
)

// Netdev reads the kernel's counters of dev in namespace ns over rtnetlink
// (IFLA_STATS64, what ip -s link shows).
func Netdev(t testing.TB, ns, dev string) netns.LinkStats {
	t.Helper()
	return ask(t, ns, dev, "counters of ", (*netns.NS).Stats)
}

// ask asks rtnetlink in namespace ns about dev with query; what names the
// answer when it fails t.
func ask[T any](t testing.TB, ns, dev, what string, query func(*netns.NS, string) (T, error)) T {
	t.Helper()
	v, err := query(OpenNS(t, ns), dev)
	if err != nil {
		t.Fatalf("%s%s in %s: %v", what, dev, ns, err)
	}
	return v
}

// OpenNS opens namespace ns until t ends.
func OpenNS(t testing.TB, ns string) *netns.NS {
	t.Helper()
	n, err := netns.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// NetdevDelta is a - b, counter by counter.
func NetdevDelta(a, b netns.LinkStats) netns.LinkStats {
	return netns.LinkStats{
		RxPackets: a.RxPackets - b.RxPackets, TxPackets: a.TxPackets - b.TxPackets,
		RxBytes: a.RxBytes - b.RxBytes, TxBytes: a.TxBytes - b.TxBytes,
		RxErrors: a.RxErrors - b.RxErrors, TxErrors: a.TxErrors - b.TxErrors,
		RxDropped: a.RxDropped - b.RxDropped, TxDropped: a.TxDropped - b.TxDropped,
	}
}

// Link is what rtnetlink says of dev in namespace ns.
func Link(t testing.TB, ns, dev string) netns.Link {
	t.Helper()
	return ask(t, ns, dev, "", (*netns.NS).Link)
}

// LinkMAC is the Ethernet address of dev in namespace ns.
func LinkMAC(t testing.TB, ns, dev string) net.HardwareAddr {
	t.Helper()
	return Link(t, ns, dev).MAC
}

var linkLocalRE = regexp.MustCompile(`inet6 (fe80::[0-9a-f:]+)/64`)

// LinkLocal waits for dev's IPv6 link-local address in ns to finish
// duplicate address detection, and returns it.
func LinkLocal(t testing.TB, bed *testbed.Bed, ns, dev string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := testkit.BedRun(t, bed, ns, "ip", "-6", "-o", "addr", "show", "dev", dev, "scope", "link")
		if m := linkLocalRE.FindStringSubmatch(out); m != nil && !strings.Contains(out, "tentative") {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no usable link-local address: %q", dev, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// SNMP reads the counters of namespace ns's /proc/net/snmp, netstat and
// snmp6 ("Udp.InDatagrams", "TcpExt.TCPTimeouts", "Udp6.InErrors").
func SNMP(t testing.TB, bed *testbed.Bed, ns string) procfs.Counters {
	t.Helper()
	out := procfs.Counters{}
	// /proc/thread-self/net is the namespace of the thread that reads it:
	// bed.Do's, which joined ns.
	err := bed.Do(ns, func() error {
		for _, f := range []string{"snmp", "netstat", "snmp6"} {
			raw, err := os.ReadFile("/proc/thread-self/net/" + f)
			if err != nil {
				return err
			}
			c := procfs.ParseSNMP(string(raw))
			if f == "snmp6" {
				c = procfs.ParseSNMP6(string(raw))
			}
			for k, v := range c {
				out[k] = v
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("snmp counters of %s: %v", ns, err)
	}
	return out
}

// SNMPDelta formats the counters that differ between a and b
// ("Udp.InDatagrams=12 ..."), sorted.
func SNMPDelta(a, b procfs.Counters) string {
	var parts []string
	for k, v := range a {
		if v != b[k] {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v-b[k]))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// UDPArrived is the number of UDP datagrams ns's stack has received,
// delivered or dropped for a full socket buffer.
func UDPArrived(t testing.TB, bed *testbed.Bed, ns string) int {
	t.Helper()
	c := SNMP(t, bed, ns)
	in, err1 := c.Counter("Udp", "InDatagrams")
	drop, err2 := c.Counter("Udp", "RcvbufErrors")
	if err1 != nil || err2 != nil {
		t.Fatalf("no Udp counters in %s's /proc/net/snmp", ns)
	}
	return int(in + drop)
}

// Status reads /proc/PID/status as field -> value.
func Status(t testing.TB, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("pid %d is gone: %v", pid, err)
	}
	return procfs.ParseStatus(string(b))
}

// CheckDropped checks every thread of pid as a dropped --user nobody
// leaves it: uid nobody, no supplementary groups, no capability in any
// set, no_new_privs.
func CheckDropped(t testing.TB, pid int) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	zero := "0000000000000000"
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		st := Status(t, tid)
		for field, want := range map[string]string{"CapEff": zero, "CapPrm": zero, "CapInh": zero, "CapAmb": zero, "CapBnd": zero,
			"NoNewPrivs": "1", "Uid": "65534\t65534\t65534\t65534", "Groups": ""} {
			if got := st[field]; got != want {
				t.Errorf("thread %d: %s %q, want %q", tid, field, got, want)
			}
		}
	}
}

// ProcStatus reads the number in a field of /proc/PID/status (VmRSS in kB,
// Threads).
func ProcStatus(t testing.TB, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("tapfwd (pid %d) is gone: %v", pid, err)
	}
	n, err := procfs.StatusNumber(string(b), field)
	if err != nil {
		t.Fatalf("/proc/%d/status: %v", pid, err)
	}
	return int(n)
}

// ThreadsPinned counts pid's threads by their Cpus_allowed_list ("1",
// "0-3").
func ThreadsPinned(pid int) map[string]int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	pinned := map[string]int{}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if v, ok := procfs.ParseStatus(string(b))["Cpus_allowed_list"]; ok {
			pinned[v]++
		}
	}
	return pinned
}

// FDCount is the number of open file descriptors of pid.
func FDCount(t testing.TB, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("tapfwd (pid %d): %v", pid, err)
	}
	return len(ents)
}

// SchedStat sums the schedstat of pid's threads: time on a CPU and time
// spent runnable but waiting for one. Threads that are gone are left out.
func SchedStat(pid int) (run, wait time.Duration) {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
		if err != nil {
			continue
		}
		if r, w, err := procfs.ParseSchedStat(string(b)); err == nil {
			run += r
			wait += w
		}
	}
	return run, wait
}

// CPUTime is the user plus system CPU time pid has used.
func CPUTime(t testing.TB, pid int) time.Duration {
	t.Helper()
	s, err := procfs.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return s.CPU()
}
