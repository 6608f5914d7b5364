package tapport

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/tapport/tapporttest"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

func TestHostName(t *testing.T) {
	for tap, want := range map[string]string{
		"lab0":            "lab0h",
		"tfwtap-a1b2c3":   "tfwtap-a1b2c3h",
		"tfwtap-a1b2c3d":  "tfwtap-a1b2c3dh",
		"tfwtap-a1b2c3de": "tfwtap-a1b2c3dh",
	} {
		if got := HostName(tap); got != want || len(got) >= unix.IFNAMSIZ {
			t.Errorf("HostName(%q) = %q, want %q (shorter than IFNAMSIZ)", tap, got, want)
		}
	}
}

// TestLifecycle makes a host port on a TAP that carries the lab address,
// adopts it again, finds it, and removes it: the address moves from the
// TAP to the port, the TAP is quietened while the port is there and gets
// the namespace's defaults back after.
func TestHostLifecycle(t *testing.T) {
	bed, d := tapporttest.LabTAP(t)
	addr := bed.LabAddr
	testkit.BedRun(t, bed, bed.LabNS, "ip", "addr", "add", addr.String(), "dev", d.Name())
	if _, ok, err := FindHost(bed.LabNS, d.Name()); ok || err != nil {
		t.Fatalf("Find before any: ok %v, %v", ok, err)
	}
	p, err := EnsureHost(HostConfig{TAP: d.Name(), Netns: bed.LabNS, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != HostName(d.Name()) || p.Adopted || p.MAC[0]&3 != 2 || p.Addr != addr || p.Netns != bed.LabNS || p.TAP != d.Name() {
		t.Errorf("Ensure = %+v", p)
	}
	link := testkit.BedRun(t, bed, bed.LabNS, "ip", "-d", "-o", "link", "show", "dev", p.Name)
	if !strings.Contains(link, "macvlan mode bridge") || !strings.Contains(link, p.Name+"@"+d.Name()) || !strings.Contains(link, ",UP") {
		t.Errorf("host port in the lab: %s", link)
	}
	if out := testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "addr", "show", "dev", p.Name); !strings.Contains(out, addr.String()) {
		t.Errorf("host port lacks %s: %s", addr, out)
	}
	if out := testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "addr", "show", "dev", d.Name()); out != "" {
		t.Errorf("the TAP still has addresses under its host port: %s", out)
	}
	tapporttest.CheckSettings(t, bed.LabNS, d.Name(), map[string]string{"arp_ignore": "8", "rp_filter": "1", "disable_ipv6": "1"})

	again, err := EnsureHost(HostConfig{TAP: d.Name(), Netns: bed.LabNS, Addr: addr})
	if err != nil || !again.Adopted || again.Index != p.Index || again.MAC.String() != p.MAC.String() {
		t.Errorf("Ensure again = %+v, %v; want %s adopted", again, err, p.Name)
	}
	found, ok, err := FindHost(bed.LabNS, d.Name())
	if err != nil || !ok || found.Index != p.Index || found.MAC.String() != p.MAC.String() {
		t.Errorf("Find = %+v, %v, %v", found, ok, err)
	}
	// A VM port cannot take the host port's MAC.
	if _, err := Add(Config{TAP: d.Name(), Netns: bed.LabNS, MAC: p.MAC}); !errors.Is(err, ErrMACInUse) {
		t.Errorf("a VM port with the host port's MAC: %v", err)
	}

	if err := RemoveHost(p); err != nil {
		t.Fatal(err)
	}
	if err := RemoveHost(p); err != nil {
		t.Errorf("Remove again: %v", err)
	}
	if _, ok, _ := FindHost(bed.LabNS, d.Name()); ok {
		t.Error("Find after Remove found one")
	}
	tapporttest.CheckSettings(t, bed.LabNS, d.Name(), map[string]string{"arp_ignore": "0", "rp_filter": "0", "disable_ipv6": "0"})
}

func TestHostRefuses(t *testing.T) {
	bed, d := tapporttest.LabTAP(t)
	name := HostName(d.Name())
	testkit.BedRun(t, bed, bed.LabNS, "ip", "link", "add", name, "type", "veth", "peer", "name", "tfwhpp0")
	_, err := EnsureHost(HostConfig{TAP: d.Name(), Netns: bed.LabNS})
	if !errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), "a veth device, not a macvlan on "+d.Name()) {
		t.Errorf("name taken by a veth: %v", err)
	}
	testkit.BedRun(t, bed, bed.LabNS, "ip", "link", "del", name)
	if _, err := EnsureHost(HostConfig{TAP: d.Name(), Netns: bed.LabNS, MAC: d.MAC()}); !errors.Is(err, ErrMACInUse) {
		t.Errorf("the TAP's MAC: %v", err)
	}
	if _, err := EnsureHost(HostConfig{TAP: bed.NIC, Netns: bed.FwdNS}); !errors.Is(err, ErrNotTAP) {
		t.Errorf("a veth: %v", err)
	}
	if _, err := EnsureHost(HostConfig{TAP: d.Name(), Netns: bed.LabNS, MAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}}); err == nil {
		t.Error("a multicast MAC was taken")
	}
	// A failed address leaves no port behind: the kernel refuses a
	// multicast one (net/ipv6/addrconf.c: inet6_addr_add).
	bad := netip.MustParsePrefix("ff02::1/64")
	if _, err := EnsureHost(HostConfig{TAP: d.Name(), Netns: bed.LabNS, Addr: bad}); err == nil {
		t.Error("a bad prefix was taken")
	}
	if _, ok, _ := FindHost(bed.LabNS, d.Name()); ok {
		t.Error("a failed Ensure left its port")
	}
}
