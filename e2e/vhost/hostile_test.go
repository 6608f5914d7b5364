package vhost

import (
	"bufio"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// hostileEnv hands TestHelperHostile the socket it attacks.
const hostileEnv = "TAPFWD_E2E_HOSTILE"

// TestHelperHostile is the hostile front-end of TestHostileFrontEnd, in a
// process of its own; it does nothing in a normal run.
func TestHelperHostile(t *testing.T) { vhostusertest.HostileChild(t, hostileEnv) }

// TestHostileFrontEnd (issue 22): a hostile front-end in a process of its
// own, on port 0 of a real tapfwd, hands a hung-up pipe and then a unix
// socket (blocking, SO_RCVLOWAT 8, a byte waiting) as its kick, each sent
// away; saturates its kick eventfd, which stops the port; then runs its
// rings with call and error eventfds in blocking mode, their counters a
// step from full, and sends four frames from an address not its own
// (dropped as spoofed_mac) and a chain shorter than its virtio-net header
// (dropped by the port: reason port) while staying connected. A well-behaved
// front-end on port 1 exchanges frames with the wire (its broadcast
// reaches port 0's guest too, whose call tapfwd must signal), and the lab
// answers ping through the TAP, before and after 5 idle seconds in which
// tapfwd uses under 0.3 CPU-seconds; SIGTERM then ends it within
// testbed.StopGrace, the systemd unit's limit.
func TestHostileFrontEnd(t *testing.T) {
	testkit.NeedRoot(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), "--vhost-user", filepath.Join(t.TempDir(), "vhost"), "--vm-ports", "2")
	ports := vhostPorts(t, bed, 2)
	_, out := vhostusertest.StartHelper(t, "TestHelperHostile", hostileEnv+"="+ports[0].Socket)
	lines := bufio.NewScanner(out)
	for _, want := range []string{"pipe-kick: sent away", "socket-kick: sent away", "saturated-kick: stopped", "blocking-calls: running"} {
		if !lines.Scan() {
			t.Fatalf("the hostile front-end ended before %q (%v); tapfwd said:\n%s", want, lines.Err(), fw.Output())
		}
		if l := lines.Text(); l != want {
			t.Fatalf("the hostile front-end says %q, want %q; tapfwd said:\n%s", l, want, fw.Output())
		}
	}
	mac, err := net.ParseMAC(ports[1].MAC)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, bed, ports[1].Socket, mac)
	testkit.ReachableWithin(t, bed, 5*time.Second)
	waitVMPortDrops(t, bed, ports[0].Name, "spoofed_mac", 4)
	waitVMPortDrops(t, bed, ports[0].Name, "port", 1)

	time.Sleep(500 * time.Millisecond) // the metrics server's connections close
	cpu := func() time.Duration {
		s, err := procfs.ReadStat(fw.Pid())
		if err != nil || s.Comm != "tapfwd" {
			t.Fatalf("/proc/%d/stat: %+v %v", fw.Pid(), s, err)
		}
		return s.CPU()
	}
	before := cpu()
	time.Sleep(5 * time.Second)
	used := cpu() - before
	t.Logf("tapfwd used %v of CPU over 5 idle seconds with the hostile front-end connected (%v in all)", used, before+used)
	if used >= 300*time.Millisecond {
		t.Errorf("tapfwd used %v of CPU over 5 idle seconds, want under 0.3 s", used)
	}
	exchange(t, bed, ports[1].Socket, mac)
	testkit.ReachableWithin(t, bed, 5*time.Second)

	start := time.Now()
	if err := fw.Stop(); err != nil {
		t.Fatalf("SIGTERM with the hostile front-end connected: %v (after %v); tapfwd said:\n%s", err, time.Since(start), fw.Output())
	}
	t.Logf("SIGTERM ended tapfwd in %v", time.Since(start).Round(time.Millisecond))
}

// waitVMPortDrops waits up to 5 s for /metrics to count n frames from
// port's guest dropped for reason.
func waitVMPortDrops(t *testing.T, bed *testbed.Bed, port, reason string, n float64) {
	t.Helper()
	var got float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = prom.Sample(prom.Scrape(t, bed), "tapfwd_vm_port_drops_total", `port="`+port+`"`, `direction="tx"`, `reason="`+reason+`"`)
		if got == n {
			return
		}
	}
	t.Errorf("port %s: %v frames from the guest dropped as %s, want %v", port, got, reason, n)
}
