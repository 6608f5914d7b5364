package vhostuser_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit/vm"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// QEMU 7.2 (the distribution's qemu-system-x86) with the lab guest on a
// vhost-user port: QEMU negotiates, shares its memfd memory and starts the
// rings when the guest's virtio-net driver comes up; the guest pings an
// address the test answers from the port itself (ARP and ICMP echo), so
// frames cross the rings both ways. Then the port is closed and listened
// again at the same path, as a restarted tapfwd does: QEMU (reconnect=1)
// comes back, sends everything again and the guest's pings go on. QEMU
// killed with SIGKILL leaves no mapping and no fd in the port's process.
//
// vectors=0: under TCG (no KVM irqfds) QEMU 7.2 segfaults when a vhost-user
// net device with MSI-X starts, whatever the back-end offers:
// hw/net/vhost_net.c: vhost_net_start clears use_guest_notifier_mask for
// vhost-user, and hw/virtio/virtio-pci.c: virtio_pci_one_vector_unmask then
// takes kvm_virtio_pci_irqfd_use with no irqfd table (the crash is in
// virtio_pci_set_guest_notifiers -> msix_set_vector_notifiers, before QEMU
// sends SET_FEATURES). INTx avoids that path; under KVM MSI-X works.
func TestQEMU(t *testing.T) {
	img := vm.GuestImage(t)
	p := newPort(t, vhostuser.Config{})
	maps0, fds0 := mapsLines(t, "memfd:"), fdKinds(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "tcg", "-m", "256", "-nodefaults", "-no-user-config",
		"-display", "none", "-serial", "stdio", "-no-reboot",
		"-object", "memory-backend-memfd,id=mem,size=256M,share=on", "-machine", "memory-backend=mem",
		"-kernel", img.Kernel, "-initrd", img.Initrd,
		"-append", "console=ttyS0 panic=-1 quiet tfw.addr=198.18.99.2/24 tfw.gw=198.18.99.1 tfw.pingi=0.2",
		"-chardev", "socket,id=c0,reconnect=1,path="+p.Path(),
		"-netdev", "vhost-user,id=n0,chardev=c0", "-device", "virtio-net-pci,netdev=n0,mac=02:00:00:00:99:02,vectors=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	con := readConsole(out)
	defer func() {
		if t.Failed() {
			t.Logf("console:\n%s", con.text())
		}
	}()
	r1 := startResponder(p)
	feats := con.wait(t, "TFW: virtio-net features=")
	if l := con.wait(t, "TFW: ping "); !strings.HasSuffix(l, "ping 198.18.99.1 ok") {
		t.Fatalf("guest says %q", l)
	}
	con.wait(t, " seq=") // the guest pings for good now
	t.Logf("guest %s; port features %#x, stats %+v", feats[strings.Index(feats, "features"):], p.Features(), p.Stats())
	for _, bit := range []int{vhostuser.FeatureVersion1, vhostuser.FeatureNetMrgRxbuf, vhostuser.FeatureRingEventIdx,
		vhostuser.FeatureRingIndirectDesc, vhostuser.FeatureNetCsum, vhostuser.FeatureNetGuestCsum,
		vhostuser.FeatureNetHostTSO4, vhostuser.FeatureNetGuestTSO4} {
		if p.Features()&(1<<bit) == 0 {
			t.Errorf("feature bit %d not negotiated", bit)
		}
	}
	if mac, ok := p.MAC(); !ok || mac.String() != "02:00:00:00:99:02" {
		t.Errorf("learned MAC %v", mac)
	}
	if maps := mapsLines(t, "memfd:"); maps == maps0 {
		t.Error("the port did not map the guest's memory")
	}

	// A restart: the same path, a new port; QEMU reconnects by itself.
	r1.stop()
	p.Close()
	p2 := newPort(t, vhostuser.Config{Path: p.Path()})
	r2 := startResponder(p2)
	p2.wait(t, vhostuser.EventRunning)
	con.skip()
	con.wait(t, " seq=")
	n2 := r2.stop()
	t.Logf("after the restart: %d echo replies, stats %+v", n2, p2.Stats())
	if n2 == 0 {
		t.Fatal("no ping answered after the restart")
	}

	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	p2.wait(t, vhostuser.EventDisconnected)
	if maps, fds := mapsLines(t, "memfd:"), fdKinds(t); maps != maps0 || ported(fds) != ported(fds0) {
		t.Fatalf("after SIGKILL: %d memfd mappings (want %d), fds %+v (want %+v)", maps, maps0, fds, fds0)
	}
}

// console collects QEMU's serial console.
type console struct {
	mu    sync.Mutex
	all   strings.Builder
	lines chan string
}

func readConsole(r io.Reader) *console {
	c := &console{lines: make(chan string, 1000)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			c.mu.Lock()
			c.all.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			select {
			case c.lines <- sc.Text():
			default:
			}
		}
		close(c.lines)
	}()
	return c
}

func (c *console) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.all.String()
}

// wait returns the next line containing s, failing after a minute.
func (c *console) wait(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("QEMU's console closed before %q", s)
			}
			if strings.Contains(l, s) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q on the console", s)
		}
	}
}

// skip drops the lines read so far.
func (c *console) skip() {
	for {
		select {
		case <-c.lines:
		default:
			return
		}
	}
}

// responder answers ARP for 198.18.99.1 and pings to it on a port.
type responder struct {
	done    chan struct{}
	replies chan int
}

func startResponder(p *testPort) *responder {
	r := &responder{done: make(chan struct{}), replies: make(chan int, 1)}
	go func() { r.replies <- respond(p, r.done) }()
	return r
}

// stop ends the responder and returns how many echo replies it wrote.
func (r *responder) stop() int {
	close(r.done)
	return <-r.replies
}

func respond(p *testPort, stop chan struct{}) int {
	rb, sizes := bufs(64, 70000)
	var replies int
	mac := []byte{0x02, 0, 0, 0, 0x99, 0x01}
	gw := []byte{198, 18, 99, 1}
	for {
		select {
		case <-stop:
			return replies
		default:
		}
		n, err := p.Read(rb, sizes, 0)
		if err != nil {
			pollFd(p.Fd(), 50*time.Millisecond)
			continue
		}
		for i := range n {
			f := rb[i][vnethdr.Len:sizes[i]]
			if r := reply(f, mac, gw); r != nil {
				if k, _ := p.Write([][]byte{append(make([]byte, vnethdr.Len), r...)}, 0); k == 1 && f[13] == 0 {
					replies++
				}
			}
		}
	}
}

// reply builds the answer to an ARP request or ICMP echo request for gw.
func reply(f, mac, gw []byte) []byte {
	if len(f) < 42 {
		return nil
	}
	r := make([]byte, len(f))
	copy(r, f)
	copy(r[0:6], f[6:12])
	copy(r[6:12], mac)
	switch {
	case f[12] == 0x08 && f[13] == 0x06 && f[21] == 1 && string(f[38:42]) == string(gw): // ARP request
		r[21] = 2
		copy(r[22:28], mac)
		copy(r[28:32], gw)
		copy(r[32:38], f[22:28])
		copy(r[38:42], f[28:32])
		return r[:42]
	case f[12] == 0x08 && f[13] == 0x00 && f[23] == 1 && string(f[30:34]) == string(gw): // ICMP to gw
		ihl, total := int(f[14]&0xf)*4, int(binary.BigEndian.Uint16(f[16:]))
		if f[14+ihl] != 8 || 14+total > len(f) {
			return nil
		}
		copy(r[26:30], f[30:34])
		copy(r[30:34], f[26:30])
		icmp := r[14+ihl : 14+total]
		icmp[0] = 0
		binary.BigEndian.PutUint16(icmp[2:], 0)
		binary.BigEndian.PutUint16(icmp[2:], testbed.Checksum(icmp))
		return r[:14+total]
	}
	return nil
}
