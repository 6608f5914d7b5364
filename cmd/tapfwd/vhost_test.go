package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

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
	kernel, initrd := testkit.VMGuestImage(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	dir := filepath.Join(t.TempDir(), "vhost") // tapfwd makes it
	args := []string{"--user", "nobody", "--vhost-user", dir, "--vm-ports", "2", "--tap-mac", "02:00:00:00:aa:03"}
	fw := testkit.StartTapfwdOn(t, bed, exe(t), args...)
	ports := vhostPorts(t, bed, 2)
	checkVhostPorts(t, bed, dir, ports)

	const mib = 4
	srv := testkit.StartDataServer(t, bed, mib<<20)
	sub := bed.WireAddr.Addr().As4()
	addr := func(host byte) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], host}), 24)
	}
	gw := bed.WireAddr.Addr().String()
	capture := testkit.StartCapture(t, bed, bed.WireNS, bed.WireIf, func(src, _ netip.Addr) bool { return src == addr(11).Addr() })
	start := time.Now()
	g1 := testkit.BootVhostGuest(t, bed, "guest1", kernel, initrd, guestVhostPort(ports[0]), addr(11),
		"tfw.gw="+gw, "tfw.ping="+addr(12).Addr().String(), fmt.Sprintf("tfw.tx=%d", srv.TxPort),
		fmt.Sprintf("tfw.rx=%d", srv.RxPort), fmt.Sprintf("tfw.mib=%d", mib), fmt.Sprintf("tfw.pingi=%g", pingEvery.Seconds()))
	waitPortState(t, bed, 0, "running")
	maps0, fds0 := settledFds(t, fw)
	t.Logf("guest1 running after %.1f s; tapfwd before guest2: %d memfd mappings, fds %+v", time.Since(start).Seconds(), maps0, fds0)
	g2 := testkit.BootVhostGuest(t, bed, "guest2", kernel, initrd, guestVhostPort(ports[1]), addr(12),
		"tfw.gw="+gw, "tfw.ping="+addr(11).Addr().String()+","+bed.LabAddr.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, g := range []*testkit.Guest{g1, g2} {
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
	checkGuestTraffic(t, g1, g2, srv, gw, bed.LabAddr.Addr().String(), mib)
	capture.Finish()
	t.Logf("guest1 -> wire, seen on %s: %v", bed.WireIf, capture)
	if capture.Big == 0 {
		t.Errorf("guest1's TCP data reached the wire only in MTU-sized frames (%v): GSO was lost on the way", capture)
	}
	checkVhostMetrics(t, bed, ports, mib)
	t.Logf("tapfwd status:\n%s", testkit.BedRun(t, bed, bed.FwdNS, exe(t), "status"))

	// SIGKILL guest2's QEMU: what it gave tapfwd goes.
	g2.Kill()
	waitPortState(t, bed, 1, "listening")
	maps, fds := waitFds(t, fw, maps0, fds0)
	t.Logf("after SIGKILL of guest2's QEMU: %d memfd mappings, fds %+v (before it connected: %d, %+v)", maps, fds, maps0, fds0)

	// Restarts while guest1 pings the wire host.
	waitReplies(t, g1, 20)
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
		fw = testkit.StartTapfwdOn(t, bed, exe(t), args...)
		vhostGap(t, g1, how, down, waitReady(t, fw))
		if p := vhostPorts(t, bed, 2); p[0].MAC != ports[0].MAC || p[0].Socket != ports[0].Socket {
			t.Errorf("after %s port 0 is %s at %s, was %s at %s", how, p[0].MAC, p[0].Socket, ports[0].MAC, ports[0].Socket)
		}
	}
	t.Logf("guest1's eth0 carrier changes: %v", carrierChanges(g1))
	if err := fw.Stop(); err != nil {
		t.Errorf("the last stop: %v", err)
	}
	socketsGone(t, "the last SIGTERM", dir)
}

// vhostPorts reads the vhost-user ports from /status; there must be n.
func vhostPorts(t *testing.T, bed *testbed.Bed, n int) []daemon.PortStatus {
	t.Helper()
	code, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/status")
	if err != nil || code != 200 {
		t.Fatalf("GET /status: %d %v", code, err)
	}
	var st daemon.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	var out []daemon.PortStatus
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

func guestVhostPort(p daemon.PortStatus) testkit.VhostPort {
	return testkit.VhostPort{Name: p.Name, Socket: p.Socket, MAC: p.MAC}
}

// checkVhostPorts: the sockets are where the flags say, root's with mode
// 0600, and the lines to attach name them and the guests' MACs; tapfwd
// status prints them.
func checkVhostPorts(t *testing.T, bed *testbed.Bed, dir string, ports []daemon.PortStatus) {
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
	out := testkit.BedRun(t, bed, bed.FwdNS, exe(t), "status")
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

// checkGuestTraffic: the pings, the transfers and the negotiated offloads.
func checkGuestTraffic(t *testing.T, g1, g2 *testkit.Guest, srv *testkit.DataServer, gw, labAddr string, mib int) {
	t.Helper()
	for _, c := range []struct {
		g     *testkit.Guest
		peers []string
	}{{g1, []string{gw, g2.Addr.String()}}, {g2, []string{gw, g1.Addr.String(), labAddr}}} {
		for _, dst := range c.peers {
			if v, _ := c.g.Line("ping " + dst); v != "ok" {
				t.Errorf("%s: ping %s: %q", c.g.Name, dst, v)
			}
		}
	}
	// virtio-net feature bits: CSUM 0, GUEST_CSUM 1, GUEST_TSO4 7,
	// HOST_TSO4 11, as the guest's driver sees them.
	feat, _ := g1.Line("virtio-net")
	feat = strings.TrimPrefix(feat, "features=")
	for _, bit := range []int{0, 1, 7, 11} {
		if len(feat) <= bit || feat[bit] != '1' {
			t.Errorf("guest1: virtio-net feature bit %d not negotiated (features %q)", bit, feat)
		}
	}
	got, sent, ok := srv.Results(g1.Addr)
	if !ok {
		t.Fatalf("the wire host saw no transfer both ways: %+v %+v", got, sent)
	}
	tx, _ := g1.Line("tx")
	rx, _ := g1.Line("rx")
	if want := fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, got.Sum); tx != want || got.Bytes != int64(mib)<<20 || got.Err != nil {
		t.Errorf("guest1 -> wire: guest said %q; wire host got %d bytes (%v), sha256 %s", tx, got.Bytes, got.Err, got.Sum)
	}
	if want := fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, sent.Sum); rx != want || sent.Err != nil {
		t.Errorf("wire -> guest1: guest said %q; wire host sent %d bytes (%v), sha256 %s", rx, sent.Bytes, sent.Err, sent.Sum)
	}
}

// checkVhostMetrics: the negotiated features in /status, and the ports'
// counters, GSO frames from guest1 and states in /metrics.
func checkVhostMetrics(t *testing.T, bed *testbed.Bed, ports []daemon.PortStatus, mib int) {
	t.Helper()
	st := vhostPorts(t, bed, 2)
	for _, f := range []string{"host_tso4", "guest_tso4", "csum", "guest_csum", "mrg_rxbuf", "version_1"} {
		if !slices.Contains(st[0].Features, f) {
			t.Errorf("port 0 negotiated %v, without %s", st[0].Features, f)
		}
	}
	t.Logf("port 0: features %s; from the guest %+v; to it %+v", strings.Join(st[0].Features, ","), *st[0].FromGuest, *st[0].ToGuest)
	m := testkit.Scrape(t, bed)
	p0, p1 := `port="`+ports[0].Name+`"`, `port="`+ports[1].Name+`"`
	gso := testkit.Sample(m, "tapfwd_vm_port_gso_frames_total", p0)
	txBytes := testkit.Sample(m, "tapfwd_vm_port_bytes_total", p0, `direction="tx"`)
	rxBytes := testkit.Sample(m, "tapfwd_vm_port_bytes_total", p0, `direction="rx"`)
	t.Logf("port 0 metrics: %v GSO frames from the guest, %v bytes from it, %v to it", gso, txBytes, rxBytes)
	if gso == 0 || txBytes < float64(mib<<20) || rxBytes < float64(mib<<20) {
		t.Errorf("port 0: %v GSO frames, %v bytes from the guest, %v to it; want GSO frames and %d MiB each way", gso, txBytes, rxBytes, mib)
	}
	for _, p := range []string{p0, p1} {
		if v := testkit.Sample(m, "tapfwd_vm_port_state", p, `state="running"`); v != 1 {
			t.Errorf("tapfwd_vm_port_state{%s,state=running} = %v", p, v)
		}
		if v := testkit.Sample(m, "tapfwd_vm_port_packets_total", p, `direction="tx"`); v == 0 {
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

// waitReady waits up to 10 s for tapfwd's ready line (every worker in its
// loop: on a busy machine a guest port's worker may get there after the
// lab already answers) and returns when it was logged.
func waitReady(t *testing.T, fw *testbed.Process) time.Time {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !readyLine.MatchString(fw.Output()); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	return readyAt(t, fw)
}

// vhostGap measures a restart as the guest saw it: from the last reply
// before tapfwd went down to the first after the new one was ready, which
// must come within 5 s of ready (QEMU reconnects every second).
func vhostGap(t *testing.T, g *testkit.Guest, what string, down, ready time.Time) {
	t.Helper()
	var before, after *reply
	for deadline := ready.Add(10 * time.Second); after == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		before = nil
		for _, r := range replies(g) {
			if r.at.Before(down) {
				before = &r
			} else if r.at.After(ready) {
				after = &r
				break
			}
		}
	}
	if before == nil || after == nil {
		t.Fatalf("%s: no replies around the restart (before %v, after %v):\n%s", what, before, after, g.Output())
	}
	t.Logf("%s: no tapfwd for %v; pings resumed %v after the new one was ready: outage %v (last reply seq %d, next %d)",
		what, ready.Sub(down).Round(time.Millisecond), after.at.Sub(ready).Round(time.Millisecond),
		after.at.Sub(before.at).Round(time.Millisecond), before.seq, after.seq)
	if d := after.at.Sub(ready); d > 5*time.Second {
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
	t.Cleanup(func() { vmRun("down", "--tap", bed.LabIf, "--tap-netns", bed.LabNS) })
	nobody, err := daemon.LookupOwner("nobody")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := []string{"--vhost-user", dir, "--vm-ports", "1", "--vm-port-owner", "nobody", "--persist", "--metrics-addr", ""}
	fw := testkit.StartTapfwdOn(t, bed, exe(t), args...)
	path := vhostuser.SocketPath(dir, bed.LabNS, bed.LabIf, 0)
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil || st.Mode&0o7777 != 0o660 || int(st.Uid) != nobody.UID || int(st.Gid) != nobody.GID {
		t.Fatalf("socket %s: mode %#o uid %d gid %d (%v); want 0660 and %+v", path, st.Mode&0o7777, st.Uid, st.Gid, err, *nobody)
	}
	for run := 1; run <= 2; run++ {
		exchange(t, bed, path, vhostuser.GuestMAC(bed.LabNS, bed.LabIf, 0))
		if err := fw.Stop(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("run %d: --persist: the socket went with tapfwd: %v", run, err)
		}
		if run == 1 {
			fw = testkit.StartTapfwdOn(t, bed, exe(t), args...)
		}
	}
	// down --vhost-user removes what --persist kept.
	if code, out, errs := vmRun("down", "--tap", bed.LabIf, "--tap-netns", bed.LabNS, "--vhost-user", dir); code != 0 || !strings.Contains(out, "1 vhost-user sockets") {
		t.Fatalf("down: %d %s %s", code, out, errs)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after down --vhost-user: %s: %v, want it gone", path, err)
	}
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
	wire := testkit.OpenRaw(t, bed, bed.WireNS, bed.WireIf)
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
	send := testkit.WireSocket(t, bed, false)
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

// TestVhostUserErrors: a directory or socket path that cannot work fails
// the start with one line saying what to change, before the TAP is made.
func TestVhostUserErrors(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	base := t.TempDir()
	long := filepath.Join(base, strings.Repeat("d", 100))
	os.Mkdir(long, 0o755)
	taken := filepath.Join(base, "taken")
	os.Mkdir(taken, 0o755)
	os.WriteFile(vhostuser.SocketPath(taken, "", bed.LabIf, 0), nil, 0o644)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o644)
	ro := filepath.Join(base, "ro")
	os.Mkdir(ro, 0o755)
	start := func(prefix []string, dir string) *exec.Cmd {
		args := append(append([]string{"netns", "exec", bed.FwdNS}, prefix...), exe(t), "run", "--nic", bed.NIC, "--tap", bed.LabIf,
			"--vhost-user", dir, "--vm-ports", "1", "--metrics-addr", "")
		return exec.Command("ip", args...)
	}
	// A read-only mount, in a mount namespace of its own.
	roMount := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", `mount -t tmpfs -o ro tmpfs "$0" && exec "$@"`, ro}
	for _, tc := range []struct {
		what, dir string
		prefix    []string
		want      string
	}{
		{"a path too long", long, nil, "socket path too long"},
		{"a file in the way", taken, nil, "exists and is a regular file (remove it, or choose another directory)"},
		{"a file for the directory", file, nil, "--vhost-user: " + file + " is not a directory"},
		{"a read-only directory", ro, roMount, "read-only file system (the directory must be writable to tapfwd as it starts"},
	} {
		oneLineError(t, tc.what, start(tc.prefix, tc.dir), tc.want)
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
	kernel, initrd := testkit.VMGuestImage(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	testkit.StartTapfwdOn(t, bed, exe(t), "--vhost-user", filepath.Join(dir, "vhost"), "--vm-ports", "1")
	p := vhostPorts(t, bed, 1)[0]
	lv := testkit.StartLibvirtd(t, bed.LabNS)
	const mib = 2
	srv := testkit.StartDataServer(t, bed, mib<<20)
	sub := bed.WireAddr.Addr().As4()
	addr := netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], 31})
	name := "tfw-" + bed.ID + "-vhu"
	con := testkit.Console{Path: filepath.Join(dir, name+".console")}
	cmdline := fmt.Sprintf("console=ttyS0 panic=-1 quiet tfw.addr=%s/24 tfw.gw=%s tfw.tx=%d tfw.rx=%d tfw.mib=%d",
		addr, bed.WireAddr.Addr(), srv.TxPort, srv.RxPort, mib)
	xml := filepath.Join(dir, name+".xml")
	os.WriteFile(xml, []byte(testkit.VhostDomainXML(name, kernel, initrd, cmdline, p.Libvirt, p.LibvirtMemory, con.Path)), 0o644)
	start := time.Now()
	if _, err := lv.Virsh("create", xml); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := con.Wait(ctx); err != nil {
		t.Fatalf("%v; console:\n%s", err, con.Output())
	}
	if v, _ := con.Line("ping " + bed.WireAddr.Addr().String()); v != "ok" {
		t.Errorf("ping the wire host: %q", v)
	}
	got, sent, ok := srv.Results(addr)
	tx, _ := con.Line("tx")
	rx, _ := con.Line("rx")
	if !ok || tx != fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, got.Sum) || rx != fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, sent.Sum) {
		t.Errorf("guest said tx %q rx %q; wire host got %+v, sent %+v", tx, rx, got, sent)
	}
	t.Logf("libvirt guest on %s: ping ok, %d MiB each way, hashes match, %.1f s after virsh create", p.Socket, mib, time.Since(start).Seconds())
}
