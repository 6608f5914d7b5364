package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
)

// TestNotRoot checks the one-line errors without privileges: each says
// what is needed, for the TAP (TUNSETIFF) and for entering a network
// namespace (setns).
func TestNotRoot(t *testing.T) {
	testkit.NeedRoot(t)
	clitest.AsNobody(t, "tapfwd", testkit.Tapfwd(t), "CAP_NET_ADMIN", "run", "--nic", "lo", "--tap-mtu", "1500")
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	clitest.AsNobody(t, "tapfwd", testkit.Tapfwd(t), "needs CAP_SYS_ADMIN (run as root)", "vm-port", "list", "--tap-netns", bed.LabNS)
}

// TestLinkFlap takes the NIC and then the TAP down and up during an iperf3
// run: tapfwd keeps running, logs each event once, does not spin while a
// link is down, and traffic resumes within 2 s of the link coming back.
func TestLinkFlap(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	bed, fw := testkit.Start(t, testkit.Tapfwd(t))
	wait := traffic.StartIperf(t, bed, iperf.Options{Duration: 10 * time.Second, Streams: 2})
	for _, link := range []struct{ ns, dev, log string }{
		{bed.FwdNS, bed.NIC, "NIC link is down"},
		{bed.LabNS, bed.LabIf, "TAP is down"},
	} {
		traffic.FlapLink(t, bed, fw, link.ns, link.dev, func() {
			before := kernel.CPUTime(t, fw.Pid())
			time.Sleep(time.Second)
			// A spinning worker burns a CPU second a second.
			if d := kernel.CPUTime(t, fw.Pid()) - before; d > 300*time.Millisecond {
				t.Errorf("%s down: tapfwd used %v of CPU in 1 s (spinning?)", link.dev, d)
			}
		})
		if n := strings.Count(fw.Output(), link.log); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", link.log, n, fw.Output())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := wait(); err != nil {
		t.Errorf("iperf3 across the flaps: %v", err)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit after flaps: %v\n%s", err, fw.Output())
	}
	if !strings.Contains(fw.Output(), "NIC is forwarding again") || !strings.Contains(fw.Output(), "TAP is forwarding again") {
		t.Errorf("recovery not logged:\n%s", fw.Output())
	}
}

// TestDeviceRemoved deletes the NIC, or the TAP, under load: tapfwd exits
// within a second with a one-line error and a non-zero status.
func TestDeviceRemoved(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	for _, tc := range []struct{ name, want string }{
		{"nic", "the NIC went away"},
		{"tap", "the TAP device went away"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bed, fw := testkit.Start(t, testkit.PlainTapfwd(t))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go iperf.Run(ctx, bed, iperf.Options{Duration: 10 * time.Second})
			time.Sleep(1500 * time.Millisecond)
			if tc.name == "nic" {
				testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "del", bed.NIC)
			} else {
				testkit.BedRun(t, bed, bed.LabNS, "ip", "link", "del", bed.LabIf)
			}
			took := testkit.WaitExit(t, fw, time.Second)
			t.Logf("exited %v after the removal", took.Round(time.Millisecond))
			err := fw.Stop()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 1 {
				t.Errorf("exit: %v, want status 1", err)
			}
			lines := strings.Split(strings.TrimSpace(fw.Output()), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "tapfwd: ") || !strings.Contains(last, tc.want) {
				t.Errorf("last line %q, want a tapfwd error saying %q", last, tc.want)
			}
		})
	}
}

// TestWaitNIC removes the NIC and makes it again: with --wait-nic tapfwd
// waits, then forwards through the new one without a restart.
func TestWaitNIC(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--wait-nic")
	// Scrapes all along: the reattach swaps the NIC's sockets under the
	// collector (the race detector in tapfwd, built with it when the tests
	// run with it, checks that they do not race).
	scraper := prom.StartScraper(t, bed, 20*time.Millisecond)
	testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "del", bed.NIC)
	time.Sleep(500 * time.Millisecond)
	if fw.Exited() {
		t.Fatalf("tapfwd exited despite --wait-nic:\n%s", fw.Output())
	}
	testkit.BedRun(t, bed, bed.WireNS, "ip", "link", "add", bed.WireIf, "type", "veth", "peer", "name", bed.NIC, "netns", bed.FwdNS)
	testkit.BedRun(t, bed, bed.WireNS, "ip", "addr", "add", bed.WireAddr.String(), "dev", bed.WireIf)
	testkit.BedRun(t, bed, bed.WireNS, "ip", "link", "set", bed.WireIf, "up")
	testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "set", bed.NIC, "up")
	took := testkit.ReachableWithin(t, bed, 5*time.Second)
	t.Logf("lab reachable %v after the NIC came back", took.Round(time.Millisecond))
	if pages, failed := scraper.Stop(); len(pages) == 0 || failed != 0 {
		t.Errorf("scrapes during the flap: %d answered, %d failed", len(pages), failed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second})
	if err != nil || r.Bytes < 20<<20 {
		t.Fatalf("TCP through the new NIC: %v, %d bytes", err, r.Bytes)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("%v\n%s", err, fw.Output())
	}
	if !strings.Contains(fw.Output(), "NIC is back") || strings.Contains(fw.Output(), "DATA RACE") {
		t.Errorf("no recovery in the log, or a race:\n%s", fw.Output())
	}
}

// TestShutdownUnderLoad sends SIGTERM and SIGINT while iperf3 runs at full
// speed: tapfwd exits 0 within a second and the TAP is gone.
func TestShutdownUnderLoad(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			bed, fw := testkit.Start(t, testkit.PlainTapfwd(t), "--queues", "2")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go iperf.Run(ctx, bed, iperf.Options{Duration: 10 * time.Second, Streams: 4})
			time.Sleep(2 * time.Second)
			if err := syscall.Kill(fw.Pid(), sig); err != nil {
				t.Fatal(err)
			}
			took := testkit.WaitExit(t, fw, time.Second)
			t.Logf("exited %v after %v", took.Round(time.Millisecond), sig)
			if err := fw.Stop(); err != nil {
				t.Errorf("exit status after %v: %v\n%s", sig, err, fw.Output())
			}
			if _, err := bed.Run(context.Background(), bed.LabNS, "ip", "link", "show", bed.LabIf); err == nil {
				t.Error("TAP still exists after shutdown")
			}
		})
	}
}

// TestUser drops to nobody after start-up: no capabilities are left, and
// forwarding and metrics go on.
func TestUser(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	// One MAC for both starts: the wire keeps the first one in its ARP cache.
	mac := "02:00:00:00:aa:01"
	bed, fw := testkit.Start(t, testkit.PlainTapfwd(t), "--user", "nobody", "--vm-ports", "2", "--tap-mac", mac)
	kernel.CheckDropped(t, fw.Pid())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, rev := range []bool{false, true} {
		if r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev}); err != nil || r.Bytes < 20<<20 {
			t.Fatalf("TCP after dropping privileges (reverse %v): %v", rev, err)
		}
	}
	m := prom.Scrape(t, bed)
	if prom.Sample(m, "tapfwd_scrape_errors") != 0 || prom.Sample(m, "tapfwd_netdev_drops_total", `device="`+bed.LabIf+`"`) < 0 {
		t.Errorf("metrics without privileges: scrape errors %v", prom.Sample(m, "tapfwd_scrape_errors"))
	}
	ports, err := tapport.List(bed.LabNS, bed.LabIf)
	if err != nil || len(ports) != 2 {
		t.Fatalf("VM ports: %+v %v", ports, err)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("%v\n%s", err, fw.Output())
	}
	nodesGone(t, "SIGTERM", ports)
	// Killed outright, it leaves no node behind either.
	fw = testkit.StartOn(t, bed, testkit.PlainTapfwd(t), "--user", "nobody", "--vm-ports", "1", "--tap-mac", mac)
	if ports, err = tapport.List(bed.LabNS, bed.LabIf); err != nil || len(ports) != 1 {
		t.Fatalf("VM ports: %+v %v", ports, err)
	}
	fw.Kill()
	nodesGone(t, "SIGKILL", ports)
}

// nodesGone waits up to 2 s for the ports' links and device nodes to go.
func nodesGone(t *testing.T, what string, ports []tapport.Port) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var left []string
		for _, p := range ports {
			if _, err := os.Lstat(p.Dev); err == nil {
				left = append(left, p.Dev)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s with --user: device nodes left behind: %v", what, left)
			return
		}
	}
}

// TestStrictMACTwoInstances runs two tapfwd instances on one NIC, each
// with its own TAP and lab namespace and --strict-mac: both labs answer the
// wire, the second warns of the first, neither instance sees the other's
// unicast, and a frame with a forged source MAC from a lab is dropped and
// counted.
func TestStrictMACTwoInstances(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	bed, fw1 := testkit.Start(t, testkit.Tapfwd(t), "--strict-mac", "--tap-mac", "02:00:00:aa:00:01")
	lab2 := bed.LabNS + "2"
	if out, err := exec.Command("ip", "netns", "add", lab2).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v %s", lab2, err, out)
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "pids", lab2).Run()
		exec.Command("ip", "netns", "del", lab2).Run()
	})
	x := bed.LabAddr.Addr().As4()
	addr2 := fmt.Sprintf("%d.%d.%d.3", x[0], x[1], x[2])
	tap2 := "tfwt2-" + bed.ID
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd2 := bed.Command(context.Background(), bed.FwdNS, testkit.Tapfwd(t), "run", "--nic", bed.NIC, "--tap", tap2,
		"--tap-netns", lab2, "--tap-addr", addr2+"/24", "--tap-mac", "02:00:00:aa:00:02", "--strict-mac",
		"--metrics-addr", "127.0.0.1:9311")
	log2, err := os.CreateTemp(t.TempDir(), "tapfwd2")
	if err != nil {
		t.Fatal(err)
	}
	cmd2.Stdout, cmd2.Stderr = log2, log2
	output2 := func() string { b, _ := os.ReadFile(log2.Name()); return string(b) }
	if err := cmd2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd2.Process.Signal(syscall.SIGTERM)
		cmd2.Wait()
	})
	// Both labs answer the wire.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := bed.Run(ctx, bed.WireNS, "ping", "-c", "1", "-W", "1", addr2); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second lab not reachable:\n%s", output2())
		}
	}
	testkit.BedRun(t, bed, bed.WireNS, "ping", "-c", "2", "-i", "0.2", bed.LabAddr.Addr().String())
	// The second one warns of the first, naming it: their labs cannot
	// reach each other through the NIC.
	if out := output2(); !strings.Contains(out, "level=WARN msg=\"another tapfwd forwards on this NIC: its lab and this one cannot reach each other") ||
		!strings.Contains(out, fmt.Sprintf("other_pid=%d other_command=", fw1.Pid())) {
		t.Errorf("the second tapfwd did not warn of the first (pid %d):\n%s", fw1.Pid(), out)
	}

	second := func() float64 {
		_, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://127.0.0.1:9311/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return prom.Sample(body, "tapfwd_packets_total", `device="`+bed.NIC+`"`, `direction="rx"`)
	}
	before := second()
	r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	seen := second() - before
	if r.Bytes < 20<<20 {
		t.Errorf("lab 1 through its instance: only %d bytes", r.Bytes)
	}
	t.Logf("iperf3 to lab 1 moved %d bytes; instance 2 received %v frames meanwhile", r.Bytes, seen)
	if seen > 50 { // ARP and IPv6 multicast chatter only
		t.Errorf("instance 2 received %v frames during a unicast run to lab 1", seen)
	}

	// A forged source MAC from lab 1 is dropped.
	labSock := traffic.OpenRaw(t, bed, bed.LabNS, bed.LabIf)
	forged := traffic.Tagged(t, []byte{2, 0, 0, 0xbb, 0, 9}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0, traffic.UDPPacket(t, bed))
	forged = append(forged[:12], forged[16:]...) // untagged
	for i := 0; i < 5; i++ {
		if _, err := syscall.Write(labSock, forged); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	m := prom.Scrape(t, bed)
	if d := prom.Sample(m, "tapfwd_drops_total", `reason="spoofed_mac"`, `device="`+bed.LabIf+`"`); d < 5 {
		t.Errorf("spoofed_mac drops = %v, want >= 5", d)
	}
	if err := fw1.Stop(); err != nil {
		t.Fatal(err)
	}
}
