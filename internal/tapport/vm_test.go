package tapport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/tapport/tapporttest"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/netns"
)

func TestNodePath(t *testing.T) {
	if got := nodePath("", "tfwvm0"); got != "/dev/tapfwd/tfwvm0" {
		t.Errorf("initial namespace: %s", got)
	}
	if got := nodePath("lab", "tfwvm0"); got != "/dev/tapfwd/lab:tfwvm0" {
		t.Errorf("named namespace: %s", got)
	}
	for _, tc := range []struct{ file, label, name string }{
		{"tfwvm0", "", "tfwvm0"}, {"lab:tfwvm0", "lab", "tfwvm0"}, {"lab:1:tfwvm0", "lab:1", "tfwvm0"}, {"netns-42:p", "netns-42", "p"},
	} {
		if label, name := parseNode(tc.file); label != tc.label || name != tc.name || filepath.Base(nodePath(label, name)) != tc.file {
			t.Errorf("parseNode(%q) = %q, %q; want %q, %q", tc.file, label, name, tc.label, tc.name)
		}
	}
	for _, bad := range []string{"", "a:b", "a/b", "a b", "0123456789abcdef"} {
		if checkIfName(bad) == nil {
			t.Errorf("checkIfName(%q) accepted it", bad)
		}
	}
}

// checkNode checks p's node against the port's sysfs as seen from its
// namespace (ip netns exec mounts a sysfs there), and opens it.
func checkNode(t *testing.T, bed *testbed.Bed, p Port) {
	t.Helper()
	want := strings.TrimSpace(testkit.BedRun(t, bed, p.Netns, "cat", fmt.Sprintf("/sys/class/net/%s/macvtap/tap%d/dev", p.Name, p.Index)))
	if got := fmt.Sprintf("%d:%d", p.Major, p.Minor); got != want {
		t.Errorf("%s: device %s, its sysfs in %s says %s", p.Name, got, p.Netns, want)
	}
	if !nodeIs(p.Dev, p.Major, p.Minor) {
		t.Errorf("%s: %s is not character device %d:%d", p.Name, p.Dev, p.Major, p.Minor)
	}
	// The node opens the port's queue: TUNGETIFF on a macvtap fd
	// (drivers/net/tap.c: tap_ioctl) reports IFF_TAP|IFF_NO_PI|IFF_VNET_HDR.
	f, err := os.OpenFile(p.Dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open %s: %v", p.Dev, err)
	}
	defer f.Close()
	ifr, _ := unix.NewIfreq("")
	if err := unix.IoctlIfreq(int(f.Fd()), unix.TUNGETIFF, ifr); err != nil {
		t.Fatalf("TUNGETIFF on %s: %v", p.Dev, err)
	}
	if got := ifr.Uint16(); got&(unix.IFF_TAP|unix.IFF_VNET_HDR) != unix.IFF_TAP|unix.IFF_VNET_HDR {
		t.Errorf("%s: TUNGETIFF flags %#x", p.Dev, got)
	}
	if ifr.Name() != p.Name {
		t.Errorf("%s opens %q, want %q", p.Dev, ifr.Name(), p.Name)
	}
}

// addForTest adds a port with c, failing t when it cannot; the port is
// removed when t ends.
func addForTest(t *testing.T, c Config) Port {
	t.Helper()
	p, err := Add(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove([]Port{p}) })
	return p
}

func TestVMPortLifecycle(t *testing.T) {
	bed, d := tapporttest.LabTAP(t)
	mac := net.HardwareAddr{0x02, 0, 0x5e, 0, 0x53, 0x10}
	a := addForTest(t, Config{TAP: d.Name(), Netns: bed.LabNS, Name: "vma" + bed.ID[:4], MAC: mac})
	b := addForTest(t, Config{TAP: d.Name(), Netns: bed.LabNS})
	if a.MAC.String() != mac.String() || a.TAP != d.Name() || a.Netns != bed.LabNS || !a.Up {
		t.Errorf("port a = %+v", a)
	}
	if b.Name != NamePrefix+"0" || b.MAC[0]&3 != 2 || b.Dev != DevDir+"/"+bed.LabNS+":"+b.Name {
		t.Errorf("port b = %+v: want %s0, a random local unicast MAC, a node named after the namespace", b, NamePrefix)
	}
	checkNode(t, bed, a)
	checkNode(t, bed, b)
	mode := testkit.BedRun(t, bed, bed.LabNS, "ip", "-d", "-o", "link", "show", "dev", a.Name)
	if !strings.Contains(mode, "macvtap mode bridge") || !strings.Contains(mode, a.Name+"@"+d.Name()) {
		t.Errorf("port in the lab: %s", mode)
	}

	ports, err := List(bed.LabNS, d.Name())
	first, second := a, b // List sorts by name
	if second.Name < first.Name {
		first, second = second, first
	}
	if err != nil || len(ports) != 2 || ports[0].Name != first.Name || ports[1].Name != second.Name || ports[0].Dev != first.Dev || ports[1].Index != second.Index {
		t.Fatalf("List = %+v, %v; want %s and %s", ports, err, first.Name, second.Name)
	}

	_, err = Add(Config{TAP: d.Name(), Netns: bed.LabNS, MAC: mac})
	if !errors.Is(err, ErrMACInUse) {
		t.Errorf("same MAC again: %v", err)
	}
	_, err = Add(Config{TAP: d.Name(), Netns: bed.LabNS, MAC: d.MAC()})
	if !errors.Is(err, ErrMACInUse) {
		t.Errorf("the TAP's own MAC: %v", err)
	}
	if _, err = Add(Config{TAP: "nope" + bed.ID, Netns: bed.LabNS}); !errors.Is(err, ErrNoTAP) {
		t.Errorf("missing TAP: %v", err)
	}
	if _, err = Add(Config{TAP: bed.NIC, Netns: bed.FwdNS}); !errors.Is(err, ErrNoTAP) || !errors.Is(err, ErrNotTAP) || !strings.Contains(err.Error(), "veth") {
		t.Errorf("a veth as TAP: %v", err)
	}
	_, err = Add(Config{TAP: d.Name(), Netns: bed.LabNS, Name: a.Name})
	var pe *Error
	if !errors.Is(err, ErrNameInUse) || !errors.As(err, &pe) || pe.Netns != bed.LabNS || pe.Name != a.Name {
		t.Errorf("a taken name: %v (%+v)", err, pe)
	}
	if _, err = Add(Config{TAP: d.Name(), Netns: "tfw-none-" + bed.ID}); !errors.Is(err, netns.ErrNotFound) {
		t.Errorf("missing namespace: %v", err)
	}
	if err := Del(bed.LabNS, d.Name()); err == nil || !strings.Contains(err.Error(), "not a vm-port") {
		t.Errorf("Del on the TAP: %v", err)
	}
	if ports, _ := List(bed.LabNS, ""); len(ports) != 2 {
		t.Errorf("failed adds left ports: %+v", ports)
	}

	if err := Del(bed.LabNS, a.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Dev); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after Del: %v", a.Dev, err)
	}
	if err := Del(bed.LabNS, a.Name); !errors.Is(err, ErrNoPort) {
		t.Errorf("second Del: %v", err)
	}

	// A port deleted behind tapfwd's back leaves a stale node; the next
	// list sweeps it.
	testkit.BedRun(t, bed, bed.LabNS, "ip", "link", "del", "dev", b.Name)
	if ports, err := List(bed.LabNS, ""); err != nil || len(ports) != 0 {
		t.Errorf("List after ip link del = %+v, %v", ports, err)
	}
	if _, err := os.Stat(b.Dev); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale %s not swept: %v", b.Dev, err)
	}
}

// TestVMPortsGoWithTAP is the tapfwd run --vm-ports path: the ports go
// with the TAP, Remove then removes their nodes without an error.
func TestVMPortsGoWithTAP(t *testing.T) {
	bed, d := tapporttest.LabTAP(t)
	ports, err := AddN(Config{TAP: d.Name(), Netns: d.Netns()}, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(ports) })
	seen := map[string]bool{}
	for _, p := range ports {
		checkNode(t, bed, p)
		seen[p.MAC.String()] = true
	}
	if len(seen) != 3 {
		t.Errorf("MACs not distinct: %+v", ports)
	}
	d.Close()
	if out := testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "link", "show"); strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("after the TAP closed the lab holds:\n%s", out)
	}
	if err := Remove(ports); err != nil {
		t.Errorf("Remove after the TAP went: %v", err)
	}
	for _, p := range ports {
		if _, err := os.Stat(p.Dev); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p.Dev, err)
		}
	}
}

// TestVMPortNodesPerNamespace puts a port of the same name on TAPs in two
// namespaces, where the ifindex (so the kernel's /dev/tapIFINDEX) may well
// be the same too: each node must open its own port.
func TestVMPortNodesPerNamespace(t *testing.T) {
	var ports []Port
	var beds []*testbed.Bed
	for i := 0; i < 2; i++ {
		bed, d := tapporttest.LabTAP(t)
		beds = append(beds, bed)
		p := addForTest(t, Config{TAP: d.Name(), Netns: bed.LabNS, Name: NamePrefix + "0"})
		ports = append(ports, p)
	}
	t.Logf("ports: %s ifindex %d dev %d:%d; %s ifindex %d dev %d:%d", ports[0].Dev, ports[0].Index, ports[0].Major, ports[0].Minor,
		ports[1].Dev, ports[1].Index, ports[1].Major, ports[1].Minor)
	if ports[0].Dev == ports[1].Dev || ports[0].Minor == ports[1].Minor {
		t.Fatalf("two ports share a node or minor: %+v", ports)
	}
	if ports[0].Index == ports[1].Index || ports[0].Index < indexMin {
		t.Errorf("port indexes %d and %d: want distinct, from %d up", ports[0].Index, ports[1].Index, indexMin)
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	devtmpfs := strings.Contains(string(mounts), " /dev devtmpfs ")
	for i, p := range ports {
		checkNode(t, beds[i], p)
		// libvirt opens /dev/tapINDEX: it must be this port's, not the
		// other namespace's.
		k := kernelNode(p.Index)
		if !fileExists(k) {
			if devtmpfs {
				t.Errorf("%s: no %s on a devtmpfs /dev", p.Name, k)
			}
			continue
		}
		kp := p
		kp.Dev = k
		checkNode(t, beds[i], kp)
	}
}

// TestLister: a Lister made before a port is added lists it, with its
// device node, as List does, and one made on another TAP's name fails
// as List does.
func TestLister(t *testing.T) {
	bed, d := tapporttest.LabTAP(t)
	h, err := netns.Open(bed.LabNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := NewLister(h, d.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if ports, err := l.List(); err != nil || len(ports) != 0 {
		t.Errorf("before any port: %+v, %v", ports, err)
	}
	p := addForTest(t, Config{TAP: d.Name(), Netns: bed.LabNS})
	ports, err := l.List()
	want, _ := List(bed.LabNS, d.Name())
	if err != nil || len(ports) != 1 || len(want) != 1 || ports[0].Name != p.Name || ports[0].Dev != p.Dev || p.Dev == "" ||
		ports[0].Index != p.Index || ports[0].MAC.String() != p.MAC.String() || fmt.Sprint(ports) != fmt.Sprint(want) {
		t.Errorf("Lister.List = %+v, %v; want %+v, as List's %+v", ports, err, p, want)
	}
	other, err := NewLister(h, "nope"+bed.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.List(); !errors.Is(err, ErrNoTAP) {
		t.Errorf("a missing TAP: %v, want ErrNoTAP", err)
	}
}
