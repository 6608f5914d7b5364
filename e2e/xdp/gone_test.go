package xdp

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// goneModes are the ways of waiting that TestNICGone and TestWaitNICXDP
// run under: workers in ppoll; in io_uring busy-polling the NIC's NAPI;
// and in ppoll beside a busy-poll thread of its own (with two CPUs).
func goneModes(t *testing.T) map[string][]string {
	m := map[string][]string{"block": {"--poll", "block"}, "kernel": {"--poll", "kernel"}}
	if cpus, err := cpulist.Allowed(); err == nil && len(cpus) >= 2 {
		m["busy-poll-cpu"] = []string{"--poll", "kernel", "--cpus", strconv.Itoa(cpus[0]), "--busy-poll-cpu", strconv.Itoa(cpus[1])}
	} else {
		t.Logf("no busy-poll-cpu case: needs two CPUs to run on, has %v (%v)", cpus, err)
	}
	return m
}

// TestNICGone deletes the NIC under an idle tapfwd with AF_XDP sockets:
// the kernel unbinds them and their poll reports nothing, yet tapfwd
// exits within 5 s, status 1, with a last line naming the NIC.
func TestNICGone(t *testing.T) {
	for name, args := range goneModes(t) {
		t.Run(name, func(t *testing.T) {
			bed, fw := start(t, args...)
			testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "del", bed.NIC)
			took := testkit.WaitExit(t, fw, 5*time.Second)
			t.Logf("exited %v after the removal", took.Round(time.Millisecond))
			err := fw.Stop()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Errorf("exit: %v, want status 1", err)
			}
			lines := strings.Split(strings.TrimSpace(fw.Output()), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "tapfwd: ") || !strings.Contains(last, "the NIC went away") || !strings.Contains(last, bed.NIC) {
				t.Errorf("last line %q, want a tapfwd error that the NIC %s went away", last, bed.NIC)
			}
		})
	}
}

// TestWaitNICXDP: with --wait-nic, tapfwd waits out the deleted NIC and,
// once a NIC of that name is back, attaches a new XDP program and sockets
// to it and forwards TCP through it.
func TestWaitNICXDP(t *testing.T) {
	testkit.NeedTools(t, "iperf3")
	for name, args := range goneModes(t) {
		t.Run(name, func(t *testing.T) {
			bed, fw := start(t, append(args, "--wait-nic")...)
			testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "del", bed.NIC)
			if !waitLog(fw, "waiting for it to come back", 5*time.Second) {
				t.Fatalf("tapfwd did not notice the NIC went away within 5 s:\n%s", fw.Output())
			}
			if fw.Exited() {
				t.Fatalf("tapfwd exited despite --wait-nic:\n%s", fw.Output())
			}
			remakeNIC(t, bed)
			took := testkit.ReachableWithin(t, bed, 10*time.Second)
			t.Logf("lab reachable %v after the NIC came back", took.Round(time.Millisecond))
			if xdpProg(t, bed) == "" {
				t.Errorf("no XDP program on the new %s", bed.NIC)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second})
			if err != nil || r.Bytes < 10<<20 {
				t.Fatalf("TCP through the new NIC: %v, %d bytes\n%s", err, r.Bytes, fw.Output())
			}
			if err := fw.Stop(); err != nil {
				t.Fatalf("%v\n%s", err, fw.Output())
			}
			if !strings.Contains(fw.Output(), "NIC is back") || strings.Contains(fw.Output(), "DATA RACE") {
				t.Errorf("no recovery in the log, or a race:\n%s", fw.Output())
			}
		})
	}
}

// waitLog waits up to limit for fw to log s.
func waitLog(fw *testbed.Process, s string, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(fw.Output(), s) {
			return true
		}
	}
	return strings.Contains(fw.Output(), s)
}

// remakeNIC makes the bed's NIC again, as the bed made it: a veth pair
// from the wire namespace, addressed and up.
func remakeNIC(t *testing.T, bed *testbed.Bed) {
	t.Helper()
	testkit.BedRun(t, bed, bed.WireNS, "ip", "link", "add", bed.WireIf, "type", "veth", "peer", "name", bed.NIC, "netns", bed.FwdNS)
	testkit.BedRun(t, bed, bed.WireNS, "ip", "addr", "add", bed.WireAddr.String(), "dev", bed.WireIf)
	testkit.BedRun(t, bed, bed.WireNS, "ip", "link", "set", bed.WireIf, "up")
	testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "set", bed.NIC, "up")
}
