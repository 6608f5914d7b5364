package forwarding

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/napi"
)

// TestPollBusy forwards with --poll busy: traffic is correct, the worker
// spins (about a CPU while idle: the documented cost), and shutdown is
// still prompt.
func TestPollBusy(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	bed, fw := testkit.Start(t, testkit.PlainTapfwd(t), "--poll", "busy")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tcpBothWays(t, ctx, bed)
	for _, rev := range []bool{false, true} {
		u, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev, UDP: true, Bitrate: "20M", Len: 1200})
		if err != nil || u.Packets < 1000 {
			t.Fatalf("UDP with --poll busy: %v, %d packets", err, u.Packets)
		}
	}
	before := kernel.CPUTime(t, fw.Pid())
	time.Sleep(time.Second)
	busy := kernel.CPUTime(t, fw.Pid()) - before
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
	bed := testkit.ForwarderBed(t, "iperf3", "ethtool")
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
	fw2 := testkit.StartOn(t, bed, testkit.Tapfwd(t), "--nic-napi-threaded", "enabled", "--nic-napi-cpu", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pids := kthreads()
	if len(pids) == 0 {
		t.Fatalf("no napi/%s-* kthread with --nic-napi-threaded:\n%s", bed.NIC, fw2.Output())
	}
	for _, pid := range pids {
		if kernel.Status(t, pid)["Cpus_allowed_list"] != "1" {
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
	out, err := bed.Command(ctx, bed.FwdNS, testkit.Tapfwd(t), "run", "--nic", bed.NIC, "--tap", bed.LabIf,
		"--nic-napi-threaded", "busy-poll").CombinedOutput()
	s := strings.TrimSpace(string(out))
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(s, "6.19") || strings.Contains(s, "\n") {
		t.Errorf("busy-poll on this kernel: %v, want one line naming 6.19:\n%s", err, s)
	}
}

// napiBed builds a Forwarder bed with GRO on for w1, which gives the veth
// NAPI instances, and returns it with w1's first NAPI id (from tapfwd napi
// list --json) and the kernel's features as seen from the fwd namespace.
func napiBed(t *testing.T) (*testbed.Bed, uint32, napi.Features) {
	t.Helper()
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	testkit.NeedTools(t, "ethtool")
	testkit.BedRun(t, bed, bed.FwdNS, "ethtool", "-K", bed.NIC, "gro", "on")
	var feat napi.Features
	err := bed.Do(bed.FwdNS, func() error {
		c, err := napi.Dial()
		if err == nil {
			feat = c.Features()
			c.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := napiList(t, bed)
	if len(rows) == 0 {
		t.Fatalf("%s with GRO on has no NAPI instance", bed.NIC)
	}
	return bed, rows[0].ID, feat
}

// napiRun runs the tapfwd binary with args in the fwd namespace (netlink
// sockets belong to the namespace they are made in) and returns its exit
// status and output.
func napiRun(t *testing.T, bed *testbed.Bed, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return testkit.Run(t, bed.Command(ctx, bed.FwdNS, testkit.Tapfwd(t), args...))
}

// napiJSON is what the test reads of a row of tapfwd napi list --json.
type napiJSON struct {
	ID       uint32 `json:"id"`
	Dev      string `json:"dev"`
	Threaded string `json:"threaded"`
	Kthread  *struct {
		PID      int    `json:"pid"`
		CPUs     string `json:"cpus"`
		Policy   string `json:"policy"`
		Priority int    `json:"priority"`
	} `json:"kthread"`
}

// napiList is what tapfwd napi list --json says of the bed's NIC.
func napiList(t *testing.T, bed *testbed.Bed) []napiJSON {
	t.Helper()
	code, out, errs := napiRun(t, bed, "napi", "list", "--dev", bed.NIC, "--json")
	if code != 0 {
		t.Fatalf("napi list --json: exit %d: %s", code, errs)
	}
	var rows []napiJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("napi list --json: %v\n%s", err, out)
	}
	return rows
}

// napiListJSON is napi list --json's row of NAPI id.
func napiListJSON(t *testing.T, bed *testbed.Bed, id uint32) napiJSON {
	t.Helper()
	rows := napiList(t, bed)
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("napi list --json lacks NAPI %d: %+v", id, rows)
	return napiJSON{}
}

func TestNapiCLIKernel(t *testing.T) {
	bed, id, feat := napiBed(t)
	if !feat.Threaded {
		t.Skip("skipping: this kernel has no per-NAPI threaded polling (Linux 6.17)")
	}
	sid := strconv.FormatUint(uint64(id), 10)

	code, out, errs := napiRun(t, bed, "napi", "list")
	if code != 0 || !strings.Contains(out, "THREADED") {
		t.Fatalf("napi list: exit %d\n%s%s", code, out, errs)
	}
	var found bool
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		found = found || len(f) > 4 && f[0] == sid && f[1] == bed.NIC && f[4] == "disabled"
	}
	if !found {
		t.Errorf("napi list lacks %s on %s, disabled:\n%s", sid, bed.NIC, out)
	}
	if r := napiListJSON(t, bed, id); r.Dev != bed.NIC || r.Threaded != "disabled" || r.Kthread != nil {
		t.Errorf("napi list --json, fresh: %+v", r)
	}

	// --cpu before the NAPI is threaded: refused, nothing changed.
	code, _, errs = napiRun(t, bed, "napi", "set", "--id", sid, "--cpu", "0")
	if code != 1 || !strings.Contains(errs, "add --threaded enabled") {
		t.Errorf("--cpu on an unthreaded NAPI: exit %d: %s", code, errs)
	}

	allowed, err := cpulist.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	cpu := allowed[len(allowed)-1]
	code, out, errs = napiRun(t, bed, "napi", "set", "--id", sid, "--threaded", "enabled", "--cpu", strconv.Itoa(cpu), "--fifo", "5")
	if code != 0 {
		t.Fatalf("napi set --threaded enabled: exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "disabled -> enabled") || !strings.Contains(out, "not restored on exit") {
		t.Errorf("napi set output:\n%s", out)
	}
	r := napiListJSON(t, bed, id)
	if r.Threaded != "enabled" || r.Kthread == nil || r.Kthread.CPUs != strconv.Itoa(cpu) || r.Kthread.Policy != "fifo" || r.Kthread.Priority != 5 {
		t.Fatalf("after napi set: %+v, kthread %+v", r, r.Kthread)
	}
	pid := r.Kthread.PID
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil || !strings.HasPrefix(string(comm), "napi/"+bed.NIC+"-") {
		t.Errorf("pid %d: comm %q, %v; want napi/%s-...", pid, comm, err, bed.NIC)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil || !strings.Contains(string(status), "Cpus_allowed_list:\t"+strconv.Itoa(cpu)+"\n") {
		t.Errorf("pid %d not pinned to CPU %d: %v\n%s", pid, cpu, err, status)
	}

	// busy-poll: refused on 6.18 with one line naming 6.19 and exit 1.
	code, _, errs = napiRun(t, bed, "napi", "set", "--id", sid, "--threaded", "busy-poll")
	if feat.BusyPoll {
		if code != 0 {
			t.Errorf("busy-poll on a kernel that has it: exit %d: %s", code, errs)
		}
	} else {
		if code != 1 || strings.Count(strings.TrimSpace(errs), "\n") != 0 ||
			!strings.Contains(errs, "busy poll") || !strings.Contains(errs, "needs Linux 6.19 or later") ||
			strings.Contains(errs, "out of range") {
			t.Errorf("busy-poll on this kernel: exit %d, stderr %q", code, errs)
		}
		if r := napiListJSON(t, bed, id); r.Threaded != "enabled" {
			t.Errorf("refused busy-poll changed the NAPI: %+v", r)
		}
	}

	code, out, errs = napiRun(t, bed, "napi", "set", "--id", sid, "--threaded", "disabled")
	if code != 0 || !strings.Contains(out, "-> disabled") {
		t.Fatalf("napi set --threaded disabled: exit %d\n%s%s", code, out, errs)
	}
	if r := napiListJSON(t, bed, id); r.Threaded != "disabled" || r.Kthread != nil {
		t.Errorf("after disabling: %+v, kthread %+v", r, r.Kthread)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if err != nil || !strings.HasPrefix(string(c), "napi/") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kthread pid %d still running after threaded disabled", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}

	code, _, errs = napiRun(t, bed, "napi", "set", "--id", "4294967290", "--threaded", "enabled")
	if code != 1 || !strings.Contains(errs, "no such NAPI instance") {
		t.Errorf("napi set of a missing id: exit %d: %s", code, errs)
	}
}
