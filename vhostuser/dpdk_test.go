package vhostuser_test

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/syncbuf"
	"github.com/tapfwd/tapfwd/internal/lab/testpmd"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// Tests with DPDK 22.11's virtio-user front-end (dpdk-testpmd, Debian's
// dpdk-dev): the test is the back-end application on an in-process Port.

var guestMAC = net.HardwareAddr{0x02, 0xd0, 0xd0, 0, 0, 1}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// startFrontEnd starts testpmd as the front-end of p with queues queue
// pairs, extra virtio-user arguments and more testpmd options, and waits
// until p runs. It is killed at cleanup.
func startFrontEnd(t *testing.T, p *testPort, queues int, extra string, c testpmd.Config) *testpmd.Process {
	t.Helper()
	c.Devices = []string{testpmd.VirtioUser(p.Path(), queues, guestMAC, extra)}
	if c.Queues == 0 {
		c.Queues = queues
	}
	if testing.Verbose() {
		c.Log = logWriter{t}
	}
	tp := testpmd.StartTest(t, c)
	p.wait(t, vhostuser.EventRunning)
	return tp
}

// reflect writes frames to q and reads what the guest sends back until
// every frame came back or 10 s passed, and returns what came back. At
// most 128 frames are in flight: testpmd's io forwarding drops what does
// not fit its transmit ring (256 entries) when the port reads late.
func reflect(t *testing.T, q *vhostuser.Queue, frames [][]byte) [][]byte {
	t.Helper()
	wb := make([][]byte, len(frames))
	for i, f := range frames {
		wb[i] = withHdr(0, hdr(0, 0, 0, 0, 0, 0), f)
	}
	rb, sizes := bufs(64, 70000)
	var back [][]byte
	sent := 0
	for deadline := time.Now().Add(10 * time.Second); len(back) < len(frames) && time.Now().Before(deadline); {
		progress := false
		if sent < len(wb) {
			n, err := q.Write(wb[sent:min(len(wb), len(back)+128)], 0)
			if err != nil && err != unix.EAGAIN {
				t.Fatalf("queue %d: write: %v", q.Index(), err)
			}
			sent += n
			progress = n > 0
		}
		n, err := q.Read(rb, sizes, 0)
		if err != nil && err != unix.EAGAIN {
			t.Fatalf("queue %d: read: %v", q.Index(), err)
		}
		for i := range n {
			back = append(back, append([]byte(nil), rb[i][vnethdr.Len:min(sizes[i], len(rb[i]))]...))
		}
		if !progress && n == 0 {
			pollFd(q.Fd(), 10*time.Millisecond)
		}
	}
	if sent != len(frames) || len(back) != len(frames) {
		t.Fatalf("queue %d: wrote %d of %d frames, %d came back; queue %+v", q.Index(), sent, len(frames), len(back), q.Stats())
	}
	return back
}

// testFrames are n frames to guestMAC of sizes from 60 to 1514 bytes, each
// with its number in it.
func testFrames(n int, src byte) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		size := 60 + (i*397)%(1514-60+1)
		f := frame(size, src, byte(i))
		copy(f, guestMAC)
		f[14], f[15] = byte(i>>8), byte(i)
		out[i] = f
	}
	return out
}

// checkReflected compares what came back with what was sent, in order.
func checkReflected(t *testing.T, sent, back [][]byte) {
	t.Helper()
	for i := range sent {
		if !bytesEqual(back[i], sent[i]) {
			t.Fatalf("frame %d: sent %d bytes %x..., got %d bytes %x...", i, len(sent[i]), head(sent[i]), len(back[i]), head(back[i]))
		}
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// DPDK's virtio-user connects and negotiates, without offloads and with
// checksum and TSO offloads (for which it resets the device and
// negotiates again: the port runs again), and frames move intact both
// ways through testpmd's io forwarding.
func TestDPDKNegotiate(t *testing.T) {
	testpmd.NeedTest(t)
	csumTSO := uint64(1<<vhostuser.FeatureNetCsum | 1<<vhostuser.FeatureNetGuestCsum |
		1<<vhostuser.FeatureNetHostTSO4 | 1<<vhostuser.FeatureNetHostTSO6 |
		1<<vhostuser.FeatureNetGuestTSO4 | 1<<vhostuser.FeatureNetGuestTSO6)
	for _, c := range []struct {
		name string
		args []string
		want uint64 // of csumTSO
	}{
		{"no offloads", nil, 0},
		// RX: UDP and TCP checksums, LRO; TX: UDP and TCP checksums, TSO.
		{"csum and TSO", []string{"--rx-offloads=0x1c", "--tx-offloads=0x2c"}, csumTSO},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			p := newPort(t, vhostuser.Config{})
			tp := startFrontEnd(t, p, 1, "", testpmd.Config{Args: c.args})
			if err := tp.StartForwarding(); err != nil {
				t.Fatal(err)
			}
			f := p.Features()
			t.Logf("features %#x: %v", f, vhostuser.FeatureNames(f))
			if f&csumTSO != c.want || f&(1<<vhostuser.FeatureVersion1|1<<vhostuser.FeatureNetMrgRxbuf) == 0 {
				t.Fatalf("features %v, want of the offloads %v", vhostuser.FeatureNames(f), vhostuser.FeatureNames(c.want))
			}
			sent := testFrames(64, 1)
			checkReflected(t, sent, reflect(t, p.Queues()[0], sent))
			if st := p.Stats(); st.ProtocolErrors != 0 || st.GuestErrors != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// The reflector: frames of every size from 60 to 1514 bytes go to the
// guest and come back from testpmd's io forwarding intact and in order,
// and the port's counters agree exactly with testpmd's own statistics.
// DPDK's packed_vq=1, in_order=1 and mrg_rxbuf=0 fall back to what the
// port offers (split rings; one buffer per frame) and carry them the same.
func TestDPDKReflect(t *testing.T) {
	testpmd.NeedTest(t)
	for _, extra := range []string{"", "packed_vq=1", "in_order=1", "mrg_rxbuf=0", "packed_vq=1,in_order=1,mrg_rxbuf=0"} {
		t.Run(strings.NewReplacer(",", "_", "=", "").Replace(cmp(extra, "defaults")), func(t *testing.T) {
			p := newPort(t, vhostuser.Config{})
			tp := startFrontEnd(t, p, 1, extra, testpmd.Config{})
			if err := tp.StartForwarding(); err != nil {
				t.Fatal(err)
			}
			if extra == "mrg_rxbuf=0" && p.Features()&(1<<vhostuser.FeatureNetMrgRxbuf) != 0 {
				t.Fatalf("mrg_rxbuf=0 negotiated %v", vhostuser.FeatureNames(p.Features()))
			}
			sent := testFrames(500, 2)
			checkReflected(t, sent, reflect(t, p.Queues()[0], sent))
			fw, err := tp.StopForwarding()
			if err != nil {
				t.Fatal(err)
			}
			ps, err := tp.PortStats(0)
			if err != nil {
				t.Fatal(err)
			}
			st, n := p.Stats(), uint64(len(sent))
			var bytes uint64
			for _, f := range sent {
				bytes += uint64(len(f))
			}
			if st.RxFrames != n || st.TxFrames != n || ps.RxPackets != n || ps.TxPackets != n ||
				fw[0].RxPackets != n || fw[0].TxPackets != n || fw[0].TxDropped != 0 ||
				st.RxBytes != bytes || st.TxBytes != bytes || ps.RxBytes != bytes || ps.TxBytes != bytes {
				t.Fatalf("%d frames of %d bytes: port %+v, testpmd %+v, forward %+v", n, bytes, st, ps, fw)
			}
		})
	}
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// A burst of 256 frames to an idle guest (testpmd in rxonly, its 256
// receive buffers posted) goes in one Write, whole, with at most one
// notification, and testpmd counts 256.
func TestDPDKBurst(t *testing.T) {
	testpmd.NeedTest(t)
	p := newPort(t, vhostuser.Config{})
	tp := startFrontEnd(t, p, 1, "queue_size=256", testpmd.Config{Forward: "rxonly", Args: []string{"--rxd=256", "--txd=256"}})
	if err := tp.StartForwarding(); err != nil {
		t.Fatal(err)
	}
	frames := testFrames(256, 3)
	wb := make([][]byte, len(frames))
	for i, f := range frames {
		wb[i] = withHdr(0, hdr(0, 0, 0, 0, 0, 0), f)
	}
	q := p.Queues()[0]
	var n int
	var err error
	// The guest posts its buffers as its port starts; wait for all.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n, err = q.Write(wb, 0); n != 0 || err != unix.EAGAIN {
			break
		}
	}
	if n != 256 || err != nil {
		t.Fatalf("one Write of 256 frames to an idle guest took %d: %v", n, err)
	}
	var got uint64
	for deadline := time.Now().Add(10 * time.Second); got < 256 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ps, err := tp.PortStats(0)
		if err != nil {
			t.Fatal(err)
		}
		got = ps.RxPackets
	}
	st := p.Stats()
	if got != 256 || st.RxFrames != 256 || st.RxNoRoom != 0 || st.Interrupts > 1 {
		t.Fatalf("testpmd received %d; port %+v", got, st)
	}
}

// testpmd's txonly floods the port for a second; every frame it counts as
// sent is one the port read (and the same bytes), and each is its 64-byte
// UDP frame.
func TestDPDKTxOnly(t *testing.T) {
	testpmd.NeedTest(t)
	p := newPort(t, vhostuser.Config{})
	tp := startFrontEnd(t, p, 1, "", testpmd.Config{Forward: "txonly", TxPkts: 64})
	q := p.Queues()[0]
	rb, sizes := bufs(256, 2048)
	var frames, bad uint64
	read := func(until time.Time) {
		for time.Now().Before(until) {
			n, err := q.Read(rb, sizes, 0)
			if err != nil && err != unix.EAGAIN {
				t.Fatalf("read: %v", err)
			}
			for i := range n {
				f := rb[i][vnethdr.Len:sizes[i]]
				if len(f) != 64 || f[12] != 0x08 || f[13] != 0x00 || f[23] != unix.IPPROTO_UDP {
					bad++
				}
			}
			frames += uint64(n)
			if n == 0 {
				pollFd(q.Fd(), 10*time.Millisecond)
			}
		}
	}
	if err := tp.StartForwarding(); err != nil {
		t.Fatal(err)
	}
	read(time.Now().Add(time.Second))
	fw, err := tp.StopForwarding()
	if err != nil {
		t.Fatal(err)
	}
	read(time.Now().Add(300 * time.Millisecond)) // what was still in the ring
	ps, err := tp.PortStats(0)
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	t.Logf("testpmd sent %d frames (%d dropped for a full ring); the port read %d", ps.TxPackets, fw[0].TxDropped, st.TxFrames)
	if frames == 0 || bad != 0 || st.TxFrames != frames || ps.TxPackets != frames || fw[0].TxPackets != frames ||
		st.TxBytes != ps.TxBytes || st.TxDropped != 0 {
		t.Fatalf("read %d frames (%d not testpmd's); port %+v; testpmd %+v, forward %+v", frames, bad, st, ps, fw)
	}
}

// With queues=2 DPDK's virtio-user negotiates VIRTIO_NET_F_MQ, sets up
// four rings and enables the second pair; frames go both ways on both
// pairs (io forwarding sends each back on the queue it came in on), and
// testpmd's per-queue counters agree with each Queue's.
func TestDPDKMultiqueue(t *testing.T) {
	testpmd.NeedTest(t)
	p := newPort(t, vhostuser.Config{QueuePairs: 2})
	tp := startFrontEnd(t, p, 2, "", testpmd.Config{})
	if err := tp.StartForwarding(); err != nil {
		t.Fatal(err)
	}
	if p.Features()&(1<<vhostuser.FeatureNetMQ) == 0 || p.ActivePairs() != 2 {
		t.Fatalf("features %v, %d active pairs", vhostuser.FeatureNames(p.Features()), p.ActivePairs())
	}
	sent := [2][][]byte{testFrames(200, 10), testFrames(300, 11)}
	for k, q := range p.Queues() {
		checkReflected(t, sent[k], reflect(t, q, sent[k]))
	}
	if _, err := tp.StopForwarding(); err != nil {
		t.Fatal(err)
	}
	xs, err := tp.XStats(0)
	if err != nil {
		t.Fatal(err)
	}
	for k, q := range p.Queues() {
		st, n := q.Stats(), uint64(len(sent[k]))
		rx, tx := xs[fmt.Sprintf("rx_q%d_good_packets", k)], xs[fmt.Sprintf("tx_q%d_good_packets", k)]
		if st.RxFrames != n || st.TxFrames != n || rx != n || tx != n {
			t.Errorf("queue %d: %d frames: port %+v, testpmd rx %d tx %d", k, n, st, rx, tx)
		}
	}
	if st := p.Stats(); st.ProtocolErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// With queues=2 against a single-queue port (no VIRTIO_NET_F_MQ offered),
// virtio-user still sets up rings 2 and 3 without asking GET_QUEUE_NUM:
// the port refuses them, counts and logs it, and keeps the connection, and
// frames move on the first pair.
func TestDPDKMoreQueuesThanThePort(t *testing.T) {
	testpmd.NeedTest(t)
	var log syncbuf.Buffer
	p := newPort(t, vhostuser.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	tp := startFrontEnd(t, p, 2, "", testpmd.Config{Queues: 1})
	if err := tp.StartForwarding(); err != nil {
		t.Fatal(err)
	}
	sent := testFrames(100, 12)
	checkReflected(t, sent, reflect(t, p.Queues()[0], sent))
	st := p.Stats()
	if st.ProtocolErrors == 0 || st.Disconnects != 0 || !strings.Contains(log.String(), "ring beyond the port's") {
		t.Fatalf("stats %+v; log:\n%s", st, log.String())
	}
	t.Logf("%d rings refused", st.ProtocolErrors)
}

// testpmd killed with SIGKILL and started again, 8 times (32 with
// TAPFWD_SOAK=1): each time the port runs again, moves frames, and once
// testpmd is gone the process's fds (eventfds, sockets, memfds) and its
// mappings of the guest's memory are back where they started.
func TestDPDKKillRestart(t *testing.T) {
	testpmd.NeedTest(t)
	cycles := 8
	if os.Getenv("TAPFWD_SOAK") != "" {
		cycles = 32
	}
	p := newPort(t, vhostuser.Config{})
	fds0, kinds0, maps0 := fdCount(t), fdKinds(t), mapsLines(t, "memfd:")
	for i := range cycles {
		tp := startFrontEnd(t, p, 1, "", testpmd.Config{})
		if err := tp.StartForwarding(); err != nil {
			t.Fatal(err)
		}
		sent := testFrames(32, byte(i))
		checkReflected(t, sent, reflect(t, p.Queues()[0], sent))
		if i == 0 {
			t.Logf("connected: %+v, %d memfd mappings (from %+v, %d)", fdKinds(t), mapsLines(t, "memfd:"), kinds0, maps0)
		}
		if mapsLines(t, "memfd:") == maps0 {
			t.Fatal("no mapping of the guest's memory while it runs")
		}
		tp.Kill()
		p.wait(t, vhostuser.EventDisconnected)
		waitFds(t, fds0)
		if k, m := fdKinds(t), mapsLines(t, "memfd:"); k != kinds0 || m != maps0 {
			t.Fatalf("cycle %d: after SIGKILL fds %+v, %d memfd mappings; before %+v, %d", i, k, m, kinds0, maps0)
		}
	}
	if st := p.Stats(); st.Connects != uint64(cycles) || st.Disconnects != uint64(cycles) || st.ProtocolErrors != 0 || st.GuestErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}
