package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// tapfwdPkg is the package the tests build and run.
const tapfwdPkg = "github.com/tapfwd/tapfwd/cmd/tapfwd"

// build is one build of tapfwd, made on first use.
type build struct {
	once sync.Once
	path string
	err  error
}

var (
	raceBuild, plainBuild build

	// buildDir holds the builds of this test binary; Main removes it.
	buildDir struct {
		once sync.Once
		path string
		err  error
	}
)

// Tapfwd is the tapfwd binary the end-to-end tests run: built from
// cmd/tapfwd once per test binary, with the race detector when the test
// binary has it, so that the product runs under it too.
func Tapfwd(t testing.TB) string {
	t.Helper()
	var flags []string
	if raceEnabled {
		flags = []string{"-race"}
	}
	return raceBuild.get(t, "tapfwd", flags, nil)
}

// PlainTapfwd is tapfwd built as make build builds it: no race detector,
// no cgo. Tests that time how fast tapfwd exits take it (under the race
// detector an instrumented process needs far more than a second to tear
// itself down after tapfwd's own 53 ms shutdown), and so do the privilege
// tests (a cgo build cannot set per-thread attributes on every thread:
// internal/privdrop).
func PlainTapfwd(t testing.TB) string {
	t.Helper()
	return plainBuild.get(t, "tapfwd-plain", nil, []string{"CGO_ENABLED=0"})
}

// get builds tapfwd as name with flags and env the first time, and fails
// t when that build failed.
func (b *build) get(t testing.TB, name string, flags, env []string) string {
	t.Helper()
	b.once.Do(func() {
		buildDir.once.Do(func() { buildDir.path, buildDir.err = os.MkdirTemp("", "tapfwd-test") })
		if b.err = buildDir.err; b.err != nil {
			return
		}
		b.path = filepath.Join(buildDir.path, name)
		cmd := exec.Command("go", append(append([]string{"build", "-o", b.path}, flags...), tapfwdPkg)...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", tapfwdPkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Main runs the tests of m and then removes the binaries Tapfwd and
// PlainTapfwd built; a TestMain is os.Exit(testkit.Main(m)). Run again by
// WithoutXDPSockets, the test binary installs its filter and execs the
// command instead.
func Main(m *testing.M) int {
	if os.Getenv(noXDPEnv) != "" {
		err := execWithoutXDPSockets(os.Args[1:])
		fmt.Fprintln(os.Stderr, err)
		return 127
	}
	mainRan = true
	code := m.Run()
	if buildDir.path != "" {
		os.RemoveAll(buildDir.path)
	}
	return code
}

// ModuleRoot is the directory of the module's go.mod, above the working
// directory (go test runs a test binary in its package's directory).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal(errors.New("testkit: no go.mod above the working directory"))
		}
		dir = up
	}
}
