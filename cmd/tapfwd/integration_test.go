package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/internal/testbed/iperf"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestModes checks that ping, ARP, IPv6 neighbour discovery, UDP and TCP in
// both directions pass through tapfwd in every napi x vnet-hdr mode, with
// the veth offloads at their defaults (TSO, GSO, checksum offload on).
func TestModes(t *testing.T) {
	testkit.NeedRoot(t)
	testkit.NeedTools(t, "iperf3", "ping")
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
				mac := testkit.LinkMAC(t, bed.LabNS, bed.LabIf).String()
				neigh := testkit.BedRun(t, bed, bed.WireNS, "ip", "neigh", "show", bed.LabAddr.Addr().String(), "dev", bed.WireIf)
				if !strings.Contains(neigh, mac) {
					t.Errorf("ARP: wire's neighbour entry %q lacks the TAP's MAC %s", neigh, mac)
				}
				testkit.LinkLocal(t, bed, bed.WireNS, bed.WireIf) // ping needs a source address
				ll := testkit.LinkLocal(t, bed, bed.LabNS, bed.LabIf)
				testkit.BedRun(t, bed, bed.WireNS, "ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", ll+"%"+bed.WireIf)
				neigh6 := testkit.BedRun(t, bed, bed.WireNS, "ip", "-6", "neigh", "show", ll, "dev", bed.WireIf)
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
					before := testkit.UDPArrived(t, bed, rxNS)
					dropsBefore := testkit.CountedDrops(t, bed)
					u, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev, UDP: true, Bitrate: "20M", Len: 1200})
					if err != nil {
						t.Fatalf("UDP %s: %v", dir, err)
					}
					arrived := testkit.UDPArrived(t, bed, rxNS) - before
					// A datagram either arrives or is counted as dropped:
					// when the machine is busy, the TAP's queue or the
					// packet socket's can overflow while tapfwd waits for a
					// CPU, and the kernel counts that.
					dropped := testkit.CountedDrops(t, bed) - dropsBefore
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
				for q, c := range testkit.Totals(t, fw.Output()) {
					if c.Drops != 0 || c.Errors != 0 {
						t.Errorf("queue %d: %d drops, %d errors on a clean bed", q, c.Drops, c.Errors)
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
	testkit.NeedRoot(t)
	testkit.NeedTools(t, "iperf3")
	bed, fw := startForwarder(t, "--queues", "2", "--cpus", "0,1")
	pid := fw.Pid()

	pinned := testkit.ThreadsPinned(pid)
	if pinned["0"] < 1 || pinned["1"] < 1 {
		t.Errorf("want a worker thread pinned to CPU 0 and one to CPU 1; Cpus_allowed_list counts: %v", pinned)
	}

	queues := testkit.BedRun(t, bed, bed.LabNS, "ls", "/sys/class/net/"+bed.LabIf+"/queues")
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
	tot := testkit.Totals(t, fw.Output())
	for q := 0; q < 2; q++ {
		if tot[q].NICRx == 0 || tot[q].TAPRx == 0 {
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
		{[]string{"--tap", bed.NIC}, "names the NIC"},
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
		links := testkit.BedRun(t, bed, bed.FwdNS, "ip", "-o", "link", "show")
		if strings.Count(strings.TrimSpace(links), "\n") != 1 { // lo and w1
			t.Errorf("after a failed start the fwd namespace holds:\n%s", links)
		}
	}
}

// TestTAPNAPISettings checks that the TAP's NAPI sysfs settings, written
// before the TAP moves into the lab (where its sysfs then lives), hold.
func TestTAPNAPISettings(t *testing.T) {
	testkit.NeedRoot(t)
	bed, fw := startForwarder(t, "--napi", "on", "--tap-napi-threaded", "--tap-gro-flush-timeout", "20us", "--tap-napi-defer-hard-irqs", "2")
	for attr, want := range map[string]string{"threaded": "1", "gro_flush_timeout": "20000", "napi_defer_hard_irqs": "2"} {
		got := strings.TrimSpace(testkit.BedRun(t, bed, bed.LabNS, "cat", "/sys/class/net/"+bed.LabIf+"/"+attr))
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
	testkit.NeedRoot(t)
	bed, fw := startForwarder(t, "--vm-ports", "2")
	links := testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "link", "show", "type", "macvtap")
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
	m := testkit.Scrape(t, bed)
	if n := strings.Count(m, "tapfwd_vm_port_packets_total{"); n != 4 {
		t.Errorf("%d per-port packet series in /metrics, want 4 (two ports, rx and tx)", n)
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
