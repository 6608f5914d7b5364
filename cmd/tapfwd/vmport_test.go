package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/vmport"
)

func TestVMPortCLIUsage(t *testing.T) {
	checkCLI(t, []cliCase{
		{[]string{"vm-port"}, 2, "Commands:"},
		{[]string{"vm-port", "frob"}, 2, `unknown command "frob"`},
		{[]string{"vm-port", "add"}, 2, "--tap is required"},
		{[]string{"vm-port", "del"}, 2, "--name is required"},
		{[]string{"vm-port", "add", "--tap", "x", "--mac", "zz"}, 2, "--mac zz: want six hex bytes"},
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
	var p daemon.MacvtapPort
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("vm-port add --json: %v\n%s", err, out)
	}
	t.Cleanup(func() { vmRun("vm-port", "del", "--netns", bed.LabNS, "--name", p.Name) })
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--tap", "tfw-no-such-tap", "--netns", bed.LabNS}, `no TAP "tfw-no-such-tap"`},
		{[]string{"add", "--tap", bed.LabIf}, "pass that namespace with --tap-netns"},
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

// TestVMGuests boots two QEMU guests on two vm-ports of tapfwd's TAP. Each
// pings the wire host and the other guest, sends
// 4 MiB to the wire host over TCP and fetches 4 MiB from it; both transfers
// must arrive complete (SHA-256 on both ends). Guest TSO is on: GSO
// super-frames from the guests must reach the wire intact, and the wire's
// must reach the ports.
func TestVMGuests(t *testing.T) {
	testkit.NeedRoot(t)
	kernel, initrd := testkit.VMGuestImage(t)
	bed, fw := startForwarder(t)
	const mib = 4
	srv := testkit.StartDataServer(t, bed, mib<<20)

	// Ports through the CLI, as a user would.
	var ports []daemon.MacvtapPort
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
		var p daemon.MacvtapPort
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("vm-port add --json: %v\n%s", err, out)
		}
		ports = append(ports, p)
		if !strings.Contains(p.QEMU, "mac="+p.MAC) || !strings.HasSuffix(p.QEMU, "<>"+p.Dev) || !strings.Contains(p.Libvirt, "'"+p.Name+"'") {
			t.Errorf("vm-port add printed %+v", p)
		}
	}

	sub := bed.WireAddr.Addr().As4()
	ip := func(host byte) netip.Addr { return netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], host}) }
	gw := bed.WireAddr.Addr()
	guests := make([]*testkit.Guest, 2)
	var caps []*testkit.Capture
	for i := range guests {
		addr := netip.PrefixFrom(ip(byte(11+i)), 24)
		other := ip(byte(12 - i))
		caps = append(caps,
			testkit.StartCapture(t, bed, bed.WireNS, bed.WireIf, func(src, _ netip.Addr) bool { return src == addr.Addr() }),
			testkit.StartCapture(t, bed, bed.LabNS, ports[i].Name, func(_, dst netip.Addr) bool { return dst == addr.Addr() }))
		guests[i] = testkit.BootGuest(t, bed, fmt.Sprintf("guest%d", i+1), kernel, initrd, guestPort(ports[i]), addr,
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
		other := ip(byte(12 - i))
		for _, dst := range []netip.Addr{gw, other} {
			if v, _ := g.Line("ping " + dst.String()); v != "ok" {
				t.Errorf("%s: ping %s: %q", g.Name, dst, v)
			}
		}
		// virtio-net feature bits (include/uapi/linux/virtio_net.h): CSUM 0,
		// GUEST_CSUM 1, GUEST_TSO4 7, HOST_TSO4 11: checksum offload and TSO
		// both ways, through the macvtap's vnet header.
		feat, _ := g.Line("virtio-net")
		feat = strings.TrimPrefix(feat, "features=")
		for _, bit := range []int{0, 1, 7, 11} {
			if len(feat) <= bit || feat[bit] != '1' {
				t.Errorf("%s: virtio-net feature bit %d not negotiated (features %q)", g.Name, bit, feat)
			}
		}
		got, sent, ok := srv.Results(g.Addr)
		if !ok {
			t.Errorf("%s: the wire host saw no transfer both ways: %+v %+v", g.Name, got, sent)
			continue
		}
		tx, _ := g.Line("tx")
		rx, _ := g.Line("rx")
		wantTx := fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, got.Sum)
		if tx != wantTx || got.Bytes != mib<<20 || got.Err != nil {
			t.Errorf("%s -> wire: guest said %q; wire host got %d bytes (%v), sha256 %s", g.Name, tx, got.Bytes, got.Err, got.Sum)
		}
		wantRx := fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, sent.Sum)
		if rx != wantRx || sent.Err != nil {
			t.Errorf("wire -> %s: guest said %q; wire host sent %d bytes (%v), sha256 %s", g.Name, rx, sent.Bytes, sent.Err, sent.Sum)
		}
		t.Logf("%s: %s, %s: %d MiB each way, hashes match", g.Name, g.Port.Name, g.Addr, mib)
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
	m := testkit.Scrape(t, bed)
	gsoTAP := testkit.Sample(m, "tapfwd_gso_frames_total", `device="`+bed.LabIf+`"`)
	gsoNIC := testkit.Sample(m, "tapfwd_gso_frames_total", `device="`+bed.NIC+`"`)
	t.Logf("tapfwd_gso_frames_total: from the TAP %v, from the NIC %v", gsoTAP, gsoNIC)
	if gsoTAP == 0 || gsoNIC == 0 {
		t.Errorf("tapfwd counted no GSO super-frames in one direction: TAP %v, NIC %v", gsoTAP, gsoNIC)
	}
	for _, g := range guests {
		if v := testkit.Sample(m, "tapfwd_vm_port_bytes_total", `port="`+g.Port.Name+`"`, `direction="tx"`); v < 4<<20 {
			t.Errorf("per-port metric: %s sent %v bytes, want >= 4 MiB", g.Port.Name, v)
		}
	}

	// list shows both ports; del removes one and its device node.
	code, out, errs := vmRun("vm-port", "list", "--netns", bed.LabNS, "--tap", bed.LabIf, "--json")
	var listed []daemon.MacvtapPort
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 2 {
		t.Fatalf("vm-port list: exit %d, %s%s", code, out, errs)
	}
	for i := range listed {
		if listed[i].Name != ports[i].Name || listed[i].Dev != ports[i].Dev || listed[i].Ifindex != ports[i].Ifindex || !listed[i].Up {
			t.Errorf("vm-port list[%d] = %+v, added %+v", i, listed[i], ports[i])
		}
	}
	guests[1].Kill()
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

// guestPort is what testkit.BootGuest needs of a port vm-port add printed.
func guestPort(p daemon.MacvtapPort) testkit.VMPort {
	return testkit.VMPort{Name: p.Name, Dev: p.Dev, MAC: p.MAC}
}
