package xdp

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
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
		name  string
		args  []string
		want  string
		noXDP bool // under a seccomp filter: a kernel without AF_XDP sockets
	}{
		// The bed's veth has one RX queue.
		{"no such queue", []string{"--queues", "2"}, "--nic-backend xdp: ", false},
		{"strict mac", []string{"--strict-mac"}, "--nic-backend xdp: the strict MAC filter is a packet socket's", false},
		{"no AF_XDP sockets", nil, "--nic-backend xdp: XDP socket: AF_XDP sockets are not available in this kernel", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(bed.TapfwdArgs(append(append([]string(nil), xdpArgs...), tc.args...)...), "--metrics-addr", "")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := bed.Command(ctx, bed.FwdNS, exe, args...)
			if tc.noXDP {
				testkit.WithoutXDPSockets(t, cmd)
			}
			start := time.Now()
			code, stdout, stderr := testkit.Run(t, cmd)
			took := time.Since(start)
			if code != 1 {
				t.Fatalf("tapfwd %v: exit %d, want 1\n%s%s", args, code, stdout, stderr)
			}
			var refusals []string
			for l := range strings.Lines(stderr) {
				if strings.HasPrefix(l, "tapfwd:") {
					refusals = append(refusals, strings.TrimSpace(l))
				}
			}
			if len(refusals) != 1 || !strings.Contains(refusals[0], tc.want) {
				t.Fatalf("stderr's lines starting tapfwd: are %q, want one containing %q\n%s", refusals, tc.want, stderr)
			}
			t.Logf("%s: exit %d after %v: %s", tc.name, code, took.Round(time.Millisecond), refusals[0])
			if tc.noXDP {
				checkNoXDPRefusal(t, bed, refusals[0], took)
			}
			if p := xdpProg(t, bed); p != "" {
				t.Errorf("XDP program left on %s: %s", bed.NIC, p)
			}
		})
	}
}

// checkNoXDPRefusal: the refusal on a kernel without AF_XDP sockets says
// what to do, comes before anything was set up (within 5 s, the TAP not
// left behind), and `tapfwd features` under the same filter reports the
// sockets missing rather than failing.
func checkNoXDPRefusal(t *testing.T, bed *testbed.Bed, line string, took time.Duration) {
	t.Helper()
	if want := "--nic-backend packet"; !strings.Contains(line, want) {
		t.Errorf("the refusal %q does not advise %q", line, want)
	}
	if took > 5*time.Second {
		t.Errorf("the refusal took %v, want under 5 s", took)
	}
	for _, ns := range []string{bed.FwdNS, bed.LabNS} {
		if out := testkit.BedRun(t, bed, ns, "ip", "-o", "link", "show"); strings.Contains(out, " "+bed.LabIf+":") {
			t.Errorf("the TAP %s is left behind in %s:\n%s", bed.LabIf, ns, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := bed.Command(ctx, bed.FwdNS, testkit.Tapfwd(t), "features", "--json")
	testkit.WithoutXDPSockets(t, cmd)
	code, stdout, stderr := testkit.Run(t, cmd)
	if code != 0 {
		t.Fatalf("tapfwd features under the filter: exit %d\n%s%s", code, stdout, stderr)
	}
	var f struct {
		XDP struct {
			Sockets bool   `json:"xdp_sockets"`
			Copy    bool   `json:"copy"`
			Err     string `json:"error"`
		} `json:"af_xdp"`
	}
	if err := json.Unmarshal([]byte(stdout), &f); err != nil {
		t.Fatalf("tapfwd features --json: %v\n%s", err, stdout)
	}
	if f.XDP.Sockets || f.XDP.Copy || !strings.Contains(f.XDP.Err, "address family not supported") {
		t.Errorf("tapfwd features under the filter: af_xdp %+v, want no sockets, no copy mode and EAFNOSUPPORT", f.XDP)
	}
}

// TestTwoQueues: on a veth with two RX queues (and a peer with two TX
// queues, which veth's XDP requires), two sockets each carry their share:
// veth puts a frame on the RX queue of the TX queue its peer picked, which
// hashes by flow.
func TestTwoQueues(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	bed := twoQueueBed(t, 2)
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), append(xdpArgs, "--queues", "2", "--cpus", "0,1")...)
	traffic.CheckQueues(t, bed, fw, 2)
}

// twoQueueBed is a bed whose NIC has two RX and two TX queues, and its
// wire peer peerQueues of each: with one, every frame from the wire comes
// in on the NIC's RX queue 0 (veth's peer picks the RX queue by its own
// TX queue).
func twoQueueBed(t *testing.T, peerQueues int) *testbed.Bed {
	t.Helper()
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	pq := strconv.Itoa(peerQueues)
	for _, a := range [][]string{
		{"-n", bed.WireNS, "link", "del", bed.WireIf},
		{"-n", bed.WireNS, "link", "add", bed.WireIf, "numtxqueues", pq, "numrxqueues", pq, "type", "veth",
			"peer", "name", bed.NIC, "numtxqueues", "2", "numrxqueues", "2", "netns", bed.FwdNS},
		{"-n", bed.WireNS, "addr", "add", bed.WireAddr.String(), "dev", bed.WireIf},
		{"-n", bed.FwdNS, "link", "set", "dev", bed.NIC, "up"},
		{"-n", bed.WireNS, "link", "set", "dev", bed.WireIf, "up"},
	} {
		testkit.BedRun(t, bed, bed.WireNS, append([]string{"ip"}, a...)...)
	}
	return bed
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
