package rootdir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the directories must be root's")
	}
}

// TestEnsureChecks: an existing directory must be root's, a real
// directory, and writable by nobody else.
func TestEnsureChecks(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(dir); err != nil {
		t.Errorf("a root-owned 0755 directory: %v", err)
	}
	os.Chmod(dir, 0o777)
	if err := Ensure(dir); !errors.Is(err, ErrUnsafe) {
		t.Errorf("world-writable: %v, want ErrUnsafe", err)
	}
	os.Chmod(dir, 0o755)
	os.Chown(dir, 65534, 65534)
	if err := Ensure(dir); !errors.Is(err, ErrUnsafe) {
		t.Errorf("owned by nobody: %v, want ErrUnsafe", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink("/tmp", link)
	if err := Ensure(link); !errors.Is(err, ErrUnsafe) {
		t.Errorf("a link: %v, want ErrUnsafe", err)
	}
}

// TestEnsureMakes: a missing directory is made 0755 whatever the umask.
func TestEnsureMakes(t *testing.T) {
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "new")
	old := unix.Umask(0o077)
	err := Ensure(dir)
	unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
		t.Fatalf("made %v, %v; want a 0755 directory", st.Mode(), err)
	}
	if err := Ensure(filepath.Join(t.TempDir(), "no", "such")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("under a missing parent: %v, want ErrNotExist", err)
	}
}

// TestCheckMakesNothing: Check only checks; a missing directory is an
// error, not made.
func TestCheckMakesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	if err := Check(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing directory: %v, want ErrNotExist", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Check made %s", dir)
	}
}
