package xdp

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
)

// pollerComm is the name of tapfwd's busy-poll thread (--busy-poll-cpu).
const pollerComm = "tapfwd-busypoll"

// TestBusyPollCPU: with --poll kernel --busy-poll-cpu, a thread of
// tapfwd's pinned to that CPU busy-polls the NIC's NAPI while the worker
// sleeps on another: the thread is there, may run on that CPU only and
// runs there, the busy poll takes frames of a flood ping, and at
// SIGTERM tapfwd exits 0 and no such thread is left on the machine.
func TestBusyPollCPU(t *testing.T) {
	testkit.NeedTools(t, "ping")
	allowed, err := cpulist.Allowed()
	if err != nil || len(allowed) < 2 {
		t.Skipf("needs two CPUs to run on, has %v (%v)", allowed, err)
	}
	worker, poller := allowed[0], allowed[1]
	bed, fw := start(t, "--poll", "kernel", "--cpus", strconv.Itoa(worker), "--busy-poll-cpu", strconv.Itoa(poller))
	tids := pollerThreads(t, "/proc/"+strconv.Itoa(fw.Pid()))
	if len(tids) != 1 {
		t.Fatalf("%d threads named %s in tapfwd, want 1\n%s", len(tids), pollerComm, fw.Output())
	}
	status, err := os.ReadFile(filepath.Join(tids[0], "status"))
	if want := "Cpus_allowed_list:\t" + strconv.Itoa(poller) + "\n"; err != nil || !strings.Contains(string(status), want) {
		t.Errorf("%s: %v, want %q in\n%s", tids[0], err, want, status)
	}
	if cpu := lastCPU(t, tids[0]); cpu != poller {
		t.Errorf("the busy poller last ran on CPU %d, want %d", cpu, poller)
	}
	busyPolled := func() int64 { return kernel.SNMP(t, bed, bed.FwdNS)["TcpExt.BusyPollRxPackets"] }
	polled0, rx0 := busyPolled(), rxPackets(t, bed)
	testkit.BedRun(t, bed, bed.WireNS, "ping", "-f", "-c", "2000", "-q", bed.LabAddr.Addr().String())
	polled, rx := busyPolled()-polled0, rxPackets(t, bed)-rx0
	t.Logf("ping -f: the NIC received %d frames, BusyPollRxPackets +%d (%.0f%%)", rx, polled, 100*float64(polled)/float64(max(rx, 1)))
	// The workers sleep in ppoll, which busy-polls nothing: every frame
	// BusyPollRxPackets counts is the poller's. Its share (37-99% in this
	// project's runs, the least under CI's parallel packages) is logged.
	if rx < 2000 || polled == 0 {
		t.Errorf("the busy poller took %d of the %d frames the NIC received, want some of at least 2000", polled, rx)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit: %v\n%s", err, fw.Output())
	}
	if strings.Contains(fw.Output(), sharedWarning) {
		t.Errorf("warned of a shared CPU with the worker on CPU %d and the poller on %d:\n%s", worker, poller, fw.Output())
	}
	if left := pollerThreads(t, "/proc/*"); len(left) > 0 {
		t.Errorf("busy poller threads left after tapfwd exited: %v", left)
	}
}

// sharedWarning is what tapfwd warns when a worker is pinned to the busy
// poller's CPU.
const sharedWarning = "workers are pinned to the busy poller's CPU"

// TestBusyPollCPUShared: --busy-poll-cpu on the worker's CPU (given with
// --cpus, and by the default placement, which pins queue 0 to the first
// CPU tapfwd may use) starts, forwards, and logs one warning naming the
// CPU and the queue.
func TestBusyPollCPUShared(t *testing.T) {
	allowed, err := cpulist.Allowed()
	if err != nil || len(allowed) == 0 {
		t.Fatalf("allowed CPUs: %v %v", allowed, err)
	}
	cpu := strconv.Itoa(allowed[0])
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"--cpus", []string{"--cpus", cpu}},
		{"default placement", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, fw := start(t, append([]string{"--poll", "kernel", "--busy-poll-cpu", cpu}, tc.args...)...)
			if err := fw.Stop(); err != nil {
				t.Fatalf("exit: %v\n%s", err, fw.Output())
			}
			var warned []string
			for l := range strings.Lines(fw.Output()) {
				if strings.Contains(l, sharedWarning) {
					warned = append(warned, strings.TrimSpace(l))
				}
			}
			if len(warned) != 1 || !strings.Contains(warned[0], "busy_poll_cpu="+cpu) || !strings.Contains(warned[0], "queues=[0]") {
				t.Fatalf("warnings %q, want one naming CPU %s and queue 0\n%s", warned, cpu, fw.Output())
			}
			t.Log(warned[0])
		})
	}
}

// pollerThreads are the /proc/PID/task/TID directories, of the processes
// procGlob matches, whose thread is named pollerComm.
func pollerThreads(t *testing.T, procGlob string) []string {
	t.Helper()
	comms, err := filepath.Glob(procGlob + "/task/*/comm")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) == pollerComm {
			out = append(out, filepath.Dir(c))
		}
	}
	return out
}

// lastCPU is the CPU the thread last ran on (/proc/.../stat field 39).
func lastCPU(t *testing.T, task string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(task, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the comm, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 37 {
		t.Fatalf("%s/stat: %q", task, b)
	}
	cpu, err := strconv.Atoi(f[36])
	if err != nil {
		t.Fatalf("%s/stat processor %q: %v", task, f[36], err)
	}
	return cpu
}
