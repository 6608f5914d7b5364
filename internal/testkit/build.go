package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildTapfwd builds tapfwd as make build does (without cgo: a static
// binary whose --user reaches every thread) into a temporary directory of
// t's, for tests outside cmd/tapfwd, whose own test binary doubles as it.
func BuildTapfwd(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tapfwd")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/tapfwd/tapfwd/cmd/tapfwd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build tapfwd: %v\n%s", err, out)
	}
	return bin
}
