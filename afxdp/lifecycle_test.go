package afxdp

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// TestPeerOffloads: attaching the program turns TSO (and the rest of
// GSO_SOFTWARE) off on the veth's peer, so the wire sends MTU-sized
// frames; the stack's checksums stay offloaded, and those partial
// checksums reach the socket, where Read marks them NEEDS_CSUM. Detaching
// gives the peer its TSO back.
func TestPeerOffloads(t *testing.T) {
	b := newBed(t, 1500)
	feats := []string{"tcp-segmentation-offload", "tx-udp-segmentation", "generic-segmentation-offload", "tx-checksumming"}
	state := func() map[string]string {
		m := map[string]string{}
		for _, f := range feats {
			m[f] = b.ethtoolFeature(b.WireNS, b.WireIf, f)
		}
		return m
	}
	before := state()
	n := b.open(Config{Ifname: b.NIC})
	if !n.PartialChecksums() {
		t.Error("partial checksums not taken on a veth")
	}
	during := state()
	t.Logf("peer offloads before %v, with XDP attached %v", before, during)
	if !strings.HasPrefix(before["tcp-segmentation-offload"], "on") || !strings.HasPrefix(during["tcp-segmentation-offload"], "off") ||
		!strings.HasPrefix(during["tx-checksumming"], "on") {
		t.Errorf("peer TSO %q -> %q, checksumming %q: want TSO on -> off, checksumming kept", before["tcp-segmentation-offload"],
			during["tcp-segmentation-offload"], during["tx-checksumming"])
	}

	w1 := b.mac(b.FwdNS, b.NIC)
	b.run(b.WireNS, "ip", "neigh", "add", b.LabAddr.Addr().String(), "lladdr", w1.String(), "dev", b.WireIf)
	err := b.Do(b.WireNS, func() error {
		c, err := net.Dial("udp", b.LabAddr.Addr().String()+":9")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("a datagram from the wire's stack"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := readFrames(t, n.Sockets()[0], 1, 3*time.Second, func(f []byte) bool { return len(f) > 23 && f[23] == 17 })
	if len(got) != 1 {
		t.Fatal("the datagram did not arrive")
	}
	h := got[0].hdr
	if h != (vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, CsumStart: 34, CsumOffset: 6}) {
		t.Errorf("vnet header %+v: want NEEDS_CSUM at 34+6 (the stack left the checksum partial)", h)
	}
	if vnethdr.CompleteChecksum(&h, got[0].data) != nil || !csumOK(got[0].data) {
		t.Error("completing the checksum the header names does not give a valid one")
	}
	n.Close()
	after := state()
	t.Logf("peer offloads after the program left %v", after)
	if after["tcp-segmentation-offload"] != before["tcp-segmentation-offload"] || after["tx-udp-segmentation"] != before["tx-udp-segmentation"] {
		t.Errorf("peer offloads %v after the program left, want them as before %v", after, before)
	}
}

// TestProgramLeavesWithProcess: the program is on a bpf_link, so it leaves
// the device when the process that attached it dies, by SIGTERM or by
// SIGKILL, without cleanup code running.
func TestProgramLeavesWithProcess(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			b := newBed(t, 1500)
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAttach$")
			cmd.Env = append(os.Environ(), "AFXDP_HELPER_NS="+b.FwdNS, "AFXDP_HELPER_IF="+b.NIC)
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "attached") {
				t.Fatalf("helper: %q, %v", line, err)
			}
			if link := b.run(b.FwdNS, "ip", "link", "show", b.NIC); !strings.Contains(link, "prog/xdp") {
				t.Fatalf("no XDP program on %s while the helper runs: %s", b.NIC, link)
			}
			cmd.Process.Signal(sig)
			cmd.Wait()
			deadline := time.Now().Add(5 * time.Second)
			for strings.Contains(b.run(b.FwdNS, "ip", "link", "show", b.NIC), "prog/xdp") {
				if time.Now().After(deadline) {
					t.Fatalf("the program is still on %s 5 s after %v", b.NIC, sig)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestHelperAttach is the child process of TestProgramLeavesWithProcess:
// it attaches to the device it is told of and waits to be killed.
func TestHelperAttach(t *testing.T) {
	ns, dev := os.Getenv("AFXDP_HELPER_NS"), os.Getenv("AFXDP_HELPER_IF")
	if ns == "" {
		t.Skip("the child process of TestProgramLeavesWithProcess")
	}
	err := netns.Do(ns, func() error {
		_, err := Open(Config{Ifname: dev})
		return err
	})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("attached")
	time.Sleep(time.Minute)
	os.Exit(1)
}

// TestVethTwoQueues: on a veth pair with two queues each way, each socket
// gets the frames of its queue: flows spread over both sockets by the
// peer's TX queue choice, and each flow stays on one.
func TestVethTwoQueues(t *testing.T) {
	b := newBed(t, 1500)
	b.run(b.FwdNS, "ip", "link", "add", "x1", "numtxqueues", "2", "numrxqueues", "2", "type", "veth",
		"peer", "name", "x0", "netns", b.WireNS, "numtxqueues", "2", "numrxqueues", "2")
	b.run(b.FwdNS, "ip", "link", "set", "x1", "up")
	b.run(b.WireNS, "ip", "addr", "add", "198.19.3.1/24", "dev", "x0")
	b.run(b.WireNS, "ip", "link", "set", "x0", "up")
	n := b.open(Config{Ifname: "x1", Queues: 2})
	b.run(b.WireNS, "ip", "neigh", "add", "198.19.3.2", "lladdr", b.mac(b.FwdNS, "x1").String(), "dev", "x0")
	const flows = 64
	err := b.Do(b.WireNS, func() error {
		for p := 0; p < flows; p++ {
			c, err := net.DialUDP("udp", &net.UDPAddr{Port: 20000 + p}, &net.UDPAddr{IP: net.IPv4(198, 19, 3, 2), Port: 9})
			if err != nil {
				return err
			}
			for i := 0; i < 3; i++ {
				c.Write([]byte("flow"))
			}
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	x0 := b.mac(b.WireNS, "x0")
	onQueue := map[int]int{} // source port -> socket
	total := 0
	for q, s := range n.Sockets() {
		for _, f := range readFrames(t, s, flows*3, time.Second, func(f []byte) bool { return from(x0)(f) && len(f) > 23 && f[23] == 17 }) {
			port := int(f.data[34])<<8 | int(f.data[35])
			if prev, ok := onQueue[port]; ok && prev != q {
				t.Errorf("flow from port %d on sockets %d and %d", port, prev, q)
			}
			onQueue[port] = q
			total++
		}
	}
	per := map[int]int{}
	for _, q := range onQueue {
		per[q]++
	}
	t.Logf("flows per queue: %v", per)
	if total != flows*3 || per[0] == 0 || per[1] == 0 {
		t.Errorf("%d of %d datagrams; flows per socket %v: want all, on both", total, flows*3, per)
	}
}

// TestLinkFlap: while the device is down Write says ENETDOWN; once it is up
// again frames flow both ways on the same socket.
func TestLinkFlap(t *testing.T) {
	b := newBed(t, 1500)
	n := b.open(Config{Ifname: b.NIC})
	s := n.Sockets()[0]
	w0, w1 := b.mac(b.WireNS, b.WireIf), b.mac(b.FwdNS, b.NIC)
	frame := withHdr(vnethdr.Hdr{}, l2Frames(t, w1, w0, 1500)[0])
	b.run(b.FwdNS, "ip", "link", "set", b.NIC, "down")
	var err error
	for i := 0; i < 3 && err == nil; i++ {
		_, err = s.Write([][]byte{frame}, 0)
	}
	if err != unix.ENETDOWN {
		t.Errorf("Write on a down device: %v, want ENETDOWN", err)
	}
	b.run(b.FwdNS, "ip", "link", "set", b.NIC, "up")
	raw := traffic.OpenRaw(t, b.Bed, b.WireNS, b.WireIf)
	writeAll(t, s, [][]byte{frame})
	if got := wireFrames(t, raw, w1, 1, 3*time.Second); len(got) != 1 {
		t.Error("no frame reached the wire after the device came back up")
	}
	wire := traffic.WireSocket(t, b.Bed, false)
	unix.Write(wire, l2Frames(t, w0, w1, 1500)[2])
	if got := readFrames(t, s, 1, 3*time.Second, from(w0)); len(got) != 1 {
		t.Error("no frame reached the socket after the device came back up")
	}
}

// TestRefusals: what the kernel or the device refuses comes back as one
// line with a typed error. A kernel without AF_XDP (EAFNOSUPPORT from
// socket) cannot be made here; its mapping is TestOpErrorTypes'.
func TestRefusals(t *testing.T) {
	b := newBed(t, 1500)
	for _, c := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"no such device", Config{Ifname: "nosuchdev0"}, ErrNoDevice},
		{"no such queue", Config{Ifname: b.NIC, Queues: 3}, ErrQueue},
		{"zero-copy on veth", Config{Ifname: b.NIC, Bind: BindZeroCopy}, ErrZeroCopy},
		{"native XDP on lo", Config{Ifname: "lo", Mode: ModeNative}, ErrMode},
	} {
		var err error
		b.Do(b.FwdNS, func() error {
			var n *NIC
			if n, err = Open(c.cfg); err == nil {
				n.Close()
			}
			return nil
		})
		if !errors.Is(err, c.want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "--") {
			t.Errorf("%s: %v; want one line with %v", c.name, err, c.want)
		}
		t.Logf("%s: %v", c.name, err)
	}
	if link := b.run(b.FwdNS, "ip", "link", "show", b.NIC); strings.Contains(link, "prog/xdp") {
		t.Errorf("a failed Open left the program attached: %s", link)
	}
}

func TestOpErrorTypes(t *testing.T) {
	err := opError("XDP socket", "socket", unix.EAFNOSUPPORT, map[unix.Errno]error{unix.EAFNOSUPPORT: ErrNotSupported})
	if !errors.Is(err, ErrNotSupported) || !errors.Is(err, unix.EAFNOSUPPORT) {
		t.Errorf("%v: want ErrNotSupported and the errno", err)
	}
	if err := opError("bind", "bind", unix.EPERM, nil); !errors.Is(err, ErrPermission) {
		t.Errorf("%v: want ErrPermission", err)
	}
}

// TestNAPIAndBusyPoll: the busy-poll options are taken, Read with inline
// busy polling moves frames, and the socket's NAPI id is the one the
// kernel gives its queue (netdev queue-get). On a veth under 6.18 that is
// 0: veth links no queue to its NAPI, and an XDP socket takes its id only
// from that link when it binds, so busy polling has no NAPI to poll there.
func TestNAPIAndBusyPoll(t *testing.T) {
	b := newBed(t, 1500)
	n := b.open(Config{Ifname: b.NIC, BusyPoll: &BusyPoll{Usecs: 50, Budget: 16, Prefer: true, Inline: true}})
	s := n.Sockets()[0]
	// SO_BUSY_POLL_BUDGET has no getsockopt; Open failed if it was refused.
	for opt, want := range map[int]int{unix.SO_BUSY_POLL: 50, unix.SO_PREFER_BUSY_POLL: 1} {
		if v, err := unix.GetsockoptInt(s.Fd(), unix.SOL_SOCKET, opt); err != nil || v != want {
			t.Errorf("socket option %d = %d (%v), want %d", opt, v, err, want)
		}
	}
	w0, w1 := b.mac(b.WireNS, b.WireIf), b.mac(b.FwdNS, b.NIC)
	wire := traffic.WireSocket(t, b.Bed, false)
	for _, f := range l2Frames(t, w0, w1, 1500) {
		unix.Write(wire, f)
	}
	if got := readFrames(t, s, 7, 3*time.Second, from(w0)); len(got) != 7 {
		t.Fatalf("busy-polling Read got %d of 7 frames", len(got))
	}
	if err := s.BusyPoll(); err != nil {
		t.Errorf("BusyPoll: %v", err)
	}
	id, err := s.NAPIID()
	if err != nil {
		t.Fatal(err)
	}
	var queueID uint32
	var instances []napi.NAPI
	ifindex := kernel.Link(t, b.FwdNS, b.NIC).Index
	err = b.Do(b.FwdNS, func() error {
		c, err := napi.Dial()
		if err != nil {
			return err
		}
		defer c.Close()
		if queueID, err = c.QueueNAPI(ifindex, 0, napi.QueueRX); err != nil && !errors.Is(err, napi.ErrNoNAPI) {
			return err
		}
		instances, err = c.List(ifindex)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("socket NAPI id %d, queue 0's NAPI id %d, the veth's NAPI instances %+v", id, queueID, instances)
	if id != queueID || len(instances) == 0 {
		t.Errorf("socket NAPI id %d, queue's %d, %d instances: want the queue's, and the veth to have NAPI with XDP", id, queueID, len(instances))
	}
}
