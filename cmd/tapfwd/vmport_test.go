package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/testbed"
	"github.com/tapfwd/tapfwd/vmport"
)

func TestVMPortCLIUsage(t *testing.T) {
	checkCLI(t, []cliCase{
		{[]string{"vm-port"}, 2, "Commands:"},
		{[]string{"vm-port", "frob"}, 2, `unknown command "frob"`},
		{[]string{"vm-port", "add"}, 2, "--tap is required"},
		{[]string{"vm-port", "del"}, 2, "--name is required"},
		{[]string{"vm-port", "add", "--tap", "x", "--mac", "zz"}, 1, "--mac: tap: bad MAC"},
		{[]string{"vm-port", "add", "--tap", "x", "--name", "a:b"}, 1, "bad interface name"},
		{[]string{"vm-port", "list", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"vm-port", "help"}, 0, "Commands:"},
		{[]string{"vm-port", "add", "-h"}, 0, "the guest's Ethernet address"},
	})
}

// vmRun runs the tapfwd CLI in this process (root namespace) and returns its
// exit code and output.
func vmRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestVMPortCLIErrors checks the one-line errors a user gets, and that a
// failed add leaves no port behind.
func TestVMPortCLIErrors(t *testing.T) {
	bed, _ := startForwarder(t)
	_, out, _ := vmRun("vm-port", "add", "--tap", bed.LabIf, "--netns", bed.LabNS, "--name", "tfwvmx", "--json")
	var p vmPortJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("vm-port add --json: %v\n%s", err, out)
	}
	t.Cleanup(func() { vmRun("vm-port", "del", "--netns", bed.LabNS, "--name", p.Name) })
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--tap", "tfw-no-such-tap", "--netns", bed.LabNS}, `no TAP "tfw-no-such-tap"`},
		{[]string{"add", "--tap", bed.LabIf}, "pass that namespace with --netns"},
		{[]string{"add", "--tap", bed.LabIf, "--netns", "tfw-no-such-ns"}, `network namespace "tfw-no-such-ns" not found`},
		{[]string{"add", "--tap", bed.LabIf, "--netns", bed.LabNS, "--mac", p.MAC}, "is in use by tfwvmx"},
		{[]string{"add", "--tap", bed.LabIf, "--netns", bed.LabNS, "--name", "tfwvmx"}, `name "tfwvmx" is in use`},
		{[]string{"add", "--tap", bed.NIC, "--netns", bed.FwdNS}, "is a veth device, not a TAP"},
		{[]string{"del", "--name", bed.LabIf, "--netns", bed.LabNS}, "not a vm-port"},
		{[]string{"del", "--name", "tfwvm-none", "--netns", bed.LabNS}, `no vm-port "tfwvm-none"`},
	} {
		code, _, errs := vmRun(append([]string{"vm-port"}, tc.args...)...)
		s := strings.TrimSpace(errs)
		if code != 1 || !strings.Contains(s, tc.want) || strings.Contains(s, "\n") {
			t.Errorf("tapfwd vm-port %q: exit %d, want 1 and one line containing %q, got:\n%s", tc.args, code, tc.want, s)
		}
	}
	ports, err := vmport.List(bed.LabNS, bed.LabIf)
	if err != nil || len(ports) != 1 {
		t.Errorf("after failed adds: ports %+v, %v; want only tfwvmx", ports, err)
	}
}

// vmGuestImage builds (or takes from the cache) the guest kernel and
// initramfs with scripts/vmguest.sh. A missing QEMU or guest fails the
// test, naming the fix: CI must run it.
func vmGuestImage(t *testing.T) (kernel, initrd string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatalf("qemu-system-x86_64 not found: install it with scripts/deps.sh (apt-get install qemu-system-x86): %v", err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "vmguest.sh"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building the guest failed: %v\n%s\nscripts/deps.sh builds it ahead (needs apt-get update and a Debian mirror once; later runs use the cache)", err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	kernel, initrd = filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd.img")
	for _, f := range []string{kernel, initrd} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("guest build printed %q but: %v", dir, err)
		}
	}
	return kernel, initrd
}

// dataServer runs in the wire namespace: guests send it data on txPort
// (it keeps the SHA-256 and size per guest address) and fetch data from
// rxPort (it sends size random bytes and keeps their SHA-256).
type dataServer struct {
	txPort, rxPort int
	size           int64

	mu   sync.Mutex
	got  map[netip.Addr]transfer
	sent map[netip.Addr]transfer
	lns  []net.Listener
	wg   sync.WaitGroup
}

type transfer struct {
	bytes int64
	sum   string
	err   error
}

func startDataServer(t *testing.T, bed *testbed.Bed, size int64) *dataServer {
	s := &dataServer{size: size, got: map[netip.Addr]transfer{}, sent: map[netip.Addr]transfer{}}
	err := bed.Do(bed.WireNS, func() error {
		for i := 0; i < 2; i++ {
			ln, err := net.Listen("tcp4", net.JoinHostPort(bed.WireAddr.Addr().String(), "0"))
			if err != nil {
				return err
			}
			s.lns = append(s.lns, ln)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listening in %s: %v", bed.WireNS, err)
	}
	s.txPort = s.lns[0].Addr().(*net.TCPAddr).Port
	s.rxPort = s.lns[1].Addr().(*net.TCPAddr).Port
	s.serve(s.lns[0], s.receive)
	s.serve(s.lns[1], s.send)
	t.Cleanup(s.close)
	return s
}

func (s *dataServer) serve(ln net.Listener, handle func(net.Conn) transfer) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Minute))
				r := handle(c)
				from := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
				s.mu.Lock()
				if ln == s.lns[0] {
					s.got[from] = r
				} else {
					s.sent[from] = r
				}
				s.mu.Unlock()
			}()
		}
	}()
}

// receive reads until the guest shuts its side (busybox nc does at the end
// of its input) or more than size bytes arrived.
func (s *dataServer) receive(c net.Conn) transfer {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(c, s.size+1))
	return transfer{bytes: n, sum: hex.EncodeToString(h.Sum(nil)), err: err}
}

// send writes size pseudo-random bytes and closes: the guest reads to EOF.
func (s *dataServer) send(c net.Conn) transfer {
	h := sha256.New()
	r := mrand.NewChaCha8([32]byte{byte(time.Now().UnixNano())})
	n, err := io.CopyN(io.MultiWriter(c, h), r, s.size)
	return transfer{bytes: n, sum: hex.EncodeToString(h.Sum(nil)), err: err}
}

func (s *dataServer) close() {
	for _, ln := range s.lns {
		ln.Close()
	}
	s.wg.Wait()
}

func (s *dataServer) results(guest netip.Addr) (got, sent transfer, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok1 := s.got[guest]
	sent, ok2 := s.sent[guest]
	return got, sent, ok1 && ok2
}

// guest is a QEMU process whose serial console the test reads.
type guest struct {
	name    string
	addr    netip.Addr
	port    vmPortJSON
	cmd     *exec.Cmd
	mu      sync.Mutex
	console bytes.Buffer
	lines   map[string]string // "TFW: KEY rest" -> rest, by KEY (e.g. "ping 198.18.1.1", "tx", "done")
	done    chan struct{}     // closed at "TFW: done"
	exited  chan struct{}
}

var tfwLine = regexp.MustCompile(`TFW: (ping \S+|\S+) ?(.*)$`)

// bootGuest starts QEMU (TCG: nested KVM is not dependable on CI machines)
// with a virtio-net NIC on port, and tfw.* parameters for the guest's init
// (scripts/vmguest.sh). QEMU runs in the lab namespace (it needs no network
// of its own) so that removing the bed kills it too.
func bootGuest(t *testing.T, bed *testbed.Bed, name, kernel, initrd string, p vmPortJSON, addr netip.Prefix, params ...string) *guest {
	t.Helper()
	dev, err := os.OpenFile(p.Dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("opening %s's port device: %v", name, err)
	}
	defer dev.Close() // QEMU holds its own copy
	appendLine := "console=ttyS0 panic=-1 quiet tfw.addr=" + addr.String() + " " + strings.Join(params, " ")
	cmd := bed.Command(context.Background(), bed.LabNS, "qemu-system-x86_64", "-accel", "tcg", "-m", "256", "-nodefaults", "-no-user-config",
		"-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd, "-append", appendLine,
		"-netdev", "tap,id=n0,fd=3", "-device", "virtio-net-pci,netdev=n0,mac="+p.MAC)
	cmd.ExtraFiles = []*os.File{dev}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	g := &guest{name: name, addr: addr.Addr(), port: p, cmd: cmd, lines: map[string]string{},
		done: make(chan struct{}), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting QEMU for %s: %v", name, err)
	}
	go func() {
		defer close(g.exited)
		sc := bufio.NewScanner(stdout)
		closed := false
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			g.mu.Lock()
			g.console.WriteString(line + "\n")
			if m := tfwLine.FindStringSubmatch(line); m != nil {
				g.lines[m[1]] = m[2]
				if m[1] == "done" && !closed {
					close(g.done)
					closed = true
				}
			}
			g.mu.Unlock()
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-g.exited
		if t.Failed() {
			t.Logf("%s's serial console:\n%s", name, g.output())
		}
	})
	return g
}

func (g *guest) output() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.console.String()
}

func (g *guest) line(key string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.lines[key]
	return v, ok
}

func (g *guest) wait(ctx context.Context) error {
	select {
	case <-g.done:
		return nil
	case <-g.exited:
		return fmt.Errorf("%s: QEMU exited before the guest finished", g.name)
	case <-ctx.Done():
		return fmt.Errorf("%s: the guest did not finish in time", g.name)
	}
}

// capture counts IPv4 frames on a device that match, and how many were
// larger than an MTU-sized frame: GSO super-frames, which the kernel hands
// a packet socket whole.
type capture struct {
	fd                  int
	match               func(src, dst netip.Addr) bool
	stop                atomic.Bool
	done                chan struct{}
	frames, big, maxLen int
}

func startCapture(t *testing.T, bed *testbed.Bed, ns, dev string, match func(src, dst netip.Addr) bool) *capture {
	fd := openRaw(t, bed, ns, dev)
	// Large enough for a burst of GSO frames while this goroutine sleeps.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
	c := &capture{fd: fd, match: match, done: make(chan struct{})}
	go c.run()
	t.Cleanup(c.finish)
	return c
}

func (c *capture) run() {
	defer close(c.done)
	buf := make([]byte, 64) // headers only: MSG_TRUNC reports the full length
	for !c.stop.Load() {
		n, from, err := unix.Recvfrom(c.fd, buf, unix.MSG_TRUNC)
		if err != nil {
			continue // EAGAIN from SO_RCVTIMEO: check stop
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n < 34 || buf[12] != 0x08 || buf[13] != 0x00 {
			continue
		}
		src, _ := netip.AddrFromSlice(buf[26:30])
		dst, _ := netip.AddrFromSlice(buf[30:34])
		if !c.match(src, dst) {
			continue
		}
		c.frames++
		if n > 1514 {
			c.big++
		}
		c.maxLen = max(c.maxLen, n)
	}
}

// finish stops the capture; its counts are final afterwards.
func (c *capture) finish() {
	c.stop.Store(true)
	<-c.done
}

func (c *capture) String() string {
	return fmt.Sprintf("%d frames, %d over 1514 bytes, largest %d", c.frames, c.big, c.maxLen)
}

// TestVMGuests boots two QEMU guests on two vm-ports of tapfwd's TAP. Each
// pings the wire host and the other guest, sends
// 4 MiB to the wire host over TCP and fetches 4 MiB from it; both transfers
// must arrive complete (SHA-256 on both ends). Guest TSO is on: GSO
// super-frames from the guests must reach the wire intact, and the wire's
// must reach the ports.
func TestVMGuests(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	kernel, initrd := vmGuestImage(t)
	bed, fw := startForwarder(t)
	const mib = 4
	srv := startDataServer(t, bed, mib<<20)

	// Ports through the CLI, as a user would.
	var ports []vmPortJSON
	t.Cleanup(func() {
		for _, p := range ports {
			if code, _, errs := vmRun("vm-port", "del", "--netns", bed.LabNS, "--name", p.Name); code != 0 {
				t.Errorf("vm-port del %s: %s", p.Name, errs)
			}
		}
	})
	for i := 0; i < 2; i++ {
		code, out, errs := vmRun("vm-port", "add", "--tap", bed.LabIf, "--netns", bed.LabNS, "--json")
		if code != 0 {
			t.Fatalf("vm-port add: exit %d: %s", code, errs)
		}
		var p vmPortJSON
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("vm-port add --json: %v\n%s", err, out)
		}
		ports = append(ports, p)
		if !strings.Contains(p.QEMU, "mac="+p.MAC) || !strings.HasSuffix(p.QEMU, "3<>"+p.Dev) || !strings.Contains(p.Libvirt, "'"+p.Name+"'") {
			t.Errorf("vm-port add printed %+v", p)
		}
	}

	sub := bed.WireAddr.Addr().As4()
	ip := func(host byte) netip.Addr { return netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], host}) }
	gw := bed.WireAddr.Addr()
	guests := make([]*guest, 2)
	var caps []*capture
	for i := range guests {
		addr := netip.PrefixFrom(ip(byte(11+i)), 24)
		other := ip(byte(12 - i))
		caps = append(caps,
			startCapture(t, bed, bed.WireNS, bed.WireIf, func(src, _ netip.Addr) bool { return src == addr.Addr() }),
			startCapture(t, bed, bed.LabNS, ports[i].Name, func(_, dst netip.Addr) bool { return dst == addr.Addr() }))
		guests[i] = bootGuest(t, bed, fmt.Sprintf("guest%d", i+1), kernel, initrd, ports[i], addr,
			"tfw.gw="+gw.String(), "tfw.ping="+other.String(),
			fmt.Sprintf("tfw.tx=%d", srv.txPort), fmt.Sprintf("tfw.rx=%d", srv.rxPort), fmt.Sprintf("tfw.mib=%d", mib))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	for _, g := range guests {
		if err := g.wait(ctx); err != nil {
			t.Fatalf("%v; tapfwd said:\n%s", err, fw.Output())
		}
	}
	t.Logf("both guests done %.1f s after boot", time.Since(start).Seconds())

	for i, g := range guests {
		other := ip(byte(12 - i))
		for _, dst := range []netip.Addr{gw, other} {
			if v, _ := g.line("ping " + dst.String()); v != "ok" {
				t.Errorf("%s: ping %s: %q", g.name, dst, v)
			}
		}
		// virtio-net feature bits (include/uapi/linux/virtio_net.h): CSUM 0,
		// GUEST_CSUM 1, GUEST_TSO4 7, HOST_TSO4 11: checksum offload and TSO
		// both ways, through the macvtap's vnet header.
		feat, _ := g.line("virtio-net")
		feat = strings.TrimPrefix(feat, "features=")
		for _, bit := range []int{0, 1, 7, 11} {
			if len(feat) <= bit || feat[bit] != '1' {
				t.Errorf("%s: virtio-net feature bit %d not negotiated (features %q)", g.name, bit, feat)
			}
		}
		got, sent, ok := srv.results(g.addr)
		if !ok {
			t.Errorf("%s: the wire host saw no transfer both ways: %+v %+v", g.name, got, sent)
			continue
		}
		tx, _ := g.line("tx")
		rx, _ := g.line("rx")
		wantTx := fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, got.sum)
		if tx != wantTx || got.bytes != mib<<20 || got.err != nil {
			t.Errorf("%s -> wire: guest said %q; wire host got %d bytes (%v), sha256 %s", g.name, tx, got.bytes, got.err, got.sum)
		}
		wantRx := fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, sent.sum)
		if rx != wantRx || sent.err != nil {
			t.Errorf("wire -> %s: guest said %q; wire host sent %d bytes (%v), sha256 %s", g.name, rx, sent.bytes, sent.err, sent.sum)
		}
		t.Logf("%s: %s, %s: %d MiB each way, hashes match", g.name, g.port.Name, g.addr, mib)
	}

	// GSO metadata survives: the guest's TSO super-frames arrive on the
	// wire's veth whole (macvtap -> TAP -> tapfwd -> packet socket -> veth),
	// and the wire's reach the guest's port whole.
	for _, c := range caps {
		c.finish()
	}
	for i, g := range guests {
		fromGuest, toGuest := caps[2*i], caps[2*i+1]
		t.Logf("%s -> wire, seen on %s: %v", g.name, bed.WireIf, fromGuest)
		t.Logf("wire -> %s, seen on %s: %v", g.name, g.port.Name, toGuest)
		if fromGuest.big == 0 {
			t.Errorf("%s's TCP data reached the wire only in MTU-sized frames (%v): GSO was lost on the way", g.name, fromGuest)
		}
		if toGuest.big == 0 {
			t.Errorf("the wire's TCP data reached %s only in MTU-sized frames (%v): GSO was lost on the way", g.port.Name, toGuest)
		}
	}
	// tapfwd's own counters: GSO super-frames came from the guests' side
	// (read from the TAP) and from the wire (received on the NIC), and the
	// per-port metrics saw the guests' traffic.
	m := scrape(t, bed)
	gsoTAP := sample(m, "tapfwd_gso_frames_total", `device="`+bed.LabIf+`"`)
	gsoNIC := sample(m, "tapfwd_gso_frames_total", `device="`+bed.NIC+`"`)
	t.Logf("tapfwd_gso_frames_total: from the TAP %v, from the NIC %v", gsoTAP, gsoNIC)
	if gsoTAP == 0 || gsoNIC == 0 {
		t.Errorf("tapfwd counted no GSO super-frames in one direction: TAP %v, NIC %v", gsoTAP, gsoNIC)
	}
	for _, g := range guests {
		if v := sample(m, "tapfwd_vm_port_transmit_bytes_total", `port="`+g.port.Name+`"`); v < 4<<20 {
			t.Errorf("per-port metric: %s sent %v bytes, want >= 4 MiB", g.port.Name, v)
		}
	}

	// list shows both ports; del removes one and its device node.
	code, out, errs := vmRun("vm-port", "list", "--netns", bed.LabNS, "--tap", bed.LabIf, "--json")
	var listed []vmPortJSON
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 2 {
		t.Fatalf("vm-port list: exit %d, %s%s", code, out, errs)
	}
	for i := range listed {
		if listed[i].Name != ports[i].Name || listed[i].Dev != ports[i].Dev || listed[i].Ifindex != ports[i].Ifindex || !listed[i].Up {
			t.Errorf("vm-port list[%d] = %+v, added %+v", i, listed[i], ports[i])
		}
	}
	guests[1].cmd.Process.Kill()
	<-guests[1].exited
	if code, _, errs := vmRun("vm-port", "del", "--netns", bed.LabNS, "--name", ports[1].Name); code != 0 {
		t.Fatalf("vm-port del: %s", errs)
	}
	if _, err := os.Stat(ports[1].Dev); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after vm-port del: %v", ports[1].Dev, err)
	}
	ports = ports[:1]
	if got, _ := vmport.List(bed.LabNS, ""); len(got) != 1 {
		t.Errorf("after del: %+v", got)
	}
}
