package vhostuser_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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

// Issue 22, item 7: CheckDir takes a root-owned directory no one else may
// write to, and refuses one that is group- or world-writable, another
// user's, a link or no directory: whoever can write to it can put a
// socket of theirs where QEMU connects.
func TestCheckDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping privileged test: CheckDir takes only root's directories, and t.TempDir is this user's")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	if err := vhostuser.CheckDir(dir); err != nil {
		t.Errorf("a root-owned 0755 directory: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(dir, link)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	for _, c := range []struct {
		name, path string
		mode       os.FileMode
		uid        int
	}{
		{"world-writable", dir, 0o777, 0},
		{"group-writable", dir, 0o775, 0},
		{"sticky and world-writable", dir, 0o1777, 0},
		{"another user's", dir, 0o755, 65534},
		{"a link to a good one", link, 0o755, 0},
		{"a file", file, 0, 0},
	} {
		if c.mode != 0 {
			os.Chmod(dir, c.mode)
			os.Chown(dir, c.uid, c.uid)
		}
		if err := vhostuser.CheckDir(c.path); !errors.Is(err, vhostuser.ErrUnsafeDir) {
			t.Errorf("%s: %v, want ErrUnsafeDir", c.name, err)
		}
	}
	if err := vhostuser.CheckDir(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing directory: %v", err)
	}
	os.Chown(dir, 0, 0)
}

// Issue 22, item 7: in a directory anyone may write to, an attacker
// renames a link to a file of root's over every name that appears there
// but the socket's own, and moves away any directory to put a link in its
// place. Listen never follows a link: after 500 listens the file still
// has its mode (when Listen bound under a temporary name and set its mode
// by path, the attacker had it chmodded within 30 to 230 listens).
func TestListenFollowsNoLink(t *testing.T) {
	dir, err := os.MkdirTemp("", "vhostuser-attacked")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("root's"), 0o600)
	path := filepath.Join(dir, "vm.sock")
	stop := make(chan struct{})
	done := make(chan int)
	go func() { done <- attack(dir, "vm.sock", victim, stop) }()
	const listens = 500
	failed := 0
	for i := range listens {
		p, err := vhostuser.Listen(vhostuser.Config{Path: path, Mode: 0o666})
		if err != nil {
			failed++
			os.Remove(path)
		} else {
			p.Close()
		}
		if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o600 {
			close(stop)
			<-done
			t.Fatalf("listen %d followed a link: the victim has mode %v", i, fi.Mode())
		}
	}
	close(stop)
	swaps := <-done
	t.Logf("%d listens, %d failed, %d swaps by the attacker", listens, failed, swaps)
	if swaps == 0 {
		t.Fatal("the attacker never swapped anything")
	}
}

// attack replaces every entry of dir but keep with a link to victim (a
// directory is moved away first, and removed once empty) until stop, and
// returns how many it replaced.
func attack(dir, keep, victim string, stop chan struct{}) int {
	n := 0
	for {
		select {
		case <-stop:
			return n
		default:
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ",moved") {
				os.Remove(filepath.Join(dir, name)) // once emptied
			}
			if name == keep || strings.HasPrefix(name, ",") {
				continue
			}
			at := filepath.Join(dir, name)
			if e.IsDir() {
				os.Rename(at, filepath.Join(dir, ",moved"+strconv.Itoa(n)))
			}
			tmp := filepath.Join(dir, ",link")
			os.Remove(tmp)
			os.Symlink(victim, tmp)
			if os.Rename(tmp, at) == nil {
				n++
			}
		}
	}
}

// The socket's mode is the one asked for, whatever the umask.
func TestSocketModeIgnoresUmask(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	path := filepath.Join(t.TempDir(), "vm.sock")
	p, err := vhostuser.Listen(vhostuser.Config{Path: path, Mode: 0o660})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Perm() != 0o660 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%v %v, want a socket of mode 0660", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("Listen left %v", entries)
	}
}

// TestMessagesNameNoPackage: what a user reads of a socket path that
// cannot work says what is wrong with it, not which Go package said so
// (issue 38, item 7e).
func TestMessagesNameNoPackage(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	for _, path := range []string{"", "/" + strings.Repeat("p", 200), file} {
		err := vhostuser.CheckPath(path)
		if err == nil || strings.Contains(err.Error(), "vhostuser: ") {
			t.Errorf("CheckPath(%q) = %v, want an error that names no package", path, err)
		}
	}
	if err := vhostuser.CheckPath(file); !errors.Is(err, vhostuser.ErrNotSocket) {
		t.Errorf("CheckPath(a file) = %v, want ErrNotSocket", err)
	}
}
