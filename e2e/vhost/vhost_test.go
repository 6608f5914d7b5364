package vhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/internal/testkit/vm"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// pingEvery is guest 1's ping interval while tapfwd restarts.
const pingEvery = 50 * time.Millisecond

// TestVhostUserGuests boots two QEMU guests (TCG, memfd shared memory) on
// the two vhost-user ports of a tapfwd run with --user, and on those same
// guests checks, in turn:
//
//   - guest 1 pings the wire host and guest 2, and moves 4 MiB of TCP each
//     way to the wire host with matching SHA-256; its TSO is on (the
//     negotiated features include host_tso4) and its GSO super-frames are
//     counted on the way out and reach the wire whole; guest 2 pings the
//     wire host, guest 1 and the lab host's address on the TAP;
//   - guest 2's QEMU killed with SIGKILL: tapfwd's memfd mappings and fds
//     go back to what they were before guest 2 connected;
//   - tapfwd stopped with SIGTERM and started again, then killed with
//     SIGKILL and started again, while guest 1 pings the wire host every
//     50 ms: the pings resume within seconds through QEMU's reconnect;
//   - the sockets are gone when tapfwd is.
func TestVhostUserGuests(t *testing.T) {
	testkit.NeedRoot(t)
	img := vm.GuestImage(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	dir := filepath.Join(t.TempDir(), "vhost") // tapfwd makes it
	args := []string{"--user", "nobody", "--vhost-user", dir, "--vm-ports", "2", "--tap-mac", "02:00:00:00:aa:03"}
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
	ports := vhostPorts(t, bed, 2)
	checkVhostPorts(t, bed, dir, ports)

	const mib = 4
	srv := traffic.StartDataServer(t, bed, mib<<20)
	sub := bed.WireAddr.Addr().As4()
	addr := func(host byte) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], host}), 24)
	}
	gw := bed.WireAddr.Addr().String()
	capture := traffic.StartCapture(t, bed, bed.WireNS, bed.WireIf, func(src, _ netip.Addr) bool { return src == addr(11).Addr() })
	start := time.Now()
	g1 := vm.BootVhost(t, bed, "guest1", img, ports[0].Port, addr(11),
		"tfw.gw="+gw, "tfw.ping="+addr(12).Addr().String(), fmt.Sprintf("tfw.tx=%d", srv.TxPort),
		fmt.Sprintf("tfw.rx=%d", srv.RxPort), fmt.Sprintf("tfw.mib=%d", mib), fmt.Sprintf("tfw.pingi=%g", pingEvery.Seconds()))
	waitPortState(t, bed, 0, "running")
	maps0, fds0 := settledFds(t, fw)
	t.Logf("guest1 running after %.1f s; tapfwd before guest2: %d memfd mappings, fds %+v", time.Since(start).Seconds(), maps0, fds0)
	g2 := vm.BootVhost(t, bed, "guest2", img, ports[1].Port, addr(12),
		"tfw.gw="+gw, "tfw.ping="+addr(11).Addr().String()+","+bed.LabAddr.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, g := range []*vm.Guest{g1, g2} {
		if err := g.Wait(ctx); err != nil {
			t.Fatalf("%v; tapfwd said:\n%s", err, fw.Output())
		}
	}
	t.Logf("both guests done %.1f s after the first boot", time.Since(start).Seconds())
	if maps, fds := settledFds(t, fw); maps != maps0+1 || fds.Eventfds <= fds0.Eventfds || fds.Sockets != fds0.Sockets+1 {
		t.Errorf("with guest2 running tapfwd has %d memfd mappings and fds %+v: want one mapping, its eventfds and its connection more than %d, %+v",
			maps, fds, maps0, fds0)
	} else {
		t.Logf("with guest2 running: %d memfd mappings, fds %+v", maps, fds)
	}
	if !strings.Contains(fw.Output(), `msg="dropped privileges" user=nobody`) {
		t.Errorf("tapfwd did not drop privileges:\n%s", fw.Output())
	}
	checkGuestTraffic(t, g1, g2, srv, bed.WireAddr.Addr(), bed.LabAddr.Addr())
	capture.Finish()
	t.Logf("guest1 -> wire, seen on %s: %v", bed.WireIf, capture)
	if capture.Big == 0 {
		t.Errorf("guest1's TCP data reached the wire only in MTU-sized frames (%v): GSO was lost on the way", capture)
	}
	checkVhostMetrics(t, bed, ports, mib)
	t.Logf("tapfwd status:\n%s", testkit.BedRun(t, bed, bed.FwdNS, testkit.Tapfwd(t), "status"))

	// SIGKILL guest2's QEMU: what it gave tapfwd goes.
	g2.Kill()
	waitPortState(t, bed, 1, "listening")
	maps, fds := waitFds(t, fw, maps0, fds0)
	t.Logf("after SIGKILL of guest2's QEMU: %d memfd mappings, fds %+v (before it connected: %d, %+v)", maps, fds, maps0, fds0)

	// Restarts while guest1 pings the wire host.
	g1.WaitReplies(t, 20)
	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		down := time.Now()
		if how == "SIGTERM" {
			if err := fw.Stop(); err != nil {
				t.Fatalf("SIGTERM: %v\n%s", err, fw.Output())
			}
		} else {
			fw.Kill()
		}
		socketsGone(t, how, dir)
		fw = testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
		vhostGap(t, g1, how, down, testkit.ReadyAt(t, fw))
		if p := vhostPorts(t, bed, 2); p[0].MAC != ports[0].MAC || p[0].Socket != ports[0].Socket {
			t.Errorf("after %s port 0 is %s at %s, was %s at %s", how, p[0].MAC, p[0].Socket, ports[0].MAC, ports[0].Socket)
		}
	}
	t.Logf("guest1's eth0 carrier changes: %v", g1.CarrierChanges())
	if err := fw.Stop(); err != nil {
		t.Errorf("the last stop: %v", err)
	}
	socketsGone(t, "the last SIGTERM", dir)
}

// portStatus is a VM port in /status: what vm.Port has and a vhost-user
// port's state, negotiated features, memory line and counters.
type portStatus struct {
	vm.Port
	Type          string         `json:"type"`
	State         string         `json:"state"`
	Features      []string       `json:"features"`
	QueuePairs    int            `json:"queue_pairs"`
	ActivePairs   int            `json:"active_pairs"`
	LibvirtMemory string         `json:"libvirt_memory"`
	FromGuest     map[string]any `json:"from_guest"`
	ToGuest       map[string]any `json:"to_guest"`
}

// vhostPorts reads the vhost-user ports from /status; there must be n.
func vhostPorts(t testing.TB, bed *testbed.Bed, n int) []portStatus {
	t.Helper()
	code, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/status")
	if err != nil || code != 200 {
		t.Fatalf("GET /status: %d %v", code, err)
	}
	var st struct {
		VMPorts []portStatus `json:"vm_ports"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	var out []portStatus
	for _, p := range st.VMPorts {
		if p.Type == "vhost-user" {
			out = append(out, p)
		}
	}
	if len(out) != n {
		t.Fatalf("status lists %d vhost-user ports, want %d:\n%s", len(out), n, body)
	}
	return out
}

// checkVhostPorts: the sockets are where the flags say, root's with mode
// 0600, and the lines to attach name them and the guests' MACs; tapfwd
// status prints them.
func checkVhostPorts(t *testing.T, bed *testbed.Bed, dir string, ports []portStatus) {
	t.Helper()
	for i, p := range ports {
		want := filepath.Join(dir, fmt.Sprintf("%s:%s-%d.sock", bed.LabNS, bed.LabIf, i))
		fi, err := os.Lstat(want)
		if p.Socket != want || err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("port %d: socket %s (want %s): %v %v", i, p.Socket, want, fi, err)
		}
		if p.State != "listening" || !strings.Contains(p.QEMU, "path="+want+",reconnect=1") || !strings.Contains(p.QEMU, "mac="+p.MAC) ||
			!strings.Contains(p.QEMU, "memory-backend-memfd") || !strings.Contains(p.Libvirt, "path='"+want+"'") ||
			!strings.Contains(p.LibvirtMemory, "<source type='memfd'/>") {
			t.Errorf("port %d: %+v", i, p)
		}
	}
	out := testkit.BedRun(t, bed, bed.FwdNS, testkit.Tapfwd(t), "status")
	for _, want := range []string{"vhost-user " + ports[1].Socket + "  listening", "QEMU:    qemu-system-x86_64", "<interface type='vhostuser'>"} {
		if !strings.Contains(out, want) {
			t.Errorf("tapfwd status lacks %q:\n%s", want, out)
		}
	}
}

// waitPortState waits until /status shows port i in state.
func waitPortState(t *testing.T, bed *testbed.Bed, i int, state string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		p := vhostPorts(t, bed, 2)[i]
		if p.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %d is %s, want %s", i, p.State, state)
		}
	}
}

// tapfwdFds counts tapfwd's memfd mappings and fds by kind.
func tapfwdFds(t *testing.T, fw *testbed.Process) (int, vhostusertest.Fds) {
	t.Helper()
	maps, err := vhostusertest.MapsLines(fw.Pid(), "memfd:")
	if err != nil {
		t.Fatal(err)
	}
	fds, err := vhostusertest.CountFds(fw.Pid())
	if err != nil {
		t.Fatal(err)
	}
	return maps, fds
}

// settledFds is tapfwdFds once two readings 200 ms apart agree (the
// metrics server closes the test's connections a moment after answering).
func settledFds(t *testing.T, fw *testbed.Process) (int, vhostusertest.Fds) {
	t.Helper()
	maps, fds := tapfwdFds(t, fw)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		m, f := tapfwdFds(t, fw)
		if m == maps && f == fds {
			break
		}
		maps, fds = m, f
	}
	return maps, fds
}

// waitFds waits up to 5 s for tapfwd's mappings and fds to be maps0 and
// fds0 again (the metrics server closes the test's connections a moment
// after answering).
func waitFds(t *testing.T, fw *testbed.Process, maps0 int, fds0 vhostusertest.Fds) (int, vhostusertest.Fds) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		maps, fds := tapfwdFds(t, fw)
		if maps == maps0 && fds == fds0 {
			return maps, fds
		}
		if time.Now().After(deadline) {
			t.Fatalf("tapfwd has %d memfd mappings and fds %+v, want %d and %+v as before the guest connected", maps, fds, maps0, fds0)
		}
	}
}

// checkGuestTraffic: the pings, guest 1's transfers and its negotiated
// offloads.
func checkGuestTraffic(t *testing.T, g1, g2 *vm.Guest, srv *traffic.DataServer, gw, labAddr netip.Addr) {
	t.Helper()
	g1.CheckPings(t, gw, g2.Addr)
	g2.CheckPings(t, gw, g1.Addr, labAddr)
	// virtio-net feature bits: CSUM 0, GUEST_CSUM 1, GUEST_TSO4 7,
	// HOST_TSO4 11, as the guest's driver sees them.
	g1.CheckFeatures(t, 0, 1, 7, 11)
	srv.Check(t, g1.Name, g1.Addr, g1.Line)
}

// checkVhostMetrics: the negotiated features in /status, and the ports'
// counters, GSO frames from guest1 and states in /metrics.
func checkVhostMetrics(t *testing.T, bed *testbed.Bed, ports []portStatus, mib int) {
	t.Helper()
	st := vhostPorts(t, bed, 2)
	for _, f := range []string{"host_tso4", "guest_tso4", "csum", "guest_csum", "mrg_rxbuf", "version_1"} {
		if !slices.Contains(st[0].Features, f) {
			t.Errorf("port 0 negotiated %v, without %s", st[0].Features, f)
		}
	}
	t.Logf("port 0: features %s; from the guest %+v; to it %+v", strings.Join(st[0].Features, ","), st[0].FromGuest, st[0].ToGuest)
	m := prom.Scrape(t, bed)
	p0, p1 := `port="`+ports[0].Name+`"`, `port="`+ports[1].Name+`"`
	gso := prom.Sample(m, "tapfwd_vm_port_gso_frames_total", p0)
	txBytes := prom.Sample(m, "tapfwd_vm_port_bytes_total", p0, `direction="tx"`)
	rxBytes := prom.Sample(m, "tapfwd_vm_port_bytes_total", p0, `direction="rx"`)
	t.Logf("port 0 metrics: %v GSO frames from the guest, %v bytes from it, %v to it", gso, txBytes, rxBytes)
	if gso == 0 || txBytes < float64(mib<<20) || rxBytes < float64(mib<<20) {
		t.Errorf("port 0: %v GSO frames, %v bytes from the guest, %v to it; want GSO frames and %d MiB each way", gso, txBytes, rxBytes, mib)
	}
	for _, p := range []string{p0, p1} {
		if v := prom.Sample(m, "tapfwd_vm_port_state", p, `state="running"`); v != 1 {
			t.Errorf("tapfwd_vm_port_state{%s,state=running} = %v", p, v)
		}
		if v := prom.Sample(m, "tapfwd_vm_port_packets_total", p, `direction="tx"`); v == 0 {
			t.Errorf("tapfwd_vm_port_packets_total{%s,direction=tx} = 0", p)
		}
	}
}

// socketsGone waits up to 2 s for the sockets in dir to go (with --user
// the janitor removes them once tapfwd is gone).
func socketsGone(t *testing.T, what, dir string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left, _ := filepath.Glob(filepath.Join(dir, "*"))
		hidden, _ := filepath.Glob(filepath.Join(dir, ".*"))
		if left = append(left, hidden...); len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: left in %s: %v", what, dir, left)
		}
	}
}

// vhostGap measures a restart as the guest saw it: from the last reply
// before tapfwd went down to the first after the new one was ready, which
// must come within 5 s of ready (QEMU reconnects every second).
func vhostGap(t *testing.T, g *vm.Guest, what string, down, ready time.Time) {
	t.Helper()
	var before, after *vm.Reply
	for deadline := ready.Add(10 * time.Second); after == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		before = nil
		for _, r := range g.Replies() {
			if r.At.Before(down) {
				before = &r
			} else if r.At.After(ready) {
				after = &r
				break
			}
		}
	}
	if before == nil || after == nil {
		t.Fatalf("%s: no replies around the restart (before %v, after %v):\n%s", what, before, after, g.Output())
	}
	t.Logf("%s: no tapfwd for %v; pings resumed %v after the new one was ready: outage %v (last reply seq %d, next %d)",
		what, ready.Sub(down).Round(time.Millisecond), after.At.Sub(ready).Round(time.Millisecond),
		after.At.Sub(before.At).Round(time.Millisecond), before.Seq, after.Seq)
	if d := after.At.Sub(ready); d > 5*time.Second {
		t.Errorf("%s: pings resumed %v after tapfwd was ready, want within 5 s", what, d)
	}
}

// TestVhostUserPorts drives a port with the fake front-end (no QEMU): the
// socket is --vm-port-owner's with mode 0660; what the guest sends reaches
// the wire through the port's own packet socket and what the wire sends to
// the guest's MAC reaches the guest. With --persist the socket stays when
// tapfwd stops and the next run takes it over.
func TestVhostUserPorts(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	t.Cleanup(func() { testkit.CLI(t, "down", "--tap", bed.LabIf, "--tap-netns", bed.LabNS) })
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := []string{"--vhost-user", dir, "--vm-ports", "1", "--vm-port-owner", "nobody", "--persist", "--metrics-addr", ""}
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
	path, mac := loggedVhostPort(t, fw)
	if want := filepath.Join(dir, bed.LabNS+":"+bed.LabIf+"-0.sock"); path != want {
		t.Errorf("the port's socket is %s, want %s", path, want)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil || st.Mode&0o7777 != 0o660 || strconv.Itoa(int(st.Uid)) != nobody.Uid || strconv.Itoa(int(st.Gid)) != nobody.Gid {
		t.Fatalf("socket %s: mode %#o uid %d gid %d (%v); want 0660 and nobody's (uid %s gid %s)", path, st.Mode&0o7777, st.Uid, st.Gid, err, nobody.Uid, nobody.Gid)
	}
	for run := 1; run <= 2; run++ {
		if p, m := loggedVhostPort(t, fw); p != path || m.String() != mac.String() {
			t.Errorf("run %d: the port is %s at %s, was %s at %s", run, m, p, mac, path)
		}
		exchange(t, bed, path, mac)
		if err := fw.Stop(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("run %d: --persist: the socket went with tapfwd: %v", run, err)
		}
		if run == 1 {
			fw = testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
		}
	}
	// down --vhost-user removes what --persist kept.
	if code, out, errs := testkit.CLI(t, "down", "--tap", bed.LabIf, "--tap-netns", bed.LabNS, "--vhost-user", dir); code != 0 || !strings.Contains(out, "with 1 vhost-user socket in") {
		t.Fatalf("down: %d %s %s", code, out, errs)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after down --vhost-user: %s: %v, want it gone", path, err)
	}
}

var vhostPortLine = regexp.MustCompile(`msg=vm-port name=\S+ type=vhost-user socket=(\S+) mac=(\S+)`)

// loggedVhostPort is the socket and the guest's MAC of the one vhost-user
// port fw logged.
func loggedVhostPort(t *testing.T, fw *testbed.Process) (string, net.HardwareAddr) {
	t.Helper()
	m := vhostPortLine.FindAllStringSubmatch(fw.Output(), -1)
	if len(m) != 1 {
		t.Fatalf("tapfwd logged %d vhost-user ports, want 1:\n%s", len(m), fw.Output())
	}
	mac, err := net.ParseMAC(m[0][2])
	if err != nil {
		t.Fatalf("the port's MAC: %v", err)
	}
	return m[0][1], mac
}

// exchange connects the fake front-end to the port at path as the guest
// with mac: a frame it sends arrives on the wire, one the wire sends to mac
// arrives at it.
func exchange(t *testing.T, bed *testbed.Bed, path string, mac []byte) {
	t.Helper()
	d, err := vhostusertest.Dial(path, vhostusertest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.FillRx()
	wire := traffic.OpenRaw(t, bed, bed.WireNS, bed.WireIf)
	out := append(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, mac...), 0x88, 0xb5)
	out = append(out, []byte(strings.Repeat("from the guest ", 4))...)
	buf := make([]byte, 2048)
	seen := false
	for deadline := time.Now().Add(5 * time.Second); !seen && time.Now().Before(deadline); {
		if err := d.Send(make([]byte, 10), out, vhostusertest.Flat); err != nil {
			t.Fatal(err)
		}
		for !seen {
			n, _, err := syscall.Recvfrom(wire, buf, 0)
			if err != nil {
				break
			}
			seen = string(buf[:n]) == string(out)
		}
	}
	if !seen {
		t.Fatal("the guest's frame did not reach the wire")
	}
	send := traffic.WireSocket(t, bed, false)
	in := append(append(append([]byte(nil), mac...), 0x02, 0, 0, 0, 0xee, 1, 0x88, 0xb5), []byte(strings.Repeat("to the guest ", 4))...)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		syscall.Write(send, in)
		for {
			_, n, ok, err := d.Recv(buf)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if string(buf[:n]) == string(in) {
				return
			}
		}
		d.FillRx()
	}
	t.Fatal("the wire's frame to the guest's MAC did not reach the guest")
}

// TestVhostUserErrors: a directory or socket path that cannot work (or
// that others could swap sockets in: issue 22, item 7) fails the start
// with one line saying what to change, before the TAP is made.
func TestVhostUserErrors(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	base := t.TempDir()
	long := filepath.Join(base, strings.Repeat("d", 100))
	os.Mkdir(long, 0o755)
	taken := filepath.Join(base, "taken")
	os.Mkdir(taken, 0o755)
	os.WriteFile(filepath.Join(taken, bed.LabIf+"-0.sock"), nil, 0o644)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o644)
	ro := filepath.Join(base, "ro")
	os.Mkdir(ro, 0o755)
	shared := filepath.Join(base, "shared")
	os.Mkdir(shared, 0o755)
	os.Chmod(shared, 0o1777)
	link := filepath.Join(base, "link")
	os.Symlink(ro, link)
	start := func(prefix []string, dir string) *exec.Cmd {
		args := append(append([]string{"netns", "exec", bed.FwdNS}, prefix...), testkit.Tapfwd(t), "run", "--nic", bed.NIC, "--tap", bed.LabIf,
			"--vhost-user", dir, "--vm-ports", "1", "--metrics-addr", "")
		return exec.Command("ip", args...)
	}
	// A read-only mount, in a mount namespace of its own.
	roMount := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", `mount -t tmpfs -o ro,mode=0755 tmpfs "$0" && exec "$@"`, ro}
	for _, tc := range []struct {
		what, dir string
		prefix    []string
		want      string
	}{
		{"a path too long", long, nil, "socket path too long"},
		{"a file in the way", taken, nil, "exists and is a regular file (remove it, or choose another directory)"},
		{"a file for the directory", file, nil, "--vhost-user: " + file + " is not a directory"},
		{"a read-only directory", ro, roMount, "read-only file system (the directory must be writable to tapfwd as it starts"},
		{"a directory others may write to", shared, nil, shared + " has mode 0777: group or others may write to it: unsafe directory (the directory must be root's"},
		{"a link to the directory", link, nil, link + " is not a directory (a link or a file is there): unsafe directory"},
	} {
		clitest.OneLineError(t, tc.what, start(tc.prefix, tc.dir), tc.want)
		if testing.Verbose() {
			out, _ := start(tc.prefix, tc.dir).CombinedOutput()
			t.Logf("%s: %s", tc.what, out)
		}
	}
	if _, err := bed.Run(context.Background(), bed.FwdNS, "ip", "link", "show", bed.LabIf); err == nil {
		t.Error("a failed start left the TAP")
	}
}

// TestVhostUserLibvirt: a real libvirtd (Debian's) boots the test guest
// under TCG from the <interface type='vhostuser'> and <memoryBacking>
// elements tapfwd prints for a port; the guest pings the wire host and
// moves 2 MiB each way with matching checksums.
func TestVhostUserLibvirt(t *testing.T) {
	testkit.NeedRoot(t)
	img := vm.GuestImage(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	testkit.StartOn(t, bed, testkit.Tapfwd(t), "--vhost-user", filepath.Join(dir, "vhost"), "--vm-ports", "1")
	p := vhostPorts(t, bed, 1)[0]
	lv := vm.StartLibvirtd(t, bed.LabNS)
	const mib = 2
	srv := traffic.StartDataServer(t, bed, mib<<20)
	sub := bed.WireAddr.Addr().As4()
	addr := netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], 31})
	name := "tfw-" + bed.ID + "-vhu"
	con := vm.Console{Path: filepath.Join(dir, name+".console")}
	cmdline := fmt.Sprintf("console=ttyS0 panic=-1 quiet tfw.addr=%s/24 tfw.gw=%s tfw.tx=%d tfw.rx=%d tfw.mib=%d",
		addr, bed.WireAddr.Addr(), srv.TxPort, srv.RxPort, mib)
	xml := filepath.Join(dir, name+".xml")
	os.WriteFile(xml, []byte(vm.VhostDomainXML(name, img, cmdline, p.Libvirt, p.LibvirtMemory, con.Path)), 0o644)
	start := time.Now()
	if _, err := lv.Virsh("create", xml); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := con.Wait(ctx); err != nil {
		t.Fatalf("%v; console:\n%s", err, con.Output())
	}
	con.CheckPings(t, name, bed.WireAddr.Addr())
	srv.Check(t, name, addr, con.Line)
	t.Logf("libvirt guest on %s: ping ok, %d MiB each way, hashes match, %.1f s after virsh create", p.Socket, mib, time.Since(start).Seconds())
}
