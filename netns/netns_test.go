package netns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCheckName(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "a/b", "/abs"} {
		if CheckName(bad) == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
	if err := CheckName("lab-1"); err != nil {
		t.Errorf("CheckName(lab-1): %v", err)
	}
	if _, err := Open("../x"); err == nil {
		t.Error("Open(../x) did not fail")
	}
}

func TestNotFound(t *testing.T) {
	const name = "tfw-no-such-ns"
	_, err := Open(name)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `network namespace "tfw-no-such-ns" not found`) || !strings.Contains(err.Error(), "ip netns add "+name) {
		t.Errorf("Open(%s) = %v, want ErrNotFound saying how to make it", name, err)
	}
	if err := Do(name, func() error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("Do(%s) = %v, want ErrNotFound", name, err)
	}
	if _, err := Label(name); !errors.Is(err, ErrNotFound) {
		t.Errorf("Label(%s) = %v, want ErrNotFound", name, err)
	}
}

func TestOpErr(t *testing.T) {
	n := &NS{name: "lab"}
	err := n.opErr("set link 3 up", unix.EPERM)
	if !errors.Is(err, ErrNotPermitted) || !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), `set link 3 up in network namespace "lab"`) {
		t.Errorf("opErr(EPERM) = %v", err)
	}
	if err := n.opErr("x", unix.EEXIST); errors.Is(err, ErrNotPermitted) || !errors.Is(err, unix.EEXIST) {
		t.Errorf("opErr(EEXIST) = %v", err)
	}
}

func TestEnterErr(t *testing.T) {
	err := enterErr(`enter network namespace "lab"`, os.NewSyscallError("setns", unix.EPERM))
	if !errors.Is(err, ErrNoEnter) || !errors.Is(err, unix.EPERM) || err.Error() != `enter network namespace "lab": setns: operation not permitted: entering a network namespace needs CAP_SYS_ADMIN (run as root)` {
		t.Errorf("enterErr(EPERM) = %v", err)
	}
	if err := enterErr("x", unix.EINVAL); errors.Is(err, ErrNoEnter) {
		t.Errorf("enterErr(EINVAL) = %v", err)
	}
}

// newNS makes a network namespace for t with ip netns add, removed when t
// ends, and returns its name.
func newNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping privileged test: not root")
	}
	b := make([]byte, 3)
	rand.Read(b)
	name := "tfw-nstest-" + hex.EncodeToString(b)
	ip(t, "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name
}

func ip(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func open(t *testing.T, name string) *NS {
	t.Helper()
	n, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestDo checks that fn runs inside the namespace, and the thread comes
// back.
func TestDo(t *testing.T) {
	name := newNS(t)
	var want, got, self unix.Stat_t
	if err := unix.Stat(Dir+"/"+name, &want); err != nil {
		t.Fatal(err)
	}
	sentinel := errors.New("fn's error")
	err := Do(name, func() error {
		if err := unix.Stat("/proc/thread-self/ns/net", &got); err != nil {
			return err
		}
		return sentinel
	})
	if !errors.Is(err, sentinel) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if got.Ino != want.Ino || got.Dev != want.Dev {
		t.Errorf("fn ran in namespace inode %d, want %d", got.Ino, want.Ino)
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil || self.Ino == want.Ino {
		t.Errorf("the caller is in the namespace: %v", err)
	}
	n := open(t, name)
	if n.Label() != name || n.Name() != name || n.String() != `network namespace "`+name+`"` {
		t.Errorf("label %q name %q string %q", n.Label(), n.Name(), n.String())
	}
	// Label needs no open namespace, and finds the caller's by its name.
	if l, err := Label(name); l != name || err != nil {
		t.Errorf("Label(%s) = %q, %v", name, l, err)
	}
	var inside string
	if err := Do(name, func() error {
		var err error
		inside, err = Label("")
		return err
	}); err != nil || inside != name {
		t.Errorf("Label(\"\") inside %s = %q, %v", name, inside, err)
	}
	if l, err := Label(""); l != open(t, "").Label() || err != nil {
		t.Errorf("Label(\"\") = %q, %v; NS.Label says %q", l, err, open(t, "").Label())
	}
}

// TestLinks drives every link request on a veth and a macvtap in a
// namespace of the test's own, and checks the results with ip.
func TestLinks(t *testing.T) {
	a, b := newNS(t), newNS(t)
	ip(t, "-n", a, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	na, nb := open(t, a), open(t, b)
	l, err := na.Link("d0")
	if err != nil || l.Kind != "veth" || l.Up || l.KindName() != "veth" || l.IsTAP() || l.Loopback {
		t.Fatalf("Link(d0) = %+v, %v", l, err)
	}
	if lo, err := na.Link("lo"); err != nil || !lo.Loopback || lo.KindName() != "loopback" {
		t.Errorf("Link(lo) = %+v, %v; want the loopback", lo, err)
	}
	if _, err := na.Link("nope0"); !errors.Is(err, unix.ENODEV) {
		t.Errorf("Link(nope0) = %v, want ENODEV", err)
	}
	mac := net.HardwareAddr{0x02, 0, 0x5e, 0, 0x53, 0x01}
	if err := na.SetLink(l.Index, LinkChange{MTU: 1400, MAC: mac, Up: true, AllMulti: true}); err != nil {
		t.Fatal(err)
	}
	if err := na.AddAddr(l.Index, netip.MustParsePrefix("198.18.200.1/24")); err != nil {
		t.Fatal(err)
	}
	out := ip(t, "-n", a, "-o", "addr", "show", "dev", "d0") + ip(t, "-n", a, "-o", "link", "show", "dev", "d0")
	for _, want := range []string{"mtu 1400", mac.String(), "198.18.200.1/24 brd 198.18.200.255", "UP", "ALLMULTI"} {
		if !strings.Contains(out, want) {
			t.Errorf("d0 lacks %q:\n%s", want, out)
		}
	}
	if _, err := na.Stats("d0"); err != nil {
		t.Errorf("Stats(d0): %v", err)
	}

	vmac := net.HardwareAddr{0x02, 0, 0x5e, 0, 0x53, 0x02}
	if err := na.NewMacvtap("mv0", l.Index, vmac, 0); err != nil {
		t.Fatal(err)
	}
	if err := na.NewMacvtap("mv0", l.Index, vmac, 0); !errors.Is(err, unix.EEXIST) {
		t.Errorf("a second mv0: %v, want EEXIST", err)
	}
	if names, err := na.Macvtaps("d0"); err != nil || !slices.Equal(names, []string{"mv0"}) {
		t.Errorf("Macvtaps(d0) = %v, %v", names, err)
	}
	links, err := na.Links()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(links, func(l Link) bool { return l.Name == "mv0" })
	if i < 0 || links[i].Kind != "macvtap" || links[i].Parent != l.Index || links[i].MAC.String() != vmac.String() {
		t.Errorf("Links = %+v, want mv0 a macvtap on d0", links)
	}
	if err := na.DelLink(links[i].Index); err != nil {
		t.Fatal(err)
	}
	if err := na.DelLink(links[i].Index); !errors.Is(err, unix.ENODEV) {
		t.Errorf("deleting mv0 again: %v, want ENODEV", err)
	}
	// A chosen index: it is the port's, and a second taker gets EEXIST.
	if err := na.NewMacvtap("mv1", l.Index, vmac, 54321); err != nil {
		t.Fatal(err)
	}
	if got, err := na.Link("mv1"); err != nil || got.Index != 54321 {
		t.Errorf("mv1 = %+v, %v; want index 54321", got, err)
	}
	other := net.HardwareAddr{0x02, 0, 0x5e, 0, 0x53, 0x03}
	if err := na.NewMacvtap("mv2", l.Index, other, 54321); !errors.Is(err, unix.EEXIST) {
		t.Errorf("a second port at index 54321: %v, want EEXIST", err)
	}
	if err := na.DelLink(54321); err != nil {
		t.Fatal(err)
	}

	// Move d0 to b; a second d0 cannot follow it there.
	if err := na.SetLink(l.Index, LinkChange{Netns: nb}); err != nil {
		t.Fatal(err)
	}
	if _, err := nb.Link("d0"); err != nil {
		t.Errorf("d0 not in %s after the move: %v", b, err)
	}
	ip(t, "-n", a, "link", "add", "d0", "type", "veth", "peer", "name", "d2")
	l2, err := na.Link("d0")
	if err != nil {
		t.Fatal(err)
	}
	if err := na.SetLink(l2.Index, LinkChange{Netns: nb}); !errors.Is(err, unix.EEXIST) {
		t.Errorf("moving onto a taken name: %v, want EEXIST", err)
	}
}

// TestSysfs checks that the private mount shows the namespace's devices,
// not those of this process's /sys.
func TestSysfs(t *testing.T) {
	name := newNS(t)
	ip(t, "-n", name, "link", "add", "tfwsysfs0", "type", "veth", "peer", "name", "tfwsysfs1")
	n := open(t, name)
	for _, writable := range []bool{false, true} {
		mnt, err := n.Sysfs(writable)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(mnt, "class/net/tfwsysfs0", &st, 0); err != nil {
			t.Errorf("writable=%v: the namespace's veth is not in its sysfs: %v", writable, err)
		}
		unix.Close(mnt)
	}
	if _, err := os.Stat("/sys/class/net/tfwsysfs0"); err == nil {
		t.Error("the veth shows in this process's /sys")
	}
}

// TestMessagesNameNoPackage: what a user reads of a missing namespace or a
// bad name says what was asked, not which Go package said it (issue 38,
// item 7e).
func TestMessagesNameNoPackage(t *testing.T) {
	_, err1 := Open("tfw-no-such-ns")
	err2 := CheckName("a/b")
	for _, err := range []error{err1, err2} {
		if err == nil || strings.Contains(err.Error(), "netns: ") || !strings.Contains(err.Error(), "network namespace") {
			t.Errorf("%v: want an error about the network namespace that names no package", err)
		}
	}
	if !errors.Is(err1, ErrNotFound) {
		t.Errorf("Open of a missing namespace: %v, want ErrNotFound", err1)
	}
}
