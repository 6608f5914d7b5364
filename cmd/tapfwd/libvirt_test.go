package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestLibvirtGuests: a real libvirtd (Debian's), started by the test in the
// TAP's namespace, boots the test guest under TCG from the XML that
// `tapfwd vm-port add` prints: type='ethernet' on the existing port
// (managed='no'), and type='direct', where libvirt makes its own macvtap on
// the TAP. Each guest pings the wire host and moves data both ways with
// matching checksums.
func TestLibvirtGuests(t *testing.T) {
	testkit.NeedTools(t, "qemu-system-x86_64")
	kernel, initrd := testkit.VMGuestImage(t)
	bed, fw := startForwarder(t)
	lv := testkit.StartLibvirtd(t, bed.LabNS)
	code, out, errs := vmRun("vm-port", "add", "--tap", bed.LabIf, "--netns", bed.LabNS, "--json")
	if code != 0 {
		t.Fatalf("vm-port add: %s", errs)
	}
	var p daemon.MacvtapPort
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vmRun("vm-port", "del", "--netns", bed.LabNS, "--name", p.Name) })

	const mib = 2
	srv := testkit.StartDataServer(t, bed, mib<<20)
	sub := bed.WireAddr.Addr().As4()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	type guest struct {
		name string
		addr netip.Addr
		con  testkit.Console
	}
	var guests []guest
	for i, iface := range []string{p.Libvirt, p.LibvirtDirect} {
		g := guest{name: fmt.Sprintf("tfw-%s-%d", bed.ID, i), addr: netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], byte(21 + i)})}
		g.con = testkit.Console{Path: filepath.Join(dir, g.name+".console")}
		cmdline := fmt.Sprintf("console=ttyS0 panic=-1 quiet tfw.addr=%s/24 tfw.gw=%s tfw.tx=%d tfw.rx=%d tfw.mib=%d",
			g.addr, bed.WireAddr.Addr(), srv.TxPort, srv.RxPort, mib)
		xml := filepath.Join(dir, g.name+".xml")
		os.WriteFile(xml, []byte(testkit.DomainXML(g.name, kernel, initrd, cmdline, iface, g.con.Path)), 0o644)
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
		if v, _ := g.con.Line("ping " + bed.WireAddr.Addr().String()); v != "ok" {
			t.Errorf("%s: ping the wire host: %q", what, v)
		}
		got, sent, ok := srv.Results(g.addr)
		tx, _ := g.con.Line("tx")
		rx, _ := g.con.Line("rx")
		if !ok || tx != fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, got.Sum) || rx != fmt.Sprintf("ok bytes=%d sha256=%s", mib<<20, sent.Sum) {
			t.Errorf("%s: guest said tx %q rx %q; wire host got %+v, sent %+v\nconsole:\n%s\nQEMU:\n%s",
				what, tx, rx, got, sent, g.con.Output(), lv.QEMULog(g.name))
			continue
		}
		t.Logf("%s: ping ok, %d MiB each way, hashes match", what, mib)
	}
	if !strings.Contains(p.Libvirt, "managed='no'") {
		t.Errorf("vm-port add printed %q", p.Libvirt)
	}
}
