package vm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// Image is the test guest: its kernel and initramfs.
type Image struct {
	Kernel, Initrd string
}

// GuestImage builds (or takes from the cache) the test guest with
// scripts/vmguest.sh. A missing QEMU skips t, outside CI, or fails it
// (testkit.NeedTools); a guest that cannot be built fails t, naming the fix.
func GuestImage(t testing.TB) Image {
	t.Helper()
	testkit.NeedTools(t, "qemu-system-x86_64")
	root := testkit.ModuleRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "vmguest.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building the guest failed: %v\n%s\nscripts/deps.sh builds it ahead (needs apt-get update and a Debian mirror once; later runs use the cache)", err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	img := Image{Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img")}
	for _, f := range []string{img.Kernel, img.Initrd} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("guest build printed %q but: %v", dir, err)
		}
	}
	return img
}

// Port is a VM port as tapfwd prints it (tapfwd vm-port add --json, the
// vm_ports of /status): a macvtap, whose device node Dev Boot opens, or a
// vhost-user port, whose Socket BootVhost connects to.
type Port struct {
	Name   string `json:"name"`
	MAC    string `json:"mac"`
	Dev    string `json:"dev"`
	Socket string `json:"socket"`
	// Ifindex and Up are the macvtap link's; QEMU is a command line for a
	// VM on the port, Libvirt and LibvirtDirect a domain's <interface>
	// on it or, for libvirt to make its own macvtap, on the TAP.
	Ifindex       int    `json:"ifindex"`
	Up            bool   `json:"up"`
	QEMU          string `json:"qemu"`
	Libvirt       string `json:"libvirt"`
	LibvirtDirect string `json:"libvirt_direct"`
	// MTU, when not 0, is offered to the guest as its NIC's MTU
	// (virtio-net host_mtu, VIRTIO_NET_F_MTU): the MTU of the segment the
	// port is on, when it is below 1500.
	MTU int `json:"-"`
	// Queues, above 1, gives a vhost-user guest that many queue pairs
	// (queues=N, mq=on) and as many vCPUs, so that its driver runs them
	// all (virtio_net runs one pair per online CPU).
	Queues int `json:"-"`
}

// Ports are the n VM ports tapfwd made on tap in namespace ns (tapfwd run
// --vm-ports), as tapport.List reads them; it fails t when there are not n.
func Ports(t testing.TB, ns, tap string, n int) []Port {
	t.Helper()
	ports, err := tapport.List(ns, tap)
	if err != nil || len(ports) != n {
		t.Fatalf("VM ports on %s: %+v, %v; want %d", tap, ports, err, n)
	}
	var out []Port
	for _, p := range ports {
		out = append(out, Port{Name: p.Name, Dev: p.Dev, MAC: p.MAC.String(), Ifindex: p.Index})
	}
	return out
}

// AddPort adds a VM port on tap in namespace ns as a user would, with
// exe vm-port add (exe the tapfwd binary) and flags, and deletes it, if
// still there, when t ends.
func AddPort(t testing.TB, exe, ns, tap string, flags ...string) Port {
	t.Helper()
	args := append([]string{"vm-port", "add", "--tap", tap, "--tap-netns", ns, "--json"}, flags...)
	code, out, errs := testkit.Run(t, exec.Command(exe, args...))
	if code != 0 {
		t.Fatalf("tapfwd %s: exit %d: %s", strings.Join(args, " "), code, errs)
	}
	var p Port
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("tapfwd vm-port add --json: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(exe, "vm-port", "del", "--tap-netns", ns, "--name", p.Name).Run() })
	return p
}

// Guest is a QEMU process whose serial console the test reads.
type Guest struct {
	Name string
	Addr netip.Addr
	Port Port

	cmd     *exec.Cmd
	mu      sync.Mutex
	console bytes.Buffer
	timed   []TimedLine
	lines   map[string]string // "TFW: KEY rest" -> rest, by KEY (e.g. "ping 198.18.1.1", "tx", "done")
	done    chan struct{}     // closed at "TFW: done"
	exited  chan struct{}
}

var tfwLine = regexp.MustCompile(`TFW: (ping \S+|\S+) ?(.*)$`)

// Boot starts QEMU (TCG: nested KVM is not dependable on CI machines)
// with a virtio-net NIC on port p, the guest at addr (none when addr is
// the zero Prefix: pass "tfw.dhcp=1" then, and read it from DHCPAddr),
// and params (tfw.*) for the guest's init (scripts/vmguest.sh). QEMU runs in the lab
// namespace (it needs no network of its own) so that removing the bed
// kills it too; it is killed when t ends, and its console logged if t
// failed.
func Boot(t testing.TB, bed *testbed.Bed, name string, img Image, p Port, addr netip.Prefix, params ...string) *Guest {
	t.Helper()
	dev, err := os.OpenFile(p.Dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("opening %s's port device: %v", name, err)
	}
	defer dev.Close() // QEMU holds its own copy
	net := []string{"-m", "256", "-netdev", "tap,id=n0,fd=3", "-device", virtioNet(p)}
	return bootQEMU(t, bed, name, img, p, addr, net, []*os.File{dev}, params)
}

// BootVhost is Boot for a vhost-user port: the guest's memory is
// a shared memfd (the port maps it), QEMU reconnects to the socket every
// second after losing it (reconnect=1), and the NIC has no MSI-X
// (vectors=0: under TCG QEMU 7.2 crashes when a vhost-user NIC with MSI-X
// starts; see vhostuser/qemu_test.go; with p.Queues pairs too: INTx serves
// every ring). QEMU waits for the port to answer before the guest boots.
func BootVhost(t testing.TB, bed *testbed.Bed, name string, img Image, p Port, addr netip.Prefix, params ...string) *Guest {
	t.Helper()
	net := []string{"-m", "256", "-object", "memory-backend-memfd,id=mem,size=256M,share=on", "-machine", "memory-backend=mem",
		"-chardev", "socket,id=c0,reconnect=1,path=" + strings.ReplaceAll(p.Socket, ",", ",,"),
		"-netdev", "vhost-user,id=n0,chardev=c0", "-device", "virtio-net-pci,netdev=n0,mac=" + p.MAC + ",vectors=0"}
	if p.Queues > 1 {
		q := strconv.Itoa(p.Queues)
		net[len(net)-3] += ",queues=" + q
		net[len(net)-1] += ",mq=on"
		net = append(net, "-smp", q)
	}
	return bootQEMU(t, bed, name, img, p, addr, net, nil, params)
}

// bootQEMU starts QEMU with the guest's kernel, its NIC (net: memory and
// network options, files as fds 3...) and its command line.
func bootQEMU(t testing.TB, bed *testbed.Bed, name string, img Image, p Port, addr netip.Prefix, net []string, files []*os.File, params []string) *Guest {
	t.Helper()
	appendLine := "console=ttyS0 panic=-1 quiet " + strings.Join(params, " ")
	if addr.IsValid() {
		appendLine += " tfw.addr=" + addr.String()
	}
	args := append([]string{"-accel", "tcg", "-nodefaults", "-no-user-config",
		"-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", img.Kernel, "-initrd", img.Initrd, "-append", appendLine}, net...)
	cmd := bed.Command(context.Background(), bed.LabNS, "qemu-system-x86_64", args...)
	cmd.ExtraFiles = files
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	g := &Guest{Name: name, Addr: addr.Addr(), Port: p, cmd: cmd, lines: map[string]string{},
		done: make(chan struct{}), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting QEMU for %s: %v", name, err)
	}
	go func() {
		defer close(g.exited)
		g.read(bufio.NewScanner(stdout))
		cmd.Wait()
	}()
	t.Cleanup(func() {
		g.Kill()
		if t.Failed() {
			t.Logf("%s's serial console:\n%s", name, g.Output())
		}
	})
	return g
}

// virtioNet is the -device option of the guest's NIC on port p.
func virtioNet(p Port) string {
	dev := "virtio-net-pci,netdev=n0,mac=" + p.MAC
	if p.MTU != 0 {
		dev += ",host_mtu=" + strconv.Itoa(p.MTU)
	}
	return dev
}

// read collects the console and its TFW lines until QEMU closes it.
func (g *Guest) read(sc *bufio.Scanner) {
	closed := false
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		g.mu.Lock()
		g.console.WriteString(line + "\n")
		g.timed = append(g.timed, TimedLine{At: time.Now(), Text: line})
		if m := tfwLine.FindStringSubmatch(line); m != nil {
			g.lines[m[1]] = m[2]
			if m[1] == "done" && !closed {
				close(g.done)
				closed = true
			}
		}
		g.mu.Unlock()
	}
}

// TimedLine is a console line and when the test read it.
type TimedLine struct {
	At   time.Time
	Text string
}

// Lines is the serial console so far, line by line with arrival times.
func (g *Guest) Lines() []TimedLine {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]TimedLine(nil), g.timed...)
}

// Output is the serial console so far.
func (g *Guest) Output() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.console.String()
}

// Line returns the rest of the last "TFW: key ..." console line.
func (g *Guest) Line(key string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.lines[key]
	return v, ok
}

var seqLine = regexp.MustCompile(`bytes from \S+: seq=(\d+) `)

// Reply is one of the guest's ping replies (busybox ping's "bytes from"
// console lines): its sequence number and when the test read it.
type Reply struct {
	Seq int
	At  time.Time
}

// Replies are the guest's ping replies so far.
func (g *Guest) Replies() []Reply {
	var out []Reply
	for _, l := range g.Lines() {
		if m := seqLine.FindStringSubmatch(l.Text); m != nil {
			n, _ := strconv.Atoi(m[1])
			out = append(out, Reply{n, l.At})
		}
	}
	return out
}

// WaitReplies waits up to 2 minutes until the guest has n ping replies;
// it fails t when it has fewer.
func (g *Guest) WaitReplies(t testing.TB, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); len(g.Replies()) < n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s got %d ping replies, want %d:\n%s", g.Name, len(g.Replies()), n, g.Output())
		}
	}
}

// CarrierChanges are the guest's reports of eth0's carrier after it came
// up ("TFW: eth0 carrier=0"): with its NIC kept, there are none.
func (g *Guest) CarrierChanges() []string {
	var out []string
	for _, l := range g.Lines() {
		if i := strings.Index(l.Text, "TFW: eth0 carrier="); i >= 0 && !strings.HasSuffix(l.Text, "carrier=1") {
			out = append(out, l.Text[i:])
		}
	}
	return out
}

// CheckPings checks the guest's "TFW: ping DST ok" line for every dst.
func (g *Guest) CheckPings(t testing.TB, dsts ...netip.Addr) {
	t.Helper()
	checkPings(t, g.Name, g.Line, dsts)
}

// CheckFeatures checks that the guest's virtio-net driver negotiated each
// of the feature bits (include/uapi/linux/virtio_net.h), from its "TFW:
// virtio-net features=..." line.
func (g *Guest) CheckFeatures(t testing.TB, bits ...int) {
	t.Helper()
	feat, _ := g.Line("virtio-net")
	feat = strings.TrimPrefix(feat, "features=")
	for _, bit := range bits {
		if len(feat) <= bit || feat[bit] != '1' {
			t.Errorf("%s: virtio-net feature bit %d not negotiated (features %q)", g.Name, bit, feat)
		}
	}
}

// checkPings checks the "TFW: ping DST ok" line, read with line, of the
// guest called name for every dst.
func checkPings(t testing.TB, name string, line func(string) (string, bool), dsts []netip.Addr) {
	t.Helper()
	for _, dst := range dsts {
		if v, _ := line("ping " + dst.String()); v != "ok" {
			t.Errorf("%s: ping %s: %q", name, dst, v)
		}
	}
}

// DHCPAddr is the address the guest reported it got by DHCP ("TFW: dhcp
// ADDR/BITS"); ok is false before that, or when it got none.
func (g *Guest) DHCPAddr() (netip.Prefix, bool) {
	v, ok := g.Line("dhcp")
	if !ok {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(v)
	return p, err == nil
}

// Wait waits until the guest says "TFW: done", QEMU exits or ctx ends.
func (g *Guest) Wait(ctx context.Context) error {
	select {
	case <-g.done:
		return nil
	case <-g.exited:
		return fmt.Errorf("%s: QEMU exited before the guest finished", g.Name)
	case <-ctx.Done():
		return fmt.Errorf("%s: the guest did not finish in time", g.Name)
	}
}

// Kill kills QEMU and waits until it is gone; it may be called again.
func (g *Guest) Kill() {
	g.cmd.Process.Kill()
	<-g.exited
}
