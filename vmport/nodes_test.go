package vmport

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tapfwd/tapfwd/internal/tapport/tapporttest"
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
	owned, err := Add(Config{TAP: d.Name(), Netns: d.Netns(), Owner: &Owner{UID: 65534, GID: 65534}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Add(Config{TAP: d.Name(), Netns: d.Netns()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove([]Port{owned, plain}) })
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
