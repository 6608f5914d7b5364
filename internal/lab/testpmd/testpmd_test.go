package testpmd_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testpmd"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// Commands and their statistics, on a null device in txonly: the port's
// counters, the forward statistics of stop and of an exit on SIGINT, and
// no runtime directory left behind.
func TestCommandsAndStats(t *testing.T) {
	testpmd.NeedTest(t)
	p := testpmd.StartTest(t, testpmd.Config{Devices: []string{"net_null0"}, Forward: "txonly", TxPkts: 128})
	ps, err := p.PortStats(0)
	if err != nil || ps.TxPackets != 0 {
		t.Fatalf("before start: %+v %v", ps, err)
	}
	if err := p.StartForwarding(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	fw, err := p.StopForwarding()
	if err != nil || len(fw) != 1 || fw[0].TxPackets == 0 {
		t.Fatalf("stop: %+v %v", fw, err)
	}
	ps, err = p.PortStats(0)
	if err != nil || ps.TxPackets != fw[0].TxPackets {
		t.Fatalf("after stop: %+v %v; forward %+v", ps, err, fw)
	}
	xs, err := p.XStats(0)
	if err != nil || xs["tx_good_packets"] != ps.TxPackets || xs["tx_q0_packets"] != ps.TxPackets {
		t.Fatalf("xstats %v %v", xs, err)
	}
	if err := p.StartForwarding(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	out, err := p.Interrupt()
	if err != nil {
		t.Fatalf("SIGINT: %v\n%s", err, out)
	}
	fw2, err := testpmd.ParseForwardStats(out)
	if err != nil || fw2[0].TxPackets == 0 {
		t.Fatalf("forward statistics at exit: %+v %v\n%s", fw2, err, out)
	}
	if _, err := os.Stat(p.RuntimeDir()); !os.IsNotExist(err) {
		t.Fatalf("runtime directory %s left: %v", p.RuntimeDir(), err)
	}
}

// A netns with a veth pair, removed at cleanup: testpmd's net_af_packet
// runs on one end, the other counts what arrives.
func vethNetns(t *testing.T) (ns, dev, peer string) {
	t.Helper()
	ns = fmt.Sprintf("tfwdpmd-%d", os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	dev, peer = "pmd0", "wire0"
	run("-n", ns, "link", "add", dev, "type", "veth", "peer", "name", peer)
	run("-n", ns, "link", "set", dev, "up")
	run("-n", ns, "link", "set", peer, "up")
	return ns, dev, peer
}

// rxPackets is what interface dev in ns received.
func rxPackets(t *testing.T, ns, dev string) uint64 {
	out, err := exec.Command("ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev).Output()
	if err != nil {
		t.Fatal(err)
	}
	var links []struct {
		Stats struct {
			RX struct{ Packets uint64 } `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -s -j link: %v: %s", err, out)
	}
	return links[0].Stats.RX.Packets
}

// DPDK's own vhost-user back-end, the reference: testpmd listens on a
// socket (net_vhost) and forwards to a veth (net_af_packet); a front-end
// that connects as QEMU does gets its frames onto the wire.
func TestVhostBackEnd(t *testing.T) {
	testpmd.NeedTest(t)
	ns, dev, peer := vethNetns(t)
	sock := filepath.Join(t.TempDir(), "dpdk.sock")
	p := testpmd.StartTest(t, testpmd.Config{Netns: ns, Devices: []string{testpmd.VhostBackEnd(sock, 1), testpmd.AFPacket(dev, 1)}})
	if err := p.StartForwarding(); err != nil {
		t.Fatal(err)
	}
	d, err := vhostusertest.Dial(sock, vhostusertest.Config{})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
	defer d.Close()
	before := rxPackets(t, ns, peer)
	f := make([]byte, 60)
	copy(f, []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x88, 0xb5})
	const n = 50
	for range n {
		for d.Send(make([]byte, 10), f, vhostusertest.Flat) == vhostusertest.ErrFull {
			time.Sleep(time.Millisecond)
		}
	}
	var got uint64
	for deadline := time.Now().Add(10 * time.Second); got < n && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = rxPackets(t, ns, peer) - before
	}
	fw, err := p.StopForwarding()
	if got != n || err != nil || len(fw) != 2 || fw[0].RxPackets != n || fw[1].TxPackets != n {
		t.Fatalf("the wire got %d of %d frames; forward %+v %v\n%s", got, n, fw, err, lastLines(p.Output(), 40))
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
