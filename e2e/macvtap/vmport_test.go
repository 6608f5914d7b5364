package macvtap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/internal/testkit/vm"
)

// TestVMPortCLIErrors checks the one-line errors a user gets, and that a
// failed add leaves no port behind.
func TestVMPortCLIErrors(t *testing.T) {
	bed, _ := testkit.Start(t, testkit.Tapfwd(t))
	p := vm.AddPort(t, testkit.Tapfwd(t), bed.LabNS, bed.LabIf, "--name", "tfwvmx")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--tap", "tfw-no-such-tap", "--tap-netns", bed.LabNS}, `no TAP "tfw-no-such-tap"`},
		{[]string{"add", "--tap", bed.LabIf}, "(there is one in network namespace " + bed.LabNS + ": pass --tap-netns " + bed.LabNS + ")"},
		{[]string{"add", "--tap", bed.LabIf, "--tap-netns", "tfw-no-such-ns"}, `network namespace "tfw-no-such-ns" not found`},
		{[]string{"add", "--tap", bed.LabIf, "--tap-netns", bed.LabNS, "--mac", p.MAC}, "is in use by tfwvmx"},
		{[]string{"add", "--tap", bed.LabIf, "--tap-netns", bed.LabNS, "--name", "tfwvmx"}, `name "tfwvmx" is in use`},
		{[]string{"add", "--tap", bed.NIC, "--tap-netns", bed.FwdNS}, "is a veth device, not a TAP"},
		{[]string{"del", "--name", bed.LabIf, "--tap-netns", bed.LabNS}, "not a vm-port"},
		{[]string{"del", "--name", "tfwvm-none", "--tap-netns", bed.LabNS}, `no vm-port "tfwvm-none"`},
	} {
		code, _, errs := testkit.CLI(t, append([]string{"vm-port"}, tc.args...)...)
		s := strings.TrimSpace(errs)
		if code != 1 || !strings.Contains(s, tc.want) || strings.Contains(s, "\n") {
			t.Errorf("tapfwd vm-port %q: exit %d, want 1 and one line containing %q, got:\n%s", tc.args, code, tc.want, s)
		}
	}
	ports, err := tapport.List(bed.LabNS, bed.LabIf)
	if err != nil || len(ports) != 1 {
		t.Errorf("after failed adds: ports %+v, %v; want only tfwvmx", ports, err)
	}
}

// TestVMGuests boots two QEMU guests on two vm-ports of tapfwd's TAP. Each
// pings the wire host and the other guest, sends
// 4 MiB to the wire host over TCP and fetches 4 MiB from it; both transfers
// must arrive complete (SHA-256 on both ends). Guest TSO is on: GSO
// super-frames from the guests must reach the wire intact, and the wire's
// must reach the ports.
func TestVMGuests(t *testing.T) {
	testkit.NeedRoot(t)
	img := vm.GuestImage(t)
	bed, fw := testkit.Start(t, testkit.Tapfwd(t))
	const mib = 4
	srv := traffic.StartDataServer(t, bed, mib<<20)

	// Ports through the CLI, as a user would.
	var ports []vm.Port
	for i := 0; i < 2; i++ {
		p := vm.AddPort(t, testkit.Tapfwd(t), bed.LabNS, bed.LabIf)
		ports = append(ports, p)
		if !strings.Contains(p.QEMU, "mac="+p.MAC) || !strings.HasSuffix(p.QEMU, "<>"+p.Dev) || !strings.Contains(p.Libvirt, "'"+p.Name+"'") {
			t.Errorf("vm-port add printed %+v", p)
		}
	}

	sub := bed.WireAddr.Addr().As4()
	ip := func(host byte) netip.Addr { return netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], host}) }
	gw := bed.WireAddr.Addr()
	guests := make([]*vm.Guest, 2)
	var caps []*traffic.Capture
	for i := range guests {
		addr := netip.PrefixFrom(ip(byte(11+i)), 24)
		other := ip(byte(12 - i))
		caps = append(caps,
			traffic.StartCapture(t, bed, bed.WireNS, bed.WireIf, func(src, _ netip.Addr) bool { return src == addr.Addr() }),
			traffic.StartCapture(t, bed, bed.LabNS, ports[i].Name, func(_, dst netip.Addr) bool { return dst == addr.Addr() }))
		guests[i] = vm.Boot(t, bed, fmt.Sprintf("guest%d", i+1), img, ports[i], addr,
			"tfw.gw="+gw.String(), "tfw.ping="+other.String(),
			fmt.Sprintf("tfw.tx=%d", srv.TxPort), fmt.Sprintf("tfw.rx=%d", srv.RxPort), fmt.Sprintf("tfw.mib=%d", mib))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	for _, g := range guests {
		if err := g.Wait(ctx); err != nil {
			t.Fatalf("%v; tapfwd said:\n%s", err, fw.Output())
		}
	}
	t.Logf("both guests done %.1f s after boot", time.Since(start).Seconds())

	for i, g := range guests {
		g.CheckPings(t, gw, ip(byte(12-i)))
		// virtio-net feature bits (include/uapi/linux/virtio_net.h): CSUM 0,
		// GUEST_CSUM 1, GUEST_TSO4 7, HOST_TSO4 11: checksum offload and TSO
		// both ways, through the macvtap's vnet header.
		g.CheckFeatures(t, 0, 1, 7, 11)
		if srv.Check(t, g.Name, g.Addr, g.Line) {
			t.Logf("%s: %s, %s: %d MiB each way, hashes match", g.Name, g.Port.Name, g.Addr, mib)
		}
	}

	// GSO metadata survives: the guest's TSO super-frames arrive on the
	// wire's veth whole (macvtap -> TAP -> tapfwd -> packet socket -> veth),
	// and the wire's reach the guest's port whole.
	for _, c := range caps {
		c.Finish()
	}
	for i, g := range guests {
		fromGuest, toGuest := caps[2*i], caps[2*i+1]
		t.Logf("%s -> wire, seen on %s: %v", g.Name, bed.WireIf, fromGuest)
		t.Logf("wire -> %s, seen on %s: %v", g.Name, g.Port.Name, toGuest)
		if fromGuest.Big == 0 {
			t.Errorf("%s's TCP data reached the wire only in MTU-sized frames (%v): GSO was lost on the way", g.Name, fromGuest)
		}
		if toGuest.Big == 0 {
			t.Errorf("the wire's TCP data reached %s only in MTU-sized frames (%v): GSO was lost on the way", g.Port.Name, toGuest)
		}
	}
	// tapfwd's own counters: GSO super-frames came from the guests' side
	// (read from the TAP) and from the wire (received on the NIC), and the
	// per-port metrics saw the guests' traffic.
	m := prom.Scrape(t, bed)
	gsoTAP := prom.Sample(m, "tapfwd_gso_frames_total", `device="`+bed.LabIf+`"`)
	gsoNIC := prom.Sample(m, "tapfwd_gso_frames_total", `device="`+bed.NIC+`"`)
	t.Logf("tapfwd_gso_frames_total: from the TAP %v, from the NIC %v", gsoTAP, gsoNIC)
	if gsoTAP == 0 || gsoNIC == 0 {
		t.Errorf("tapfwd counted no GSO super-frames in one direction: TAP %v, NIC %v", gsoTAP, gsoNIC)
	}
	for _, g := range guests {
		if v := prom.Sample(m, "tapfwd_vm_port_bytes_total", `port="`+g.Port.Name+`"`, `direction="tx"`); v < 4<<20 {
			t.Errorf("per-port metric: %s sent %v bytes, want >= 4 MiB", g.Port.Name, v)
		}
	}

	// list shows both ports; del removes one and its device node.
	code, out, errs := testkit.CLI(t, "vm-port", "list", "--tap-netns", bed.LabNS, "--tap", bed.LabIf, "--json")
	var listed []vm.Port
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 2 {
		t.Fatalf("vm-port list: exit %d, %s%s", code, out, errs)
	}
	for i := range listed {
		if listed[i].Name != ports[i].Name || listed[i].Dev != ports[i].Dev || listed[i].Ifindex != ports[i].Ifindex || !listed[i].Up {
			t.Errorf("vm-port list[%d] = %+v, added %+v", i, listed[i], ports[i])
		}
	}
	guests[1].Kill()
	if code, _, errs := testkit.CLI(t, "vm-port", "del", "--tap-netns", bed.LabNS, "--name", ports[1].Name); code != 0 {
		t.Fatalf("vm-port del: %s", errs)
	}
	if _, err := os.Stat(ports[1].Dev); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after vm-port del: %v", ports[1].Dev, err)
	}
	if got, _ := tapport.List(bed.LabNS, ""); len(got) != 1 {
		t.Errorf("after del: %+v", got)
	}
}

// TestRunVMPorts checks that run --vm-ports makes the ports on the TAP and
// that they, and their device nodes, are gone after tapfwd exits.
func TestRunVMPorts(t *testing.T) {
	testkit.NeedRoot(t)
	bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--vm-ports", "2")
	links := testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "link", "show", "type", "macvtap")
	if n := strings.Count(strings.TrimSpace(links), "\n") + 1; strings.TrimSpace(links) == "" || n != 2 {
		t.Fatalf("want 2 macvtap ports in the lab, got:\n%s", links)
	}
	nodes, _ := filepath.Glob("/dev/tapfwd/" + bed.LabNS + ":*")
	if len(nodes) != 2 {
		t.Errorf("device nodes %v, want 2", nodes)
	}
	if !strings.Contains(fw.Output(), "qemu-system-x86_64") {
		t.Errorf("no QEMU line logged:\n%s", fw.Output())
	}
	m := prom.Scrape(t, bed)
	if n := strings.Count(m, "tapfwd_vm_port_packets_total{"); n != 4 {
		t.Errorf("%d per-port packet series in /metrics, want 4 (two ports, rx and tx)", n)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("%v\n%s", err, fw.Output())
	}
	if nodes, _ := filepath.Glob("/dev/tapfwd/" + bed.LabNS + ":*"); len(nodes) != 0 {
		t.Errorf("device nodes left behind: %v", nodes)
	}
}

// TestLibvirtGuests: a real libvirtd (Debian's), started by the test in the
// TAP's namespace, boots the test guest under TCG from the XML that
// `tapfwd vm-port add` prints: type='ethernet' on the existing port
// (managed='no'), and type='direct', where libvirt makes its own macvtap on
// the TAP. Each guest pings the wire host and moves data both ways with
// matching checksums.
func TestLibvirtGuests(t *testing.T) {
	testkit.NeedTools(t, "qemu-system-x86_64")
	img := vm.GuestImage(t)
	bed, fw := testkit.Start(t, testkit.Tapfwd(t))
	lv := vm.StartLibvirtd(t, bed.LabNS)
	p := vm.AddPort(t, testkit.Tapfwd(t), bed.LabNS, bed.LabIf)

	const mib = 2
	srv := traffic.StartDataServer(t, bed, mib<<20)
	sub := bed.WireAddr.Addr().As4()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	type guest struct {
		name string
		addr netip.Addr
		con  vm.Console
	}
	var guests []guest
	for i, iface := range []string{p.Libvirt, p.LibvirtDirect} {
		g := guest{name: fmt.Sprintf("tfw-%s-%d", bed.ID, i), addr: netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], byte(21 + i)})}
		g.con = vm.Console{Path: filepath.Join(dir, g.name+".console")}
		cmdline := fmt.Sprintf("console=ttyS0 panic=-1 quiet tfw.addr=%s/24 tfw.gw=%s tfw.tx=%d tfw.rx=%d tfw.mib=%d",
			g.addr, bed.WireAddr.Addr(), srv.TxPort, srv.RxPort, mib)
		xml := filepath.Join(dir, g.name+".xml")
		os.WriteFile(xml, []byte(vm.DomainXML(g.name, img, cmdline, iface, g.con.Path)), 0o644)
		if _, err := lv.Virsh("create", xml); err != nil {
			t.Fatalf("%v\n(domain %s)", err, iface)
		}
		guests = append(guests, g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, g := range guests {
		if err := g.con.Wait(ctx); err != nil {
			t.Fatalf("%s: %v; console:\n%s\ntapfwd said:\n%s", g.name, err, g.con.Output(), fw.Output())
		}
	}
	for i, g := range guests {
		what := []string{"type='ethernet' on the VM port", "type='direct' on the TAP"}[i]
		g.con.CheckPings(t, what, bed.WireAddr.Addr())
		if !srv.Check(t, what, g.addr, g.con.Line) {
			t.Logf("%s: console:\n%s\nQEMU:\n%s", what, g.con.Output(), lv.QEMULog(g.name))
			continue
		}
		t.Logf("%s: ping ok, %d MiB each way, hashes match", what, mib)
	}
	if !strings.Contains(p.Libvirt, "managed='no'") {
		t.Errorf("vm-port add printed %q", p.Libvirt)
	}
}
