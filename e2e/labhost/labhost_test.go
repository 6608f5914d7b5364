package labhost

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/dhcp"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/internal/tapport/tapporttest"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/internal/testkit/vm"
)

// labIP is 198.18.X.host on bed's subnet.
func labIP(bed *testbed.Bed, host byte) netip.Addr {
	a := bed.LabAddr.Addr().As4()
	a[3] = host
	return netip.AddrFrom4(a)
}

// hostPortOf is the host port tapfwd run --host-port put on bed's TAP.
func hostPortOf(t *testing.T, bed *testbed.Bed) tapport.HostPort {
	t.Helper()
	p, ok, err := tapport.FindHost(bed.LabNS, bed.LabIf)
	if err != nil || !ok {
		t.Fatalf("no host port on %s: %v", bed.LabIf, err)
	}
	return p
}

// hostPing pings addr from the lab host: every reply must come, once.
func hostPing(t *testing.T, bed *testbed.Bed, addr netip.Addr) {
	t.Helper()
	out := testkit.BedRun(t, bed, bed.LabNS, "ping", "-c", "3", "-i", "0.2", "-W", "2", addr.String())
	if !strings.Contains(out, "3 received") || strings.Contains(out, "DUP!") {
		t.Errorf("the host pinging %s:\n%s", addr, out)
	}
}

// TestHostPortGuests: tapfwd run --host-port with two guests on two VM
// ports. Host and guests reach each other, all three pairs, and each guest
// still reaches the wire host; the host pings both guests (every reply
// once), and one guest moves 4 MiB each way to and from the host over TCP
// with matching SHA-256. None of the frames between host and guests reach
// the wire: the kernel's macvlan bridge on the TAP switches them.
func TestHostPortGuests(t *testing.T) {
	testkit.NeedRoot(t, "ping")
	img := vm.GuestImage(t)
	bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--host-port", "--vm-ports", "2")
	ports := vm.Ports(t, bed.LabNS, bed.LabIf, 2)
	host, wire := bed.LabAddr.Addr(), bed.WireAddr.Addr()
	addrs := []netip.Addr{labIP(bed, 11), labIP(bed, 12)}
	segment := map[netip.Addr]bool{host: true, addrs[0]: true, addrs[1]: true}
	onWire := traffic.StartCapture(t, bed, bed.WireNS, bed.WireIf, func(src, dst netip.Addr) bool { return segment[src] && segment[dst] })
	const mib = 4
	srv := traffic.StartDataServerAt(t, bed, bed.LabNS, host, mib<<20)

	start := time.Now()
	guests := []*vm.Guest{
		vm.Boot(t, bed, "guest1", img, ports[0], netip.PrefixFrom(addrs[0], 24),
			"tfw.gw="+wire.String(), "tfw.ping="+host.String()+","+addrs[1].String(), "tfw.peer="+host.String(),
			fmt.Sprintf("tfw.tx=%d", srv.TxPort), fmt.Sprintf("tfw.rx=%d", srv.RxPort), fmt.Sprintf("tfw.mib=%d", mib)),
		vm.Boot(t, bed, "guest2", img, ports[1], netip.PrefixFrom(addrs[1], 24),
			"tfw.gw="+wire.String(), "tfw.ping="+host.String()+","+addrs[0].String()),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, g := range guests {
		if err := g.Wait(ctx); err != nil {
			t.Fatalf("%v; tapfwd said:\n%s", err, fw.Output())
		}
	}
	t.Logf("both guests done %.1f s after boot", time.Since(start).Seconds())
	guests[0].CheckPings(t, wire, host, addrs[1])
	guests[1].CheckPings(t, wire, host, addrs[0])
	for _, a := range addrs {
		hostPing(t, bed, a)
	}

	srv.Check(t, guests[0].Name, addrs[0], guests[0].Line)
	onWire.Finish()
	t.Logf("IPv4 between host and guests seen on the wire: %v", onWire)
	if onWire.Frames != 0 {
		t.Errorf("the wire saw %d frames between the host and the guests, want none", onWire.Frames)
	}
}

// TestHostPortDHCP: a guest gets its address by DHCP from dnsmasq on the
// host port, then reaches the host and the wire, and the host reaches it.
// "flag" runs dnsmasq with tapfwd run --dhcp, and checks that it stops and
// its lease file goes when tapfwd stops; "recipe" runs it by hand as the
// README's recipe does.
func TestHostPortDHCP(t *testing.T) {
	testkit.NeedRoot(t, "ping")
	need.Found(t, "dnsmasq", dhcp.Find)
	bin, err := dhcp.Find()
	if err != nil {
		t.Fatal(err)
	}
	img := vm.GuestImage(t)
	for _, flag := range []bool{true, false} {
		name := map[bool]string{true: "flag", false: "recipe"}[flag]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dhcpGuest(t, bin, img, flag)
		})
	}
}

var dnsmasqPid = regexp.MustCompile(`msg="DHCP server" .* dnsmasq_pid=(\d+)`)

func dhcpGuest(t *testing.T, bin string, img vm.Image, flag bool) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	first, last := labIP(bed, 100), labIP(bed, 150)
	args := []string{"--host-port", "--vm-ports", "1"}
	if flag {
		args = append(args, "--dhcp", first.String()+"-"+last.String())
	}
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
	hp := hostPortOf(t, bed)
	leases := dhcp.LeaseFile(bed.LabNS, bed.LabIf)
	if !flag {
		// The README's recipe (with --keep-in-foreground, so the test
		// ends it): dnsmasq in the TAP's namespace, on the host port.
		dir := t.TempDir()
		leases = filepath.Join(dir, bed.LabIf+".leases")
		cmd := bed.Command(context.Background(), bed.LabNS, bin, "--keep-in-foreground",
			"--conf-file=/dev/null", "--port=0", "--bind-dynamic", "--interface="+hp.Name,
			"--dhcp-range="+first.String()+","+last.String(), "--dhcp-option=3", "--dhcp-option=6",
			"--dhcp-leasefile="+leases, "--pid-file="+filepath.Join(dir, "dnsmasq.pid"))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		})
	}
	ports := vm.Ports(t, bed.LabNS, bed.LabIf, 1)
	host, wire := bed.LabAddr.Addr(), bed.WireAddr.Addr()
	g := vm.Boot(t, bed, "guest", img, ports[0], netip.Prefix{},
		"tfw.dhcp=1", "tfw.gw="+wire.String(), "tfw.ping="+host.String())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := g.Wait(ctx); err != nil {
		t.Fatalf("%v; tapfwd said:\n%s", err, fw.Output())
	}
	addr, ok := g.DHCPAddr()
	t.Logf("the guest got %v by DHCP, done %.1f s after boot", addr, time.Since(start).Seconds())
	if !ok || addr.Bits() != 24 || addr.Addr().Less(first) || last.Less(addr.Addr()) {
		t.Fatalf("the guest's DHCP address %v (%v), want one in %s-%s/24:\n%s", addr, ok, first, last, g.Output())
	}
	g.CheckPings(t, wire, host)
	hostPing(t, bed, addr.Addr())
	b, err := os.ReadFile(leases)
	if err != nil || !strings.Contains(string(b), ports[0].MAC+" "+addr.Addr().String()) {
		t.Errorf("lease file %s: %q, %v; want the guest's lease", leases, b, err)
	}
	if !flag {
		return
	}
	if !strings.Contains(fw.Output(), "DHCPACK("+hp.Name+") "+addr.Addr().String()+" "+ports[0].MAC) {
		t.Errorf("tapfwd's log has no DHCPACK for the guest:\n%s", fw.Output())
	}
	m := dnsmasqPid.FindStringSubmatch(fw.Output())
	if m == nil {
		t.Fatalf("tapfwd logged no DHCP server:\n%s", fw.Output())
	}
	pid, _ := strconv.Atoi(m[1])
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
	gone(t, "dnsmasq", pid, leases)
}

// gone checks that process pid has exited and file is removed.
func gone(t *testing.T, what string, pid int, file string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, errProc := os.Stat("/proc/" + strconv.Itoa(pid))
		_, errFile := os.Stat(file)
		if os.IsNotExist(errProc) && os.IsNotExist(errFile) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: process %d (%v) or %s (%v) still there", what, pid, errProc, file, errFile)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHostPortDHCPKilled: tapfwd --dhcp running as nobody is killed
// outright; its keeper still stops dnsmasq and removes the lease file.
func TestHostPortDHCPKilled(t *testing.T) {
	testkit.NeedRoot(t)
	need.Found(t, "dnsmasq", dhcp.Find)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	fw := testkit.StartOn(t, bed, testkit.PlainTapfwd(t), "--user", "nobody", "--host-port",
		"--dhcp", labIP(bed, 100).String()+"-"+labIP(bed, 150).String())
	kernel.CheckDropped(t, fw.Pid())
	m := dnsmasqPid.FindStringSubmatch(fw.Output())
	if m == nil {
		t.Fatalf("tapfwd logged no DHCP server:\n%s", fw.Output())
	}
	pid, _ := strconv.Atoi(m[1])
	leases := dhcp.LeaseFile(bed.LabNS, bed.LabIf)
	if _, err := os.Stat(leases); err != nil {
		t.Fatalf("no lease file while dnsmasq runs: %v", err)
	}
	fw.Kill()
	gone(t, "after SIGKILL", pid, leases)
}

// TestHostPortWireView: with --host-port (and --strict-mac) the wire knows
// the lab host by its port's MAC, from one ARP reply; a broadcast from the
// wire reaches the host once; TCP through tapfwd works both ways; the TAP
// under the port sends nothing of its own, and --strict-mac drops frames
// with the TAP's MAC as their source.
func TestHostPortWireView(t *testing.T) {
	testkit.NeedRoot(t, "iperf3", "ping")
	bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--host-port", "--strict-mac")
	spoofed := func() float64 {
		return prom.Sample(prom.Scrape(t, bed), "tapfwd_drops_total", `reason="spoofed_mac"`, `device="`+bed.LabIf+`"`)
	}
	before := spoofed()
	hp := hostPortOf(t, bed)
	host := bed.LabAddr.Addr()

	raw := traffic.OpenRaw(t, bed, bed.WireNS, bed.WireIf)
	testkit.BedRun(t, bed, bed.WireNS, "ip", "neigh", "flush", "dev", bed.WireIf)
	testkit.BedRun(t, bed, bed.WireNS, "ping", "-c", "1", "-W", "2", host.String())
	if macs := arpReplies(raw, host, 500*time.Millisecond); len(macs) != 1 || macs[0] != hp.MAC.String() {
		t.Errorf("ARP replies for %s on the wire: %v, want one from the host port %s", host, macs, hp.MAC)
	}
	neigh := testkit.BedRun(t, bed, bed.WireNS, "ip", "neigh", "show", host.String(), "dev", bed.WireIf)
	if !strings.Contains(neigh, hp.MAC.String()) {
		t.Errorf("the wire's neighbour entry for the host %q, want the host port's MAC %s", neigh, hp.MAC)
	}
	broadcastsOnce(t, bed)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, rev := range []bool{false, true} {
		r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev})
		if err != nil || r.Bytes < 20<<20 {
			t.Fatalf("TCP (reverse %v) with --strict-mac through the host port: %v, %+v", rev, err, r)
		}
		t.Logf("TCP reverse=%v: %.2f Gbit/s", rev, r.BitsPerSecond/1e9)
	}

	// Nothing came from the TAP's own MAC meanwhile; forged, it is dropped.
	if d := spoofed() - before; d != 0 {
		t.Errorf("%v frames dropped as spoofed_mac while only the host port spoke", d)
	}
	tapMAC := kernel.LinkMAC(t, bed.LabNS, bed.LabIf)
	lab := traffic.OpenRaw(t, bed, bed.LabNS, bed.LabIf)
	forged := traffic.Tagged(t, tapMAC, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0, traffic.UDPPacket(t, bed))
	forged = append(forged[:12], forged[16:]...) // untagged
	for i := 0; i < 5; i++ {
		if _, err := syscall.Write(lab, forged); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if d := spoofed() - before; d != 5 {
		t.Errorf("spoofed_mac drops %v after 5 frames from the TAP's MAC, want 5", d)
	}
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
}

// arpReplies are the sender MACs of the ARP replies for ip that fd (a
// packet socket on the wire) receives within d.
func arpReplies(fd int, ip netip.Addr, d time.Duration) []string {
	var macs []string
	buf := make([]byte, 128)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			continue
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		// EtherType ARP, operation 2 (reply), sender IP at 28.
		if !ok || ll.Pkttype == unix.PACKET_OUTGOING || n < 42 || buf[12] != 0x08 || buf[13] != 0x06 || buf[21] != 2 {
			continue
		}
		if a, _ := netip.AddrFromSlice(buf[28:32]); a == ip {
			macs = append(macs, net.HardwareAddr(buf[22:28]).String())
		}
	}
	return macs
}

// broadcastsOnce sends UDP from the wire to the subnet's broadcast address
// and to 255.255.255.255: a socket bound to the wildcard in the lab gets
// each datagram once (the TAP under the host port takes none up).
func broadcastsOnce(t *testing.T, bed *testbed.Bed) {
	t.Helper()
	var rx, tx *net.UDPConn
	err := bed.Do(bed.LabNS, func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{})
		return err
	})
	if err == nil {
		err = bed.Do(bed.WireNS, func() (err error) {
			tx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: bed.WireAddr.Addr().AsSlice()})
			return err
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	defer tx.Close()
	port := rx.LocalAddr().(*net.UDPAddr).Port
	sent := map[string]int{}
	for i := 0; i < 5; i++ {
		for _, dst := range []netip.Addr{labIP(bed, 255), netip.AddrFrom4([4]byte{255, 255, 255, 255})} {
			msg := fmt.Sprintf("tfw-bcast-%s-%d", dst, i)
			if _, err := tx.WriteToUDPAddrPort([]byte(msg), netip.AddrPortFrom(dst, uint16(port))); err != nil {
				t.Fatalf("broadcast to %s: %v", dst, err)
			}
			sent[msg] = 0
		}
	}
	rx.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 128)
	for {
		n, err := rx.Read(buf)
		if err != nil {
			break
		}
		sent[string(buf[:n])]++
	}
	for msg, n := range sent {
		if n != 1 {
			t.Errorf("%s reached the host %d times, want once", msg, n)
		}
	}
}

// TestHostPortPersist: with --persist the host port stays when tapfwd
// stops, with its address, and the next run adopts it (same ifindex and
// MAC), as does the DHCP server's lease file; a run without --host-port
// removes it and gives the address back to the TAP; tapfwd down removes
// the lease file.
func TestHostPortPersist(t *testing.T) {
	testkit.NeedRoot(t)
	need.Found(t, "dnsmasq", dhcp.Find)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	t.Cleanup(func() { testkit.CLI(t, "down", "--tap", bed.LabIf, "--tap-netns", bed.LabNS) })
	args := []string{"--persist", "--host-port", "--dhcp", labIP(bed, 100).String() + "-" + labIP(bed, 150).String(), "--metrics-addr", ""}
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
	hp := hostPortOf(t, bed)
	leases := dhcp.LeaseFile(bed.LabNS, bed.LabIf)
	tapporttest.CheckSettings(t, bed.LabNS, bed.LabIf, map[string]string{"arp_ignore": "8"})
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
	if p := hostPortOf(t, bed); p.Index != hp.Index || p.MAC.String() != hp.MAC.String() {
		t.Errorf("after the stop the host port is %+v, was %+v", p, hp)
	}
	if out := testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "addr", "show", "dev", hp.Name); !strings.Contains(out, bed.LabAddr.String()) {
		t.Errorf("the host port lost its address: %s", out)
	}
	if _, err := os.Stat(leases); err != nil {
		t.Errorf("the persistent lab's lease file: %v", err)
	}

	fw = testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
	if p := hostPortOf(t, bed); p.Index != hp.Index || !strings.Contains(fw.Output(), "adopted=true") {
		t.Errorf("the second run did not adopt the host port: %+v\n%s", p, fw.Output())
	}
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}

	// The wire still knows the host port's MAC: forget it.
	testkit.BedRun(t, bed, bed.WireNS, "ip", "neigh", "flush", "dev", bed.WireIf)
	fw = testkit.StartOn(t, bed, testkit.Tapfwd(t), "--persist", "--metrics-addr", "")
	if _, ok, err := tapport.FindHost(bed.LabNS, bed.LabIf); ok || err != nil {
		t.Errorf("a run without --host-port kept the host port (%v)", err)
	}
	if out := testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "addr", "show", "dev", bed.LabIf); !strings.Contains(out, bed.LabAddr.String()) {
		t.Errorf("the TAP did not get the lab address back: %s", out)
	}
	tapporttest.CheckSettings(t, bed.LabNS, bed.LabIf, map[string]string{"arp_ignore": "0"})
	if !strings.Contains(fw.Output(), "removed the host port") {
		t.Errorf("no word of the host port's removal:\n%s", fw.Output())
	}
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := testkit.CLI(t, "down", "--tap", bed.LabIf, "--tap-netns", bed.LabNS); code != 0 {
		t.Fatalf("tapfwd down: %s%s", out, errs)
	}
	if _, err := os.Stat(leases); !os.IsNotExist(err) {
		t.Errorf("tapfwd down left the lease file: %v", err)
	}
}

// TestHostPortDHCPFails: a dnsmasq that cannot start (port 67 taken in the
// lab) makes tapfwd exit 1 with one line saying why, leaving nothing.
func TestHostPortDHCPFails(t *testing.T) {
	testkit.NeedRoot(t)
	need.Found(t, "dnsmasq", dhcp.Find)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	var taken *net.UDPConn
	if err := bed.Do(bed.LabNS, func() (err error) {
		taken, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 67})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	args := append(append([]string{"run"}, bed.ForwarderArgs()...), "--host-port", "--metrics-addr", "", "--log-level", "warn",
		"--dhcp", labIP(bed, 100).String()+"-"+labIP(bed, 150).String())
	cmd := bed.Command(context.Background(), bed.FwdNS, testkit.Tapfwd(t), args...)
	clitest.OneLineError(t, "--dhcp with port 67 taken", cmd, "--dhcp: dnsmasq did not start on "+tapport.HostName(bed.LabIf)+": failed to bind DHCP server socket: Address already in use")
	if _, err := os.Stat(dhcp.LeaseFile(bed.LabNS, bed.LabIf)); !os.IsNotExist(err) {
		t.Errorf("lease file after the failed start: %v", err)
	}
	if out := testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "link", "show"); strings.Contains(out, bed.LabIf) {
		t.Errorf("the lab after the failed start:\n%s", out)
	}
}
