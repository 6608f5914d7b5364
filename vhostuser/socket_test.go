package vhostuser_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/vhostuser"
)

// CheckPath and Listen say what is wrong with a path by typed errors, for
// the CLI to turn into advice.
func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	if err := vhostuser.CheckPath(filepath.Join(dir, "ok.sock")); err != nil {
		t.Errorf("a fresh path: %v", err)
	}
	long := filepath.Join(dir, strings.Repeat("x", 100))
	for _, err := range []error{vhostuser.CheckPath(long), listenErr(long)} {
		if !errors.Is(err, vhostuser.ErrPathTooLong) {
			t.Errorf("a path over sun_path: %v", err)
		}
	}
	// The longest path that fits, and one byte more.
	var fits string
	for n := 1; ; n++ {
		p := filepath.Join(dir, strings.Repeat("y", n))
		if vhostuser.CheckPath(p) != nil {
			break
		}
		fits = p
	}
	if p, err := vhostuser.Listen(vhostuser.Config{Path: fits}); err != nil {
		t.Errorf("the longest path CheckPath takes (%d bytes): %v", len(fits), err)
	} else {
		p.Close()
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	for _, p := range []string{file, filepath.Join(dir, "sub")} {
		for _, err := range []error{vhostuser.CheckPath(p), listenErr(p)} {
			if !errors.Is(err, vhostuser.ErrNotSocket) {
				t.Errorf("%s: %v", p, err)
			}
		}
	}
}

func listenErr(path string) error {
	p, err := vhostuser.Listen(vhostuser.Config{Path: path})
	if err == nil {
		p.Close()
	}
	return err
}

// KeepSocket leaves the socket file at Close; RemoveSocketFile removes
// only the socket it names, not one a later Listen put at the path.
func TestKeepSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.sock")
	p, err := vhostuser.Listen(vhostuser.Config{Path: path, KeepSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	old := p.SocketFile()
	if old.Path != path || old.Ino == 0 {
		t.Fatalf("SocketFile %+v", old)
	}
	p.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("KeepSocket: the socket went: %v", err)
	}
	p2, err := vhostuser.Listen(vhostuser.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if err := vhostuser.RemoveSocketFile(old); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("RemoveSocketFile removed the new port's socket: %v", err)
	}
	if err := vhostuser.RemoveSocketFile(p2.SocketFile()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("RemoveSocketFile left its own socket: %v", err)
	}
}

func TestFeatureNames(t *testing.T) {
	got := vhostuser.FeatureNames(1<<vhostuser.FeatureNetCsum | 1<<vhostuser.FeatureNetHostTSO4 | 1<<vhostuser.FeatureVersion1 | 1<<40)
	if want := []string{"csum", "host_tso4", "version_1", "bit40"}; !slices.Equal(got, want) {
		t.Errorf("FeatureNames = %q, want %q", got, want)
	}
	for b := 0; b < 64; b++ {
		if vhostuser.SupportedFeatures&(1<<b) != 0 && strings.HasPrefix(vhostuser.FeatureNames(1 << b)[0], "bit") {
			t.Errorf("supported bit %d has no name", b)
		}
	}
}
