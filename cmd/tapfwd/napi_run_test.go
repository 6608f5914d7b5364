package main

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/internal/testbed/iperf"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/napi"
)

// TestPollBusy forwards with --poll busy: traffic is correct, the worker
// spins (about a CPU while idle: the documented cost), and shutdown is
// still prompt.
func TestPollBusy(t *testing.T) {
	testkit.NeedRoot(t)
	testkit.NeedTools(t, "iperf3")
	bed, fw := testkit.StartTapfwd(t, plainExe(t), "--poll", "busy")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, rev := range []bool{false, true} {
		r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev})
		if err != nil || r.Bytes < 20<<20 {
			t.Fatalf("TCP with --poll busy (reverse %v): %v, %d bytes", rev, err, r.Bytes)
		}
		u, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev, UDP: true, Bitrate: "20M", Len: 1200})
		if err != nil || u.Packets < 1000 {
			t.Fatalf("UDP with --poll busy: %v, %d packets", err, u.Packets)
		}
	}
	before := testkit.CPUTime(t, fw.Pid())
	time.Sleep(time.Second)
	busy := testkit.CPUTime(t, fw.Pid()) - before
	t.Logf("idle with --poll busy: %v of CPU in 1 s", busy)
	// A sleeping worker uses ~0 idle; a spinning one takes all the CPU it
	// gets (the machine may be shared, so not necessarily a whole second).
	if busy < 200*time.Millisecond {
		t.Errorf("--poll busy used only %v of CPU idle: not spinning?", busy)
	}
	if err := syscall.Kill(fw.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	took := testkit.WaitExit(t, fw, time.Second)
	t.Logf("exited %v after SIGTERM", took.Round(time.Millisecond))
	if err := fw.Stop(); err != nil {
		t.Errorf("exit: %v\n%s", err, fw.Output())
	}
}

// TestNICNAPIThreaded runs tapfwd with the NIC's NAPI threaded and pinned:
// the kthread appears on the CPU asked for, traffic flows, and the setting
// is undone at exit. busy-poll is refused on kernels before 6.19.
func TestNICNAPIThreaded(t *testing.T) {
	testkit.NeedRoot(t)
	testkit.NeedTools(t, "iperf3", "ethtool")
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	testkit.BedRun(t, bed, bed.FwdNS, "ethtool", "-K", bed.NIC, "gro", "on")
	kthreads := func() []int {
		t.Helper()
		pids, err := napi.Kthreads(bed.NIC)
		if err != nil {
			t.Fatal(err)
		}
		return pids
	}
	if got := kthreads(); len(got) != 0 {
		t.Fatalf("NAPI kthreads before tapfwd: %v", got)
	}
	fw2 := testkit.StartTapfwdOn(t, bed, exe(t), "--nic-napi-threaded", "enabled", "--nic-napi-cpu", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pids := kthreads()
	if len(pids) == 0 {
		t.Fatalf("no napi/%s-* kthread with --nic-napi-threaded:\n%s", bed.NIC, fw2.Output())
	}
	for _, pid := range pids {
		if testkit.Status(t, pid)["Cpus_allowed_list"] != "1" {
			t.Errorf("kthread %d not pinned to CPU 1", pid)
		}
	}
	if r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second}); err != nil || r.Bytes < 20<<20 {
		t.Fatalf("TCP with a threaded NIC NAPI: %v", err)
	}
	if err := fw2.Stop(); err != nil {
		t.Fatalf("%v\n%s", err, fw2.Output())
	}
	for i := 0; len(kthreads()) != 0; i++ {
		if i == 100 {
			t.Fatalf("NAPI kthreads still there after tapfwd exited: %v", kthreads())
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, err := bed.Command(ctx, bed.FwdNS, exe(t), "run", "--nic", bed.NIC, "--tap", bed.LabIf,
		"--nic-napi-threaded", "busy-poll").CombinedOutput()
	s := strings.TrimSpace(string(out))
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(s, "6.19") || strings.Contains(s, "\n") {
		t.Errorf("busy-poll on this kernel: %v, want one line naming 6.19:\n%s", err, s)
	}
}
