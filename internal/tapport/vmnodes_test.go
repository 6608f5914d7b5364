package tapport

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tapfwd/tapfwd/internal/tapport/tapporttest"
	"github.com/tapfwd/tapfwd/tap"
	"golang.org/x/sys/unix"
)

func lstat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestOwnerNode: a port added with an owner has its node owned by that
// user and group, mode 0660; without one, root and 0600.
func TestOwnerNode(t *testing.T) {
	_, d := tapporttest.LabTAP(t)
	owned := addForTest(t, Config{TAP: d.Name(), Netns: d.Netns(), Owner: &Owner{UID: 65534, GID: 65534}})
	plain := addForTest(t, Config{TAP: d.Name(), Netns: d.Netns()})
	if st := lstat(t, owned.Dev); st.Uid != 65534 || st.Gid != 65534 || st.Mode&0o777 != 0o660 || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Errorf("owned node %s: uid %d gid %d mode %#o", owned.Dev, st.Uid, st.Gid, st.Mode)
	}
	if st := lstat(t, plain.Dev); st.Uid != 0 || st.Mode&0o777 != 0o600 {
		t.Errorf("plain node %s: uid %d mode %#o", plain.Dev, st.Uid, st.Mode)
	}
}

// TestEnsureAdopts: Ensure keeps the ports a TAP has, makes a missing node
// again, and adds only what is short.
func TestEnsureAdopts(t *testing.T) {
	_, d := tapporttest.LabTAP(t)
	c := Config{TAP: d.Name(), Netns: d.Netns()}
	first, err := AddN(c, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(first[1].Dev); err != nil {
		t.Fatal(err)
	}
	all, added, err := Ensure(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(all) })
	if len(all) != 3 || len(added) != 1 {
		t.Fatalf("Ensure: %d ports, %d added; want 3 and 1", len(all), len(added))
	}
	for _, p := range all {
		if !nodeIs(p.Dev, p.Major, p.Minor) {
			t.Errorf("port %s: node %q is not its device", p.Name, p.Dev)
		}
	}
	if all[0].Name != first[0].Name || all[1].Name != first[1].Name {
		t.Errorf("existing ports not adopted: %s %s, had %s %s", all[0].Name, all[1].Name, first[0].Name, first[1].Name)
	}
}

// TestRemoveNodeRefuses: removal never follows a link and never removes
// something that is not a macvtap node.
func TestRemoveNodeRefuses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping privileged test: not root (it makes " + DevDir + ")")
	}
	if err := devDir(); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(DevDir, "tfwtest-"+filepath.Base(t.TempDir()))
	file, link := base+"-file", base+"-link"
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(file); os.Remove(link) })
	for _, p := range []string{file, link} {
		if err := removeNode(p); !errors.Is(err, ErrNotNode) {
			t.Errorf("removeNode(%s) = %v, want ErrNotNode", p, err)
		}
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if st := lstat(t, "/dev/null"); st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Error("/dev/null is no longer a device")
	}
	if err := removeNode(base + "-missing"); err != nil {
		t.Errorf("removeNode of nothing: %v", err)
	}
}

// devNodes lists the nodes under DevDir with device number dev.
func devNodes(t *testing.T, major, minor uint32) []string {
	t.Helper()
	ents, err := os.ReadDir(DevDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		path := filepath.Join(DevDir, e.Name())
		if nodeIs(path, major, minor) {
			out = append(out, path)
		}
	}
	return out
}

// TestStaleNodeOfLiveLab: lab A's tapfwd dies without removing its port's
// node (its TAP, so its port, goes with the process; its namespace
// stays). Lab B's next port may get A's old minor: A's node must be gone
// by then, so that A's node owner cannot open B's port.
func TestStaleNodeOfLiveLab(t *testing.T) {
	_, a := tapporttest.LabTAP(t)
	pa := addForTest(t, Config{TAP: a.Name(), Netns: a.Netns(), Owner: &Owner{UID: 65534, GID: 65534}})
	a.Close()
	_, b := tapporttest.LabTAP(t)
	// tapfwd run sweeps as it opens its TAP.
	if err := Sweep(b.Netns()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(pa.Dev); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lab B's sweep left lab A's node %s (%v)", pa.Dev, err)
	}
	pb := addForTest(t, Config{TAP: b.Name(), Netns: b.Netns()})
	t.Logf("lab A's port had %d:%d, lab B's has %d:%d", pa.Major, pa.Minor, pb.Major, pb.Minor)
	if got := devNodes(t, pb.Major, pb.Minor); len(got) != 1 || got[0] != pb.Dev {
		t.Errorf("nodes of lab B's port %d:%d: %v, want only %s", pb.Major, pb.Minor, got, pb.Dev)
	}
}

// TestNodeEvictsSameDevice: making a port's node removes every other node
// under DevDir with its device number (one a sweep cannot check: a lab in
// an unnamed namespace), never following a link, and leaving what is not
// a device alone.
func TestNodeEvictsSameDevice(t *testing.T) {
	bed, d := tapporttest.LabTAP(t)
	c := Config{TAP: d.Name(), Netns: d.Netns()}
	p := addForTest(t, c)
	base := filepath.Join(DevDir, "netns-1:tfwst"+bed.ID)
	stale, link, file := base+"n", base+"l", base+"f"
	if err := unix.Mknod(stale, unix.S_IFCHR|0o600, int(unix.Mkdev(p.Major, p.Minor))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p.Dev, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(stale); os.Remove(link); os.Remove(file) })
	// Another owner: Ensure makes the node again.
	c.Owner = &Owner{UID: 65534, GID: 65534}
	all, _, err := Ensure(c, 1)
	if err != nil || len(all) != 1 || all[0].Dev != p.Dev {
		t.Fatalf("Ensure = %+v, %v", all, err)
	}
	if got := devNodes(t, p.Major, p.Minor); len(got) != 1 || got[0] != p.Dev {
		t.Errorf("nodes of %s's device: %v, want only %s", p.Name, got, p.Dev)
	}
	for _, keep := range []string{link, file} {
		if _, err := os.Lstat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
	if !nodeIs(p.Dev, p.Major, p.Minor) || !ownedBy(p.Dev, c.Owner) {
		t.Errorf("%s is not the port's node, owned by 65534", p.Dev)
	}
}

// TestSweepKeepsColonNamespace: a lab in a namespace whose name has a ':'
// keeps its nodes when another lab sweeps (node names are cut at their
// last ':', since interface names have none).
func TestSweepKeepsColonNamespace(t *testing.T) {
	bed, _ := tapporttest.LabTAP(t)
	ns := "tfwc-" + bed.ID + ":1"
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	var d *tap.Device
	err := bed.Do(bed.FwdNS, func() error {
		var err error
		d, err = tap.Open(tap.Config{Name: "tfwc0", Netns: ns})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	p := addForTest(t, Config{TAP: d.Name(), Netns: ns})
	if p.Dev != DevDir+"/"+ns+":"+p.Name {
		t.Errorf("node %s", p.Dev)
	}
	if err := Sweep(bed.LabNS); err != nil {
		t.Fatal(err)
	}
	if !nodeIs(p.Dev, p.Major, p.Minor) {
		t.Errorf("another lab's sweep removed %s", p.Dev)
	}
}
