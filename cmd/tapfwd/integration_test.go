package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/testbed"
	"github.com/tapfwd/tapfwd/testbed/iperf"
)

func exe(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (the README's test command installs it): %v", tool, err)
		}
	}
}

// startForwarder builds a Forwarder bed and starts tapfwd on it; both are
// removed when t ends.
func startForwarder(t *testing.T, args ...string) (*testbed.Bed, *testbed.Process) {
	t.Helper()
	return startForwarderExe(t, exe(t), args...)
}

// startForwarderExe is startForwarder with a given tapfwd binary.
func startForwarderExe(t *testing.T, exe string, args ...string) (*testbed.Bed, *testbed.Process) {
	t.Helper()
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fw, err := forwarder.Start(ctx, bed, exe, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Stop() })
	return bed, fw
}

func bedRun(t *testing.T, bed *testbed.Bed, ns string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := bed.Run(ctx, ns, args[0], args[1:]...)
	if err != nil {
		t.Fatalf("%s in %s: %v", strings.Join(args, " "), ns, err)
	}
	return out
}

var macRE = regexp.MustCompile(`link/ether ([0-9a-f:]{17})`)

func tapMAC(t *testing.T, bed *testbed.Bed) string {
	out := bedRun(t, bed, bed.LabNS, "ip", "-o", "link", "show", "dev", bed.LabIf)
	m := macRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no MAC in %q", out)
	}
	return m[1]
}

// linkLocal waits for dev's IPv6 link-local address in ns to finish
// duplicate address detection, and returns it.
func linkLocal(t *testing.T, bed *testbed.Bed, ns, dev string) string {
	re := regexp.MustCompile(`inet6 (fe80::[0-9a-f:]+)/64`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := bedRun(t, bed, ns, "ip", "-6", "-o", "addr", "show", "dev", dev, "scope", "link")
		if m := re.FindStringSubmatch(out); m != nil && !strings.Contains(out, "tentative") {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no usable link-local address: %q", dev, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// udpArrived is the number of UDP datagrams ns's stack has received,
// delivered or dropped for a full socket buffer (/proc/net/snmp).
func udpArrived(t *testing.T, bed *testbed.Bed, ns string) int {
	lines := strings.Split(bedRun(t, bed, ns, "cat", "/proc/net/snmp"), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "Udp:") || !strings.HasPrefix(lines[i+1], "Udp:") {
			continue
		}
		names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		sum := 0
		for j, n := range names {
			if (n == "InDatagrams" || n == "RcvbufErrors") && j < len(vals) {
				v, _ := strconv.Atoi(vals[j])
				sum += v
			}
		}
		return sum
	}
	t.Fatalf("no Udp counters in %s's /proc/net/snmp", ns)
	return 0
}

// countedDrops is every drop tapfwd exports: its own (kernel_ring
// included) and the kernel's TAP and NIC netdev drop counters.
func countedDrops(t *testing.T, bed *testbed.Bed) int {
	m := scrape(t, bed)
	return int(sample(m, "tapfwd_drops_total") + sample(m, "tapfwd_netdev_transmit_drop_total") +
		sample(m, "tapfwd_netdev_receive_drop_total"))
}

type queueTotals struct {
	nicRx, tapTx, tapRx, nicTx, drops, errors int
}

var totalsRE = regexp.MustCompile(`queue totals" queue=(\d+) nic_rx_packets=(\d+) tap_tx_packets=(\d+) tap_rx_packets=(\d+) nic_tx_packets=(\d+) drops=(\d+) errors=(\d+)`)

// totals parses the per-queue totals tapfwd logs when it stops.
func totals(t *testing.T, log string) map[int]queueTotals {
	out := map[int]queueTotals{}
	for _, m := range totalsRE.FindAllStringSubmatch(log, -1) {
		n := make([]int, 7)
		for i := range n {
			n[i], _ = strconv.Atoi(m[i+1])
		}
		out[n[0]] = queueTotals{n[1], n[2], n[3], n[4], n[5], n[6]}
	}
	if len(out) == 0 {
		t.Fatalf("no queue totals in tapfwd's log:\n%s", log)
	}
	return out
}

// TestModes checks that ping, ARP, IPv6 neighbour discovery, UDP and TCP in
// both directions pass through tapfwd in every napi x vnet-hdr mode, with
// the veth offloads at their defaults (TSO, GSO, checksum offload on).
func TestModes(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	needTools(t, "iperf3", "ping")
	for _, napi := range []string{"on", "off"} {
		for _, vnet := range []string{"on", "off"} {
			t.Run("napi-"+napi+"/vnet-"+vnet, func(t *testing.T) {
				bed, fw := startForwarder(t, "--napi", napi, "--vnet-hdr", vnet)
				// StartForwarder already saw IPv4 ping answered, which
				// needed ARP through tapfwd both ways.
				wantLog := fmt.Sprintf("napi=%v vnet_hdr=%v", napi == "on", vnet == "on")
				if !strings.Contains(fw.Output(), wantLog) {
					t.Errorf("tapfwd did not negotiate %s:\n%s", wantLog, fw.Output())
				}
				mac := tapMAC(t, bed)
				neigh := bedRun(t, bed, bed.WireNS, "ip", "neigh", "show", bed.LabAddr.Addr().String(), "dev", bed.WireIf)
				if !strings.Contains(neigh, mac) {
					t.Errorf("ARP: wire's neighbour entry %q lacks the TAP's MAC %s", neigh, mac)
				}
				linkLocal(t, bed, bed.WireNS, bed.WireIf) // ping needs a source address
				ll := linkLocal(t, bed, bed.LabNS, bed.LabIf)
				bedRun(t, bed, bed.WireNS, "ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", ll+"%"+bed.WireIf)
				neigh6 := bedRun(t, bed, bed.WireNS, "ip", "-6", "neigh", "show", ll, "dev", bed.WireIf)
				if !strings.Contains(neigh6, mac) {
					t.Errorf("IPv6 ND: wire's neighbour entry %q lacks the TAP's MAC %s", neigh6, mac)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, rev := range []bool{false, true} {
					dir := map[bool]string{false: "wire->lab", true: "lab->wire"}[rev]
					r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev})
					if err != nil {
						t.Fatalf("TCP %s: %v", dir, err)
					}
					// A stalled forwarder (broken partial checksums or GSO
					// handling) moves almost nothing.
					if r.Bytes < 20<<20 {
						t.Errorf("TCP %s: only %d bytes in 2 s", dir, r.Bytes)
					}
					t.Logf("TCP %s: %.2f Gbit/s, %d retransmits", dir, r.BitsPerSecond/1e9, r.Retransmits)
					// UDP: every datagram the sender sent must reach the
					// receiving stack. A busy 2-core machine can overflow the
					// receiving iperf3's socket buffer; those count as
					// RcvbufErrors there, after tapfwd delivered them.
					rxNS := map[bool]string{false: bed.LabNS, true: bed.WireNS}[rev]
					before := udpArrived(t, bed, rxNS)
					dropsBefore := countedDrops(t, bed)
					u, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev, UDP: true, Bitrate: "20M", Len: 1200})
					if err != nil {
						t.Fatalf("UDP %s: %v", dir, err)
					}
					arrived := udpArrived(t, bed, rxNS) - before
					// A datagram either arrives or is counted as dropped:
					// when the machine is busy, the TAP's queue or the
					// packet socket's can overflow while tapfwd waits for a
					// CPU, and the kernel counts that.
					dropped := countedDrops(t, bed) - dropsBefore
					if dropped > 0 {
						t.Logf("UDP %s: %d datagrams arrived, %d counted as dropped", dir, arrived, dropped)
					}
					if u.Packets < 1000 || float64(arrived+dropped) < 0.99*float64(u.Packets) {
						t.Errorf("UDP %s: %d datagrams sent, %d reached the receiver's stack (iperf3: %.1f%% lost)", dir, u.Packets, arrived, u.LostPercent)
					}
				}
				if err := fw.Stop(); err != nil {
					t.Errorf("tapfwd did not exit 0 on SIGTERM: %v\n%s", err, fw.Output())
				}
				for q, c := range totals(t, fw.Output()) {
					if c.drops != 0 || c.errors != 0 {
						t.Errorf("queue %d: %d drops, %d errors on a clean bed", q, c.drops, c.errors)
					}
				}
				if _, err := bed.Run(context.Background(), bed.LabNS, "ip", "link", "show", "dev", bed.LabIf); err == nil {
					t.Error("the TAP is still there after tapfwd exited")
				}
			})
		}
	}
}

// TestTwoQueues runs two TAP queues and two fanout sockets and checks that
// each worker is pinned to its CPU and that both queues carry traffic.
func TestTwoQueues(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	needTools(t, "iperf3")
	bed, fw := startForwarder(t, "--queues", "2", "--cpus", "0,1")
	pid := fw.Pid()

	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	pinned := map[string]int{}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				pinned[strings.TrimSpace(v)]++
			}
		}
	}
	if pinned["0"] < 1 || pinned["1"] < 1 {
		t.Errorf("want a worker thread pinned to CPU 0 and one to CPU 1; Cpus_allowed_list counts: %v", pinned)
	}

	queues := bedRun(t, bed, bed.LabNS, "ls", "/sys/class/net/"+bed.LabIf+"/queues")
	if f := strings.Fields(queues); len(f) != 4 {
		t.Errorf("TAP queues = %q, want rx-0 rx-1 tx-0 tx-1", queues)
	}
	// /proc/PID/net/packet lists the packet sockets of tapfwd's namespace.
	pk, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/packet", pid))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(string(pk)), "\n"); n != 2 {
		t.Errorf("want 2 packet sockets, /proc/%d/net/packet has %d:\n%s", pid, n, pk)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, rev := range []bool{false, true} {
		if _, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Streams: 16, Reverse: rev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("tapfwd exit: %v\n%s", err, fw.Output())
	}
	tot := totals(t, fw.Output())
	for q := 0; q < 2; q++ {
		if tot[q].nicRx == 0 || tot[q].tapRx == 0 {
			t.Errorf("queue %d carried no traffic in one direction: %+v (16 flows hash onto both queues)", q, tot[q])
		}
	}
}

// TestNotRoot checks the one-line error without privileges.
func TestNotRoot(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping: dropping privileges needs root: %v", err)
	}
	asNobody(t, "CAP_NET_ADMIN", "run", "--nic", "lo")
}

// TestRunErrors checks the one-line errors a user gets for a netns that
// does not exist and a TAP name that is taken.
func TestRunErrors(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tap-netns", "tfw-no-such-ns"}, `network namespace "tfw-no-such-ns"`},
		{[]string{"--tap", bed.NIC}, "is in use"},
		{[]string{"--tap-addr", "198.18.0.2/24", "--tap", "tfw-" + bed.ID, "--tap-mtu", "70000"}, "tap:"},
	} {
		args := append([]string{"run", "--nic", bed.NIC}, tc.args...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := bed.Command(ctx, bed.FwdNS, exe(t), args...).CombinedOutput()
		cancel()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 {
			t.Errorf("tapfwd %q: %v, want exit status 1\n%s", args, err, out)
		}
		s := strings.TrimSpace(string(out))
		if !strings.Contains(s, tc.want) || strings.Contains(s, "\n") || strings.Contains(s, "panic") {
			t.Errorf("tapfwd %q: want one line containing %q, got:\n%s", args, tc.want, s)
		}
		// Nothing is left behind: no TAP in the fwd namespace.
		links := bedRun(t, bed, bed.FwdNS, "ip", "-o", "link", "show")
		if strings.Count(strings.TrimSpace(links), "\n") != 1 { // lo and w1
			t.Errorf("after a failed start the fwd namespace holds:\n%s", links)
		}
	}
}

// TestTAPNAPISettings checks that the TAP's NAPI sysfs settings, written
// before the TAP moves into the lab (where its sysfs then lives), hold.
func TestTAPNAPISettings(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	bed, fw := startForwarder(t, "--napi", "on", "--tap-napi-threaded", "--tap-gro-flush-timeout", "20us", "--tap-napi-defer-hard-irqs", "2")
	for attr, want := range map[string]string{"threaded": "1", "gro_flush_timeout": "20000", "napi_defer_hard_irqs": "2"} {
		got := strings.TrimSpace(bedRun(t, bed, bed.LabNS, "cat", "/sys/class/net/"+bed.LabIf+"/"+attr))
		if got != want {
			t.Errorf("%s = %s in the lab, want %s", attr, got, want)
		}
	}
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"run", "--nic", "lo", "--napi", "off", "--tap-napi-threaded"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "need --napi auto or on") {
		t.Errorf("threaded with --napi off: exit %d, %s", code, errb.String())
	}
}

// TestRunVMPorts checks that run --vm-ports makes the ports on the TAP and
// that they, and their device nodes, are gone after tapfwd exits.
func TestRunVMPorts(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	bed, fw := startForwarder(t, "--vm-ports", "2")
	links := bedRun(t, bed, bed.LabNS, "ip", "-o", "link", "show", "type", "macvtap")
	if n := strings.Count(strings.TrimSpace(links), "\n") + 1; strings.TrimSpace(links) == "" || n != 2 {
		t.Fatalf("want 2 macvtap ports in the lab, got:\n%s", links)
	}
	nodes, _ := filepath.Glob("/dev/tapfwd/" + bed.LabNS + ":*")
	if len(nodes) != 2 {
		t.Errorf("device nodes %v, want 2", nodes)
	}
	if !strings.Contains(fw.Output(), "qemu-system-x86_64") {
		t.Errorf("no QEMU line logged:\n%s", fw.Output())
	}
	m := scrape(t, bed)
	if n := strings.Count(m, "tapfwd_vm_port_receive_packets_total{"); n != 2 {
		t.Errorf("%d per-port series in /metrics, want 2", n)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("%v\n%s", err, fw.Output())
	}
	if nodes, _ := filepath.Glob("/dev/tapfwd/" + bed.LabNS + ":*"); len(nodes) != 0 {
		t.Errorf("device nodes left behind: %v", nodes)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"run", "--nic", "lo", "--vm-ports", "1", "--strict-mac"}, &out, &errb); code != 1 {
		t.Errorf("--vm-ports with --strict-mac: exit %d, %s", code, errb.String())
	}
}
