package netns

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMacvlanAddrs makes a macvlan on a veth, and adds, lists and removes
// its addresses; ip checks the results.
func TestMacvlanAddrs(t *testing.T) {
	a := newNS(t)
	ip(t, "-n", a, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	n := open(t, a)
	d0, err := n.Link("d0")
	if err != nil {
		t.Fatal(err)
	}
	mac := net.HardwareAddr{0x02, 0, 0x5e, 0, 0x53, 0x10}
	if err := n.NewMacvlan("mvl0", d0.Index, mac); err != nil {
		t.Fatal(err)
	}
	if err := n.NewMacvlan("mvl0", d0.Index, mac); !errors.Is(err, unix.EEXIST) {
		t.Errorf("a second mvl0: %v, want EEXIST", err)
	}
	l, err := n.Link("mvl0")
	if err != nil || l.Kind != "macvlan" || l.Parent != d0.Index || l.MAC.String() != mac.String() {
		t.Fatalf("Link(mvl0) = %+v, %v; want a macvlan on d0", l, err)
	}
	if out := ip(t, "-n", a, "-d", "link", "show", "mvl0"); !strings.Contains(out, "macvlan mode bridge") {
		t.Errorf("mvl0 is not in bridge mode:\n%s", out)
	}
	if err := n.SetLink(l.Index, LinkChange{Up: true}); err != nil {
		t.Fatal(err)
	}
	v4, v6 := netip.MustParsePrefix("198.18.201.2/24"), netip.MustParsePrefix("2001:db8::2/64")
	for _, p := range []netip.Prefix{v4, v6} {
		if err := n.AddAddr(l.Index, p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := n.Addrs(l.Index)
	if err != nil || !slices.Contains(got, v4) || !slices.Contains(got, v6) {
		t.Errorf("Addrs(mvl0) = %v, %v; want %v and %v among them", got, err, v4, v6)
	}
	if other, _ := n.Addrs(d0.Index); slices.Contains(other, v4) {
		t.Errorf("d0 lists mvl0's address: %v", other)
	}
	if err := n.DelAddr(l.Index, v4); err != nil {
		t.Fatal(err)
	}
	if err := n.DelAddr(l.Index, v4); !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Errorf("removing %v again: %v, want EADDRNOTAVAIL", v4, err)
	}
	if out := ip(t, "-n", a, "-o", "addr", "show", "dev", "mvl0"); strings.Contains(out, "198.18.201.2") || !strings.Contains(out, "2001:db8::2/64") {
		t.Errorf("after DelAddr(%v):\n%s", v4, out)
	}
}

// TestDevConf reads and writes per-device IP settings in a namespace and
// checks that the caller's namespace kept its own.
func TestDevConf(t *testing.T) {
	a := newNS(t)
	ip(t, "-n", a, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	n := open(t, a)
	for _, c := range []struct{ version, key, value string }{
		{IPv4, "rp_filter", "1"}, {IPv4, "arp_ignore", "8"}, {IPv6, "disable_ipv6", "1"},
	} {
		if err := n.SetDevConf(c.version, "d0", c.key, c.value); err != nil {
			t.Fatal(err)
		}
		if v, err := n.DevConf(c.version, "d0", c.key); err != nil || v != c.value {
			t.Errorf("%s d0 %s = %q, %v; want %s", c.version, c.key, v, err, c.value)
		}
		out := ip(t, "netns", "exec", a, "cat", "/proc/sys/net/"+c.version+"/conf/d0/"+c.key)
		if strings.TrimSpace(out) != c.value {
			t.Errorf("%s d0 %s reads %q from inside the namespace", c.version, c.key, out)
		}
	}
	if v, err := n.DevConf(IPv4, "default", "arp_ignore"); err != nil || v != "0" {
		t.Errorf("default arp_ignore = %q, %v; want 0 (a fresh namespace)", v, err)
	}
	if _, err := n.DevConf(IPv4, "tfwnope0", "rp_filter"); !errors.Is(err, ErrNoDevConf) {
		t.Errorf("a missing device: %v, want ErrNoDevConf", err)
	}
	for _, bad := range [][3]string{{"ipv5", "d0", "x"}, {IPv4, "../d0", "x"}, {IPv4, "d0", ".."}, {IPv4, "", "x"}} {
		if _, err := n.DevConf(bad[0], bad[1], bad[2]); err == nil || errors.Is(err, ErrNoDevConf) {
			t.Errorf("DevConf%q = %v, want it refused", bad, err)
		}
	}
}
