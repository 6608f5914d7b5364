package xdp

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/napi"
)

// TestKernelPollDefers: --poll kernel sets the NIC's NAPI instances'
// defer-hard-irqs and gro-flush-timeout (napi-set), so that a frame from the
// veth's peer waits for the worker's io_uring busy poll instead of being
// polled at once in the sender's softirq: BusyPollRxPackets carries frames
// of a flood ping and of a UDP stream (their shares are logged). At SIGTERM
// each instance has its own values back. GRO is turned on for the NIC
// first, the one offload changed here: a veth then has its NAPI instances
// before tapfwd's XDP program comes and after it goes, so there are values
// to restore (without GRO the instances come and go with the program, and
// their settings with them).
func TestKernelPollDefers(t *testing.T) {
	testkit.NeedRoot(t, "iperf3", "ping", "ethtool")
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	testkit.BedRun(t, bed, bed.FwdNS, "ethtool", "-K", bed.NIC, "gro", "on")
	c := napiClient(t, bed)
	ifindex := nicIndex(t, bed)
	// Values of their own, which the restore must bring back.
	was := napi.Attrs{DeferHardIRQs: new(uint32(5)), GROFlushTimeout: new(3 * time.Millisecond)}
	for _, n := range napiList(t, c, ifindex) {
		if _, err := c.Set(n.ID, was); err != nil {
			t.Fatal(err)
		}
	}
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), append(append([]string(nil), xdpArgs...), "--poll", "kernel")...)
	checkNAPIs(t, c, ifindex, 2, 200*time.Microsecond, "while tapfwd --poll kernel runs")

	busyPolled := func() int64 { return kernel.SNMP(t, bed, bed.FwdNS)["TcpExt.BusyPollRxPackets"] }
	share := func(what string, run func()) (polled, rx int64) {
		polled0, rx0 := busyPolled(), rxPackets(t, bed)
		run()
		polled, rx = busyPolled()-polled0, rxPackets(t, bed)-rx0
		t.Logf("%s: the NIC received %d frames, BusyPollRxPackets +%d (%.0f%%)", what, rx, polled, 100*float64(polled)/float64(max(rx, 1)))
		return polled, rx
	}
	// A flood ping: each request comes while the worker, done with the
	// previous reply, busy-polls.
	polled, rx := share("ping -f", func() {
		testkit.BedRun(t, bed, bed.WireNS, "ping", "-f", "-c", "2000", "-q", bed.LabAddr.Addr().String())
	})
	// The share (96-99% on a quiet machine, 72% without the deferral) is a
	// measurement, logged; under load the scheduler ends busy polls
	// (need_resched) and the timer takes a share that varies from run to
	// run. That the busy poll takes frames at all is what holds everywhere.
	if rx < 2000 || polled == 0 {
		t.Errorf("ping -f: the worker's busy poll took %d of the %d frames the NIC received, want some of at least 2000", polled, rx)
	}
	// A UDP stream, likewise.
	polled, _ = share("UDP 100 Mbit/s", func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, UDP: true, Bitrate: "100M", Len: 1200}); err != nil {
			t.Fatalf("UDP: %v\n%s", err, fw.Output())
		}
	})
	if polled == 0 {
		t.Errorf("UDP: the worker's busy poll took no frame")
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit: %v\n%s", err, fw.Output())
	}
	checkNAPIs(t, c, ifindex, *was.DeferHardIRQs, *was.GROFlushTimeout, "after tapfwd exited")
}

// TestKernelPollUnpolledNAPI: on a NIC with two RX queues, and so two NAPI
// instances, --poll kernel --queues 1 defers the instance queue 0's socket
// is on, which its poller (or the --busy-poll-cpu thread) busy-polls, and
// leaves the other one, which nothing busy-polls, at defer-hard-irqs 0 and
// gro-flush-timeout 0: the host's frames on queue 1 are not left to wait
// for the timer. The wire peer has one TX queue, so the lab's frames all
// come in on queue 0 and the lab answers.
func TestKernelPollUnpolledNAPI(t *testing.T) {
	testkit.NeedRoot(t)
	cases := map[string][]string{"kernel": nil}
	if cpus, err := cpulist.Allowed(); err == nil && len(cpus) >= 2 {
		cases["busy-poll-cpu"] = []string{"--cpus", strconv.Itoa(cpus[0]), "--busy-poll-cpu", strconv.Itoa(cpus[1])}
	}
	for name, extra := range cases {
		t.Run(name, func(t *testing.T) {
			bed := twoQueueBed(t, 1)
			args := append(append([]string(nil), xdpArgs...), "--poll", "kernel", "--queues", "1")
			fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), append(args, extra...)...)
			list := napiList(t, napiClient(t, bed), nicIndex(t, bed))
			if len(list) != 2 {
				t.Fatalf("%d NAPI instances on the two-queue %s, want 2: %+v", len(list), bed.NIC, list)
			}
			// A veth's instances are its RX queues' in id order (the
			// daemon's queueNAPIs): queue 0's has the lower id.
			slices.SortFunc(list, func(a, b napi.NAPI) int { return cmp.Compare(a.ID, b.ID) })
			if n := list[0]; n.DeferHardIRQs != 2 || n.GROFlushTimeout != 200*time.Microsecond {
				t.Errorf("queue 0's NAPI %d: defer-hard-irqs %d, gro-flush-timeout %v; want 2, 200µs", n.ID, n.DeferHardIRQs, n.GROFlushTimeout)
			}
			if n := list[1]; n.DeferHardIRQs != 0 || n.GROFlushTimeout != 0 {
				t.Errorf("queue 1's NAPI %d, which nothing busy-polls: defer-hard-irqs %d, gro-flush-timeout %v; want 0, 0",
					n.ID, n.DeferHardIRQs, n.GROFlushTimeout)
			}
			if err := fw.Stop(); err != nil {
				t.Fatalf("exit: %v\n%s", err, fw.Output())
			}
		})
	}
}

// napiClient is a netdev client in the bed's fwd namespace, closed when t
// ends.
func napiClient(t *testing.T, bed *testbed.Bed) *napi.Client {
	t.Helper()
	var c *napi.Client
	err := bed.Do(bed.FwdNS, func() (err error) {
		c, err = napi.Dial()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// nicIndex is the NIC's ifindex in the fwd namespace.
func nicIndex(t *testing.T, bed *testbed.Bed) int {
	t.Helper()
	var index int
	err := bed.Do(bed.FwdNS, func() error {
		ifi, err := net.InterfaceByName(bed.NIC)
		if err == nil {
			index = ifi.Index
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return index
}

// napiList lists the NAPI instances of ifindex, failing t when there are
// none.
func napiList(t *testing.T, c *napi.Client, ifindex int) []napi.NAPI {
	t.Helper()
	list, err := c.List(ifindex)
	if err != nil || len(list) == 0 {
		t.Fatalf("NAPI instances of ifindex %d: %v, %v", ifindex, list, err)
	}
	return list
}

// checkNAPIs fails t unless every NAPI instance of ifindex has these
// settings.
func checkNAPIs(t *testing.T, c *napi.Client, ifindex int, deferIRQs uint32, groFlush time.Duration, when string) {
	t.Helper()
	for _, n := range napiList(t, c, ifindex) {
		if n.DeferHardIRQs != deferIRQs || n.GROFlushTimeout != groFlush {
			t.Errorf("%s: NAPI %d has defer-hard-irqs %d, gro-flush-timeout %v; want %d, %v",
				when, n.ID, n.DeferHardIRQs, n.GROFlushTimeout, deferIRQs, groFlush)
		}
	}
}

// rxPackets is the NIC's rx_packets.
func rxPackets(t *testing.T, bed *testbed.Bed) int64 {
	t.Helper()
	out := testkit.BedRun(t, bed, bed.FwdNS, "cat", "/sys/class/net/"+bed.NIC+"/statistics/rx_packets")
	v, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestNAPIRestoredAfterKill: SIGKILL runs none of tapfwd's clean-up, so
// the NIC keeps --poll kernel's defer-hard-irqs 2 and gro-flush-timeout
// 200µs and --nic-napi-threaded's kthread pinned to CPU 0. The next run
// puts back what the NIC had before the killed run (0, 0s, threaded
// disabled: the veth's own) before it reads the NIC's settings, so what
// it restores at SIGTERM is that, not the killed run's; after another
// SIGKILL, tapfwd down puts them back too. The NIC's journal of them
// (/run/tapfwd/napi) is gone at the end.
func TestNAPIRestoredAfterKill(t *testing.T) {
	testkit.NeedRoot(t, "ethtool")
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	testkit.BedRun(t, bed, bed.FwdNS, "ethtool", "-K", bed.NIC, "gro", "on")
	journals := "/run/tapfwd/napi/*-" + bed.NIC + ".json"
	t.Cleanup(func() {
		left, _ := filepath.Glob(journals)
		for _, p := range left {
			os.Remove(p)
		}
	})
	c := napiClient(t, bed)
	if !c.Features().Threaded {
		t.Skip("skipping: --nic-napi-threaded needs Linux 6.17")
	}
	ifindex := nicIndex(t, bed)
	checkNAPIState(t, c, ifindex, false, "before tapfwd")
	exe := testkit.Tapfwd(t)
	args := append(append([]string(nil), xdpArgs...), "--poll", "kernel", "--nic-napi-threaded", "enabled", "--nic-napi-cpu", "0")
	killed := func() {
		fw := testkit.StartOn(t, bed, exe, args...)
		checkNAPIState(t, c, ifindex, true, "while tapfwd runs")
		fw.Kill()
		checkNAPIState(t, c, ifindex, true, "after SIGKILL")
	}

	killed()
	fw := testkit.StartOn(t, bed, exe, args...)
	checkNAPIState(t, c, ifindex, true, "while the next run runs")
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit: %v\n%s", err, fw.Output())
	}
	if _, line, ok := strings.Cut(fw.Output(), "put back the NIC's NAPI settings a killed tapfwd left"); ok {
		line, _, _ = strings.Cut(line, "\n")
		t.Logf("the next run: ...%s", line)
	} else {
		t.Errorf("the next run did not say it put the killed run's settings back:\n%s", fw.Output())
	}
	checkNAPIState(t, c, ifindex, false, "after the next run's SIGTERM")

	killed()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, stdout, stderr := testkit.Run(t, bed.Command(ctx, bed.FwdNS, exe, "down"))
	if code != 0 || !strings.Contains(stdout, "NIC "+bed.NIC+": put back the NAPI settings") {
		t.Errorf("tapfwd down: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("tapfwd down: %s", stdout)
	checkNAPIState(t, c, ifindex, false, "after tapfwd down")
	if left, _ := filepath.Glob(journals); len(left) != 0 {
		t.Errorf("journals left: %v", left)
	}
}

// checkNAPIState fails t unless every NAPI instance of ifindex has the
// killed run's settings (tuned: defer-hard-irqs 2, gro-flush-timeout
// 200µs, threaded with its kthread on CPU 0) or the veth's own (0, 0s,
// not threaded).
func checkNAPIState(t *testing.T, c *napi.Client, ifindex int, tuned bool, when string) {
	t.Helper()
	for _, n := range napiList(t, c, ifindex) {
		cpus := ""
		if k, err := napi.ReadKthread(n.PID); n.PID != 0 && err == nil {
			cpus = k.CPUs
		}
		got := fmt.Sprintf("defer-hard-irqs %d, gro-flush-timeout %v, threaded %v, kthread CPUs %q", n.DeferHardIRQs, n.GROFlushTimeout, n.Threaded, cpus)
		want := `defer-hard-irqs 0, gro-flush-timeout 0s, threaded disabled, kthread CPUs ""`
		if tuned {
			want = `defer-hard-irqs 2, gro-flush-timeout 200µs, threaded enabled, kthread CPUs "0"`
		}
		if got != want {
			t.Errorf("%s: NAPI %d has %s; want %s", when, n.ID, got, want)
		}
	}
}
