package vm

import (
	"bufio"
	"context"
	"encoding/xml"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testkit"
)

// console is what the test guest (scripts/vmguest.sh) prints on its
// serial console, with the carriage returns a serial line has.
const console = "Linux version 6.1\r\n" +
	"TFW: virtio-net features=1101\r\n" +
	"TFW: eth0 carrier=1\r\n" +
	"TFW: dhcp 198.18.5.77/24\r\n" +
	"64 bytes from 198.18.5.1: seq=0 ttl=64 time=1.2 ms\r\n" +
	"64 bytes from 198.18.5.1: seq=1 ttl=64 time=0.9 ms\r\n" +
	"TFW: eth0 carrier=0\r\n" +
	"TFW: ping 198.18.5.1 ok\r\n" +
	"TFW: ping 198.18.5.9 fail\r\n" +
	"TFW: tx 10\r\n" +
	"TFW: tx 12\r\n" +
	"TFW: done\r\n"

// readGuest is a Guest that has read text from its console.
func readGuest(text string) *Guest {
	g := &Guest{Name: "g0", lines: map[string]string{}, done: make(chan struct{}), exited: make(chan struct{})}
	g.read(bufio.NewScanner(strings.NewReader(text)))
	return g
}

// TestGuestConsole: the TFW lines by key (the last of each), the ping
// replies in order, the carrier changes after it came up, the DHCP
// address, the negotiated feature bits, and "done" ending Wait.
func TestGuestConsole(t *testing.T) {
	g := readGuest(console)
	if v, _ := g.Line("tx"); v != "12" {
		t.Errorf("Line(tx) = %q, want the last, 12", v)
	}
	if _, ok := g.Line("rx"); ok {
		t.Error("Line(rx) found a line the guest did not print")
	}
	if r := g.Replies(); len(r) != 2 || r[0].Seq != 0 || r[1].Seq != 1 || r[1].At.Before(r[0].At) {
		t.Errorf("Replies = %+v", r)
	}
	if c := g.CarrierChanges(); len(c) != 1 || c[0] != "TFW: eth0 carrier=0" {
		t.Errorf("CarrierChanges = %q", c)
	}
	if a, ok := g.DHCPAddr(); !ok || a != netip.MustParsePrefix("198.18.5.77/24") {
		t.Errorf("DHCPAddr = %v %v", a, ok)
	}
	if strings.Contains(g.Output(), "\r") || len(g.Lines()) != 12 {
		t.Errorf("Output keeps carriage returns, or %d lines", len(g.Lines()))
	}
	r := &testkit.Recorder{TB: t}
	g.CheckPings(r, netip.MustParseAddr("198.18.5.1"), netip.MustParseAddr("198.18.5.9"), netip.MustParseAddr("198.18.5.10"))
	g.CheckFeatures(r, 0, 1, 3, 2)
	want := []string{`g0: ping 198.18.5.9: "fail"`, `g0: ping 198.18.5.10: ""`,
		`g0: virtio-net feature bit 2 not negotiated (features "1101")`}
	if strings.Join(r.Errs, "\n") != strings.Join(want, "\n") {
		t.Errorf("checks failed with\n%s\nwant\n%s", strings.Join(r.Errs, "\n"), strings.Join(want, "\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		t.Errorf("Wait after TFW: done: %v", err)
	}
}

// TestGuestWait: a guest whose QEMU exited before "TFW: done", and one
// that takes too long, say so.
func TestGuestWait(t *testing.T) {
	g := readGuest("TFW: tx 1\n")
	if _, ok := g.DHCPAddr(); ok {
		t.Error("DHCPAddr before the guest printed one")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.Wait(ctx); err == nil || !strings.Contains(err.Error(), "did not finish in time") {
		t.Errorf("Wait, still running: %v", err)
	}
	close(g.exited)
	if err := g.Wait(context.Background()); err == nil || !strings.Contains(err.Error(), "QEMU exited") {
		t.Errorf("Wait, QEMU gone: %v", err)
	}
}

// TestConsoleFile: a libvirt guest's console file read the same way.
func TestConsoleFile(t *testing.T) {
	c := Console{Path: filepath.Join(t.TempDir(), "console.log")}
	if _, ok := c.Line("done"); ok {
		t.Error("Line of a console file not there yet")
	}
	if err := os.WriteFile(c.Path, []byte(console), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, ok := c.Line("tx"); !ok || v != "12" {
		t.Errorf("Line(tx) = %q %v", v, ok)
	}
	r := &testkit.Recorder{TB: t}
	c.CheckPings(r, "vm1", netip.MustParseAddr("198.18.5.1"), netip.MustParseAddr("198.18.5.9"))
	if len(r.Errs) != 1 || r.Errs[0] != `vm1: ping 198.18.5.9: "fail"` {
		t.Errorf("CheckPings: %q", r.Errs)
	}
	if err := c.Wait(context.Background()); err != nil || c.Output() != console {
		t.Errorf("Wait: %v", err)
	}
}

// domain is the part of a libvirt domain the tests check.
type domain struct {
	XMLName xml.Name `xml:"domain"`
	Name    string   `xml:"name"`
	Memory  struct {
		Unit string `xml:"unit,attr"`
	} `xml:"memory"`
	Backing *struct {
		Access struct {
			Mode string `xml:"mode,attr"`
		} `xml:"access"`
	} `xml:"memoryBacking"`
	OS struct {
		Kernel  string `xml:"kernel"`
		Initrd  string `xml:"initrd"`
		Cmdline string `xml:"cmdline"`
	} `xml:"os"`
	Iface struct {
		Type  string `xml:"type,attr"`
		Alias struct {
			Name string `xml:"name,attr"`
		} `xml:"alias"`
	} `xml:"devices>interface"`
	Serial struct {
		Path string `xml:"path,attr"`
	} `xml:"devices>serial>source"`
	Override *struct {
		Alias string `xml:"alias,attr"`
		Prop  struct {
			Name  string `xml:"name,attr"`
			Value string `xml:"value,attr"`
		} `xml:"frontend>property"`
	} `xml:"http://libvirt.org/schemas/domain/qemu/1.0 override>device"`
}

func parseDomain(t *testing.T, x string) domain {
	t.Helper()
	var d domain
	if err := xml.Unmarshal([]byte(x), &d); err != nil {
		t.Fatalf("not XML: %v\n%s", err, x)
	}
	return d
}

// TestDomainXML: the domains parse as XML with every part where libvirt
// looks for it: the guest's kernel and command line, the interface
// among the devices, the console file; for vhost-user, shared memory, the
// interface's alias and QEMU's override of its vectors on that alias.
func TestDomainXML(t *testing.T) {
	img := Image{Kernel: "/cache/vmlinuz", Initrd: "/cache/initrd.img"}
	iface := "<interface type='direct'>\n  <source dev='tfwvm0' mode='bridge'/>\n</interface>"
	d := parseDomain(t, DomainXML("vm1", img, "console=ttyS0 tfw.addr=198.18.5.3/24", iface, "/tmp/c.log"))
	if d.Name != "vm1" || d.OS.Kernel != img.Kernel || d.OS.Initrd != img.Initrd || d.OS.Cmdline != "console=ttyS0 tfw.addr=198.18.5.3/24" ||
		d.Iface.Type != "direct" || d.Serial.Path != "/tmp/c.log" || d.Backing != nil || d.Override != nil {
		t.Errorf("DomainXML: %+v", d)
	}
	mem := "<memoryBacking>\n  <source type='memfd'/>\n  <access mode='shared'/>\n</memoryBacking>"
	vhost := "<interface type='vhostuser'>\n  <source type='unix' path='/run/x.sock' mode='client'/>\n</interface>"
	v := parseDomain(t, VhostDomainXML("vm2", img, "console=ttyS0", vhost, mem, "/tmp/d.log"))
	if v.Name != "vm2" || v.Iface.Type != "vhostuser" || v.Iface.Alias.Name != "ua-net0" || v.Backing == nil ||
		v.Backing.Access.Mode != "shared" || v.Override == nil || v.Override.Alias != "ua-net0" ||
		v.Override.Prop.Name != "vectors" || v.Override.Prop.Value != "0" {
		t.Errorf("VhostDomainXML: %+v", v)
	}
}

// TestVirtioNet: the NIC's MAC, and host_mtu only when the port has an MTU.
func TestVirtioNet(t *testing.T) {
	if got := virtioNet(Port{MAC: "02:00:00:00:00:21"}); got != "virtio-net-pci,netdev=n0,mac=02:00:00:00:00:21" {
		t.Errorf("virtioNet = %q", got)
	}
	if got := virtioNet(Port{MAC: "02:00:00:00:00:21", MTU: 1450}); got != "virtio-net-pci,netdev=n0,mac=02:00:00:00:00:21,host_mtu=1450" {
		t.Errorf("virtioNet with MTU = %q", got)
	}
}
