package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/napi"
)

func TestNapiCLIUsage(t *testing.T) {
	checkCLI(t, []cliCase{
		{[]string{"napi"}, 2, "Usage: tapfwd napi COMMAND"},
		{[]string{"napi", "frob"}, 2, `unknown command "frob"`},
		{[]string{"napi", "help"}, 0, "list   NAPI instances"},
		{[]string{"napi", "list", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"napi", "list", "-h"}, 0, "empty lists every device"},
		{[]string{"napi", "set"}, 2, "--id is required"},
		{[]string{"napi", "set", "--id", "3"}, 2, "nothing to set"},
		{[]string{"napi", "set", "-h"}, 0, "nothing is\nrestored when it ends"},
		{[]string{"napi", "set", "-h"}, 0, "0 turns deferral off"},
		{[]string{"napi", "set", "--id", "3", "--threaded", "on"}, 2, "--threaded on: want disabled, enabled or busy-poll"},
		{[]string{"napi", "set", "--id", "3", "--fifo", "100"}, 2, "--fifo 100: want a priority from 1 to 99"},
		{[]string{"napi", "set", "--id", "3", "--cpu", "-2"}, 2, "--cpu -2"},
		{[]string{"napi", "set", "--id", "3", "--gro-flush-timeout", "-1s"}, 2, "must not be negative"},
		{[]string{"napi", "set", "--id", "3", "--defer-hard-irqs", "2147483648"}, 2, "at most 2147483647"},
		{[]string{"napi", "set", "--id", "0", "--threaded", "enabled"}, 2, "not a NAPI id"},
	})
}

// napiBed builds a Forwarder bed with GRO on for w1, which gives the veth
// NAPI instances, and returns it with w1's first NAPI id and the kernel's
// features as seen from the fwd namespace.
func napiBed(t *testing.T) (*testbed.Bed, uint32, napi.Features) {
	t.Helper()
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	testkit.NeedTools(t, "ethtool")
	testkit.BedRun(t, bed, bed.FwdNS, "ethtool", "-K", bed.NIC, "gro", "on")
	var id uint32
	var feat napi.Features
	err := bed.Do(bed.FwdNS, func() error {
		ifi, err := net.InterfaceByName(bed.NIC)
		if err != nil {
			return err
		}
		c, err := napi.Dial()
		if err != nil {
			return err
		}
		defer c.Close()
		feat = c.Features()
		list, err := c.List(ifi.Index)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return errors.New("w1 with GRO on has no NAPI instance")
		}
		id = list[0].ID
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bed, id, feat
}

// napiRun runs tapfwd with args inside the fwd namespace (run on a thread
// that joined it: netlink sockets belong to the namespace they are made in).
func napiRun(t *testing.T, bed *testbed.Bed, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if err := bed.Do(bed.FwdNS, func() error {
		code = run(args, &out, &errb)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func napiListJSON(t *testing.T, bed *testbed.Bed, id uint32) napi.Instance {
	t.Helper()
	code, out, errs := napiRun(t, bed, "napi", "list", "--dev", bed.NIC, "--json")
	if code != 0 {
		t.Fatalf("napi list --json: exit %d: %s", code, errs)
	}
	var rows []napi.Instance
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("napi list --json: %v\n%s", err, out)
	}
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("napi list --json lacks NAPI %d:\n%s", id, out)
	return napi.Instance{}
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

	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	cpu := 0
	for i := range 1024 {
		if set.IsSet(i) {
			cpu = i
		}
	}
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

	// busy-poll: refused on 6.18 with one line naming 6.19 and exit 1, both
	// from run and from a real process.
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
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := bed.Command(ctx, bed.FwdNS, exe(t), "napi", "set", "--id", sid, "--threaded", "busy-poll")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 ||
			!strings.Contains(stderr.String(), "6.19") {
			t.Errorf("tapfwd napi set --threaded busy-poll as a process: %v, stderr %q", err, stderr.String())
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
