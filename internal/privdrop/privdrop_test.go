package privdrop

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/need"
)

// The test binary doubles as a child that drops privileges, so the test
// process keeps its own.
func TestMain(m *testing.M) {
	if os.Getenv("PRIVDROP_CHILD") == "1" {
		err := Drop(65534, 65534)
		switch {
		case err == nil:
			os.Stdout.WriteString("dropped\n")
		case errors.Is(err, ErrPartial):
			os.Stdout.WriteString("partial\n")
		default:
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// cgoBuild reports whether this binary links cgo (the race detector needs
// it), where a system call cannot be run on every thread.
func cgoBuild() bool { return allThreads(unix.SYS_GETPID, 0, 0) == unix.ENOTSUP }

// pureExe is this test binary built without cgo, as make build builds
// tapfwd.
func pureExe(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "privdrop.test")
	cmd := exec.Command("go", "test", "-c", "-o", p, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building without cgo: %v\n%s", err, out)
	}
	return p
}

// child runs exe as the dropping child under setpriv with args (its own
// capabilities and ids) and returns what it printed.
func child(t *testing.T, exe string, setpriv ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	need.Tools(t, "setpriv")
	cmd := exec.Command("setpriv", append(setpriv, exe)...)
	cmd.Env = append(os.Environ(), "PRIVDROP_CHILD=1")
	out, _ := cmd.CombinedOutput()
	return strings.TrimSpace(string(out))
}

// TestDropFromRoot: started as root with every capability, the child ends
// with none on any thread (Drop checks every thread and says so).
func TestDropFromRoot(t *testing.T) {
	self, _ := os.Executable()
	want := "dropped"
	if cgoBuild() {
		want = "partial" // ids and held capabilities on every thread, the rest on one
	}
	if got := child(t, self, "--inh-caps=+net_admin,+net_raw"); got != want {
		t.Errorf("drop from root: %s, want %s", got, want)
	}
	if cgoBuild() {
		if got := child(t, pureExe(t), "--inh-caps=+net_admin,+net_raw"); got != "dropped" {
			t.Errorf("drop from root, built without cgo: %s", got)
		}
	}
}

// TestDropFromAmbient: started as another user with ambient capabilities
// (as a service with AmbientCapabilities=), the child keeps none after
// Drop; setuid alone would have kept them all.
func TestDropFromAmbient(t *testing.T) {
	caps := "-all,+net_admin,+net_raw,+setuid,+setgid,+setpcap"
	args := []string{"--reuid=1000", "--regid=1000", "--clear-groups", "--inh-caps=" + caps, "--ambient-caps=" + caps}
	self, _ := os.Executable()
	got := child(t, self, args...)
	if cgoBuild() {
		// Other threads keep what setuid leaves them: Drop must say so
		// rather than claim success.
		if !strings.HasPrefix(got, "error: ") || !strings.Contains(got, "still has") {
			t.Errorf("cgo build: %s, want an error naming what a thread kept", got)
		}
		got = child(t, pureExe(t), args...)
	}
	if got != "dropped" {
		t.Errorf("drop from a user with ambient capabilities: %s", got)
	}
}

func TestRefusesRootGroup(t *testing.T) {
	if err := Drop(65534, 0); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("Drop to gid 0: %v", err)
	}
}
