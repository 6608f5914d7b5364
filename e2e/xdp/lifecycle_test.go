package xdp

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/internal/testbed/iperf"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
)

// TestProgramGoneAfterKill: SIGKILL runs none of tapfwd's clean-up, yet
// the XDP program leaves the NIC, because it is attached as a bpf_link
// that the process's fds hold. (SIGTERM: TestTraffic.)
func TestProgramGoneAfterKill(t *testing.T) {
	bed, fw := start(t)
	if xdpProg(t, bed) == "" {
		t.Fatalf("no XDP program on %s while tapfwd runs", bed.NIC)
	}
	fw.Kill()
	// The link goes with the last fd, which the kernel drops as the
	// process is reaped; give a workqueue a moment.
	for deadline := time.Now().Add(2 * time.Second); xdpProg(t, bed) != "" && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if p := xdpProg(t, bed); p != "" {
		t.Errorf("XDP program still on %s after SIGKILL: %s", bed.NIC, p)
	}
}

// TestRefusals: what the kernel or device refuses ends tapfwd at start with
// one line naming the flag and the reason, and leaves no program behind.
func TestRefusals(t *testing.T) {
	testkit.NeedRoot(t)
	exe := testkit.Tapfwd(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		// The bed's veth has one RX queue.
		{"no such queue", []string{"--queues", "2"}, "--nic-backend xdp: afxdp: "},
		{"strict mac", []string{"--strict-mac"}, "--nic-backend xdp: the strict MAC filter is a packet socket's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(bed.TapfwdArgs(append(append([]string(nil), xdpArgs...), tc.args...)...), "--metrics-addr", "")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := bed.Command(ctx, bed.FwdNS, exe, args...).CombinedOutput()
			var ee *exec.ExitError
			if !asExit(err, &ee) {
				t.Fatalf("tapfwd %v: %v, want exit 1\n%s", args, err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(last, tc.want) {
				t.Errorf("last line %q, want it to contain %q\n%s", last, tc.want, out)
			}
			t.Logf("%s: %s", tc.name, last)
			if p := xdpProg(t, bed); p != "" {
				t.Errorf("XDP program left on %s: %s", bed.NIC, p)
			}
		})
	}
}

// TestTwoQueues: on a veth with two RX queues (and a peer with two TX
// queues, which veth's XDP requires), two sockets each carry their share:
// veth puts a frame on the RX queue of the TX queue its peer picked, which
// hashes by flow.
func TestTwoQueues(t *testing.T) {
	testkit.NeedRoot(t)
	testkit.NeedTools(t, "iperf3")
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	for _, a := range [][]string{
		{"-n", bed.WireNS, "link", "del", bed.WireIf},
		{"-n", bed.WireNS, "link", "add", bed.WireIf, "numtxqueues", "2", "numrxqueues", "2", "type", "veth",
			"peer", "name", bed.NIC, "numtxqueues", "2", "numrxqueues", "2", "netns", bed.FwdNS},
		{"-n", bed.WireNS, "addr", "add", bed.WireAddr.String(), "dev", bed.WireIf},
		{"-n", bed.FwdNS, "link", "set", "dev", bed.NIC, "up"},
		{"-n", bed.WireNS, "link", "set", "dev", bed.WireIf, "up"},
	} {
		testkit.BedRun(t, bed, bed.WireNS, append([]string{"ip"}, a...)...)
	}
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), append(xdpArgs, "--queues", "2", "--cpus", "0,1")...)
	traffic.CheckQueues(t, bed, fw, 2)
}

// TestLinkFlap takes the NIC down and up during an iperf3 run: tapfwd
// keeps running and the lab is reachable again within 2 s.
func TestLinkFlap(t *testing.T) {
	testkit.NeedTools(t, "iperf3")
	bed, fw := start(t)
	wait := traffic.StartIperf(t, bed, iperf.Options{Duration: 8 * time.Second, Streams: 2})
	for range 2 {
		traffic.FlapLink(t, bed, fw, bed.FwdNS, bed.NIC, func() { time.Sleep(time.Second) })
	}
	if err := wait(); err != nil {
		t.Errorf("iperf3 across the flaps: %v", err)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit after flaps: %v\n%s", err, fw.Output())
	}
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok && e.ExitCode() == 1
}
