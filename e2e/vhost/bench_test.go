package vhost

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/lab/testpmd"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// BenchmarkBackEnds measures tapfwd's vhost-user port beside DPDK's own
// vhost-user back-end (testpmd: net_vhost0 forwarding to net_af_packet on
// the same NIC veth), in front of one identical testpmd virtio-user
// front-end (the guest): guest->wire (the front-end in txonly, counted in
// the wire veth's rx_packets) and wire->guest (a testpmd on the wire veth
// in txonly to the guest's MAC, counted by the front-end in rxonly), at 64
// and 1514 B. It reports the frames per second that arrived and the CPU
// the back-end's process used over the window (cpu: 1 is one core; DPDK's
// busy-polls). Each round runs TAPFWD_BENCH_SECS seconds (default 5), so
// run it once per round and interleave the back-ends with -count:
//
//	go test -run '^$' -bench BackEnds -benchtime 1x -count 6 ./e2e/vhost/ | tee be.txt
//	benchstat -col /backend be.txt
//
// The sub-benchmarks are backend=tapfwd|dpdk/dir=g2w|w2g/size=64|1514.
func BenchmarkBackEnds(b *testing.B) {
	testkit.NeedRoot(b)
	need.Found(b, testpmd.Binary, testpmd.Find)
	secs := 5
	if v, err := strconv.Atoi(os.Getenv("TAPFWD_BENCH_SECS")); err == nil && v > 0 {
		secs = v
	}
	for _, backend := range []string{"tapfwd", "dpdk"} {
		for _, dir := range []string{"g2w", "w2g"} {
			for _, size := range []int{64, 1514} {
				b.Run(fmt.Sprintf("backend=%s/dir=%s/size=%d", backend, dir, size), func(b *testing.B) {
					for range b.N {
						pps, cpu := backEndRound(b, backend, dir == "g2w", size, time.Duration(secs)*time.Second)
						b.ReportMetric(pps, "pps")
						b.ReportMetric(cpu, "cpu")
					}
				})
			}
		}
	}
}

// placement splits the machine's CPUs between the front-end (the guest),
// the back-end under test and the wire's generator, each testpmd's
// forwarding lcore on CPUs of its own as far as there are CPUs: on 8 or
// more, CPUs 0-1, 2-3 and 4-5 (tapfwd's workers on 2 and 3); on fewer,
// the front-end forwards on CPU 1 and the back-end (DPDK's forwarding
// lcore, every tapfwd worker) on CPU 0, and the generator shares them.
type placement struct {
	guest, backEnd, wire string   // testpmd -l
	backEAL              []string // the DPDK back-end's EAL options
	tapfwdCPUs           string   // tapfwd --cpus
}

func place() placement {
	if runtime.NumCPU() >= 8 {
		return placement{guest: "0,1", backEnd: "2,3", wire: "4,5", tapfwdCPUs: "2,3"}
	}
	return placement{guest: "0,1", backEnd: "0,1", backEAL: []string{"--main-lcore=1"}, wire: "0,1", tapfwdCPUs: "0"}
}

// backEndRound runs one measurement and returns frames per second and the
// back-end's CPU.
func backEndRound(b *testing.B, backend string, toWire bool, size int, window time.Duration) (pps, cpu float64) {
	bed := testbed.NewForTest(b, testbed.Config{Mode: testbed.Forwarder})
	pl := place()
	sock, mac, pid := "", net.HardwareAddr{0x02, 0, 0, 0, 0x99, 0x01}, 0
	// Not b.TempDir(): the sub-benchmarks' names have "=", which DPDK's
	// device arguments split on.
	tmp, err := os.MkdirTemp("", "tfwbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(tmp) })
	if backend == "tapfwd" {
		dir := filepath.Join(tmp, "vhost")
		fw := testkit.StartOn(b, bed, testkit.PlainTapfwd(b), "--vhost-user", dir, "--vm-ports", "1", "--vm-port-queues", "1",
			"--cpus", pl.tapfwdCPUs)
		p := vhostPorts(b, bed, 1)[0]
		sock, pid = p.Socket, fw.Pid()
		mac, _ = net.ParseMAC(p.MAC)
		// An ARP request from the wire host teaches the guest's worker that
		// the wire host is on the wire, so that its frames go there alone.
		bed.Run(context.Background(), bed.WireNS, "ping", "-c", "1", "-W", "1", bed.WireAddr.Addr().Next().Next().Next().String())
	} else {
		sock = filepath.Join(tmp, "dpdk.sock")
		be := testpmd.StartTest(b, testpmd.Config{Devices: []string{testpmd.VhostBackEnd(sock, 1), testpmd.AFPacket(bed.NIC, 1)},
			Netns: bed.FwdNS, Lcores: pl.backEnd, EAL: pl.backEAL})
		pid = be.Pid()
		defer func() {
			st, err := be.StopForwarding()
			b.Logf("DPDK back-end's forward statistics: %+v %v", st, err)
		}()
		if err := be.StartForwarding(); err != nil {
			b.Fatal(err)
		}
	}
	wireMAC := strings.TrimSpace(readIn(b, bed, bed.WireNS, "/sys/class/net/"+bed.WireIf+"/address"))
	guest := testpmd.Config{Devices: []string{testpmd.VirtioUser(sock, 1, mac, "")}, Lcores: pl.guest, TxPkts: size,
		Forward: "rxonly", Args: []string{"--eth-peer=0," + wireMAC}}
	if toWire {
		guest.Forward = "txonly"
	}
	fe := testpmd.StartTest(b, guest)
	var count func() uint64
	if toWire {
		count = func() uint64 {
			return readUint(b, bed, bed.WireNS, "/sys/class/net/"+bed.WireIf+"/statistics/rx_packets")
		}
	} else {
		gen := testpmd.StartTest(b, testpmd.Config{Devices: []string{testpmd.AFPacket(bed.WireIf, 1)}, Netns: bed.WireNS, Lcores: pl.wire,
			Forward: "txonly", TxPkts: size, Args: []string{"--eth-peer=0," + mac.String()}})
		if err := gen.StartForwarding(); err != nil {
			b.Fatal(err)
		}
		defer gen.StopForwarding()
		count = func() uint64 {
			ps, err := fe.PortStats(0)
			if err != nil {
				b.Fatal(err)
			}
			return ps.RxPackets
		}
	}
	if err := fe.StartForwarding(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		st, err := fe.StopForwarding()
		b.Logf("front-end's forward statistics: %+v %v", st, err)
	}()
	time.Sleep(time.Second) // rings filled, rates steady
	n0, c0, t0 := count(), cpuTicks(b, pid), time.Now()
	time.Sleep(window)
	n1, c1, t1 := count(), cpuTicks(b, pid), time.Now()
	s := t1.Sub(t0).Seconds()
	return float64(n1-n0) / s, float64(c1-c0) / 100 / s // USER_HZ
}

// cpuTicks is the user and system time of process pid, all its threads,
// in clock ticks (proc(5): fields 14 and 15 of /proc/PID/stat).
func cpuTicks(b *testing.B, pid int) uint64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s
}

func readIn(b *testing.B, bed *testbed.Bed, ns, path string) string {
	out, err := bed.Run(context.Background(), ns, "cat", path)
	if err != nil {
		b.Fatalf("%s in %s: %v", path, ns, err)
	}
	return out
}

func readUint(b *testing.B, bed *testbed.Bed, ns, path string) uint64 {
	v, err := strconv.ParseUint(strings.TrimSpace(readIn(b, bed, ns, path)), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return v
}
