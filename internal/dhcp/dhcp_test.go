package dhcp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/need"
)

func TestParseRange(t *testing.T) {
	first, last, err := ParseRange("198.18.1.100-198.18.1.150")
	if err != nil || first != netip.MustParseAddr("198.18.1.100") || last != netip.MustParseAddr("198.18.1.150") {
		t.Errorf("ParseRange = %v %v %v", first, last, err)
	}
	if f, l, err := ParseRange("198.18.1.7-198.18.1.7"); err != nil || f != l {
		t.Errorf("a one-address range: %v %v %v", f, l, err)
	}
	for _, bad := range []string{"", "198.18.1.100", "198.18.1.150-198.18.1.100", "2001:db8::1-2001:db8::9", "a-b", "198.18.1.1-"} {
		if _, _, err := ParseRange(bad); err == nil {
			t.Errorf("ParseRange(%q) accepted it", bad)
		}
	}
}

func TestCheckRange(t *testing.T) {
	host := netip.MustParsePrefix("198.18.1.2/24")
	a := netip.MustParseAddr
	for _, c := range []struct {
		first, last string
		want        string // "" for ok
	}{
		{"198.18.1.100", "198.18.1.150", ""},
		{"198.18.1.3", "198.18.1.254", ""},
		{"198.18.1.0", "198.18.1.9", "network or broadcast"},
		{"198.18.1.200", "198.18.1.255", "network or broadcast"},
		{"198.18.1.1", "198.18.1.9", "host's own address"},
		{"198.18.1.100", "198.18.2.5", "outside the host's subnet 198.18.1.0/24"},
	} {
		err := CheckRange(host, a(c.first), a(c.last))
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckRange(%s-%s) = %v, want %q", c.first, c.last, err, c.want)
		}
	}
	if err := CheckRange(netip.MustParsePrefix("2001:db8::1/64"), a("198.18.1.3"), a("198.18.1.4")); err == nil {
		t.Error("an IPv6 host address was taken")
	}
}

func TestArgs(t *testing.T) {
	c := Config{Interface: "lab0h", First: netip.MustParseAddr("198.18.1.100"), Last: netip.MustParseAddr("198.18.1.150"),
		LeaseFile: LeaseFile("lab", "lab0")}
	got := strings.Join(Args(c), " ")
	want := "--keep-in-foreground --conf-file=/dev/null --port=0 --bind-dynamic --interface=lab0h " +
		"--dhcp-range=198.18.1.100,198.18.1.150 --dhcp-leasefile=/run/tapfwd/dhcp/lab:lab0.leases " +
		"--dhcp-option=3 --dhcp-option=6 --pid-file= --log-facility=-"
	if got != want {
		t.Errorf("Args =\n%s\nwant\n%s", got, want)
	}
	if LeaseFile("", "lab0") != "/run/tapfwd/dhcp/lab0.leases" {
		t.Errorf("LeaseFile in the initial namespace: %s", LeaseFile("", "lab0"))
	}
}

// newNS makes a namespace with a veth d0 (198.18.202.1/24, up) for t.
func newNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping privileged test: not root")
	}
	need.Found(t, "dnsmasq", Find)
	b := make([]byte, 3)
	rand.Read(b)
	name := "tfw-dhcptest-" + hex.EncodeToString(b)
	for _, args := range [][]string{
		{"netns", "add", name},
		{"-n", name, "link", "add", "d0", "type", "veth", "peer", "name", "d1"},
		{"-n", name, "addr", "add", "198.18.202.1/24", "dev", "d0"},
		{"-n", name, "link", "set", "d0", "up"},
		{"-n", name, "link", "set", "d1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
		}
	}
	return name
}

// TestServer starts dnsmasq in a namespace of its own, checks that it
// runs there on the interface, and stops it: the lease file goes, unless
// it is to be kept.
func TestServer(t *testing.T) {
	ns := newNS(t)
	c := Config{Netns: ns, Interface: "d0", First: netip.MustParseAddr("198.18.202.100"), Last: netip.MustParseAddr("198.18.202.110"),
		LeaseFile: LeaseFile(ns, "d0")}
	var mu sync.Mutex
	var lines []string
	s, err := Start(c, func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	if _, err := os.Stat(c.LeaseFile); err != nil {
		t.Errorf("no lease file: %v", err)
	}
	// It runs in the namespace: its sockets are bound to d0 there.
	self, _ := os.Readlink("/proc/self/ns/net")
	if theirs, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(s.Pid()), "ns/net")); err != nil || theirs == self {
		t.Errorf("dnsmasq's network namespace %s, %v; this process's %s", theirs, err, self)
	}
	// It logs its settings just after the line Start waits for.
	wants := []string{"DNS disabled", "DHCP, IP range 198.18.202.100 -- 198.18.202.110", "bound exclusively to interface d0"}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		log := strings.Join(lines, "\n")
		mu.Unlock()
		missing := slices.DeleteFunc(slices.Clone(wants), func(w string) bool { return strings.Contains(log, w) })
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("dnsmasq's log lacks %q:\n%s", missing, log)
			break
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.LeaseFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lease file after Stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("dnsmasq still running after Stop")
	}

	c.KeepLeases = true
	s2, err := Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.LeaseFile); err != nil {
		t.Errorf("kept lease file: %v", err)
	}
	os.Remove(c.LeaseFile)
}

// TestServerFails: a dnsmasq that cannot start is one error with its
// reason.
func TestServerFails(t *testing.T) {
	ns := newNS(t)
	c := Config{Netns: ns, Interface: "d0", First: netip.MustParseAddr("198.18.202.100"), Last: netip.MustParseAddr("198.18.202.110"),
		LeaseFile: filepath.Join(t.TempDir(), "no", "such", "dir.leases")}
	_, err := Start(c, nil)
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "cannot open or create lease file") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Start with an impossible lease file = %v, want ErrStart with dnsmasq's reason on one line", err)
	}
	c.Binary = "/nonexistent/dnsmasq"
	if _, err := Start(c, nil); err == nil {
		t.Error("a missing binary started")
	}
	if _, err := Start(Config{Netns: ns, Interface: "d0"}, nil); err == nil {
		t.Error("a config without a range started")
	}
}

func TestCheckInterface(t *testing.T) {
	for _, ok := range []string{"lab0h", "tfw-a1b2_c3.4h", "ETH0h"} {
		if err := CheckInterface(ok); err != nil {
			t.Errorf("CheckInterface(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "lab,eth0h", "lab*h", "la\\bh", "lab\"h", "lab#h", "l\xffh"} {
		if err := CheckInterface(bad); !errors.Is(err, ErrInterfaceName) {
			t.Errorf("CheckInterface(%q) = %v, want ErrInterfaceName", bad, err)
		}
	}
}

// TestServerRefusesName: dnsmasq reads its interface list split at commas
// (and '*' as a wildcard), so an interface named "d1,d0" would have it
// serve on d0 too: Start refuses the name before starting anything.
func TestServerRefusesName(t *testing.T) {
	ns := newNS(t)
	if out, err := exec.Command("ip", "-n", ns, "link", "add", "d1,d0", "type", "veth", "peer", "name", "dp").CombinedOutput(); err != nil {
		t.Fatalf("ip link add d1,d0: %v: %s", err, out)
	}
	c := Config{Netns: ns, Interface: "d1,d0", First: netip.MustParseAddr("198.18.202.100"), Last: netip.MustParseAddr("198.18.202.110"),
		LeaseFile: filepath.Join(t.TempDir(), "d.leases")}
	s, err := Start(c, nil)
	if s != nil {
		s.Stop()
	}
	if !errors.Is(err, ErrInterfaceName) || !strings.Contains(err.Error(), `"d1,d0"`) {
		t.Errorf("Start on d1,d0 = %v, want ErrInterfaceName naming it", err)
	}
}

// TestLeaseDirs: the lease directories Start makes are removed once empty,
// innermost first; one holding another lab's leases stays, and so does
// one Start found.
func TestLeaseDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping privileged test: the lease directories must be root's, and t.TempDir is this user's")
	}
	base := t.TempDir()
	run, dir := filepath.Join(base, "run"), filepath.Join(base, "run", "dhcp")
	made, err := ensureDirs(run, dir)
	if err != nil || len(made) != 2 {
		t.Fatalf("ensureDirs: %v, made %q", err, made)
	}
	again, err := ensureDirs(run, dir)
	if err != nil || len(again) != 0 {
		t.Errorf("ensureDirs on existing directories: %v, made %q", err, again)
	}
	other := filepath.Join(dir, "other.leases")
	os.WriteFile(other, nil, 0o644)
	removeEmpty(made)
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another lab's lease file went: %v", err)
	}
	os.Remove(other)
	removeEmpty(made)
	if _, err := os.Stat(run); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directories made stay once empty: %v", err)
	}
}
