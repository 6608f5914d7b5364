package buildinfo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/lab/need"
)

func TestGet(t *testing.T) {
	i := Get()
	if i.GoVersion != runtime.Version() || i.Version != Version {
		t.Errorf("Get() = %+v", i)
	}
	s := Info{Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567", Modified: true, GoVersion: "go1.26"}.String()
	if s != "v1.2.3 (revision 0123456789ab+changes, go1.26)" {
		t.Errorf("String() = %q", s)
	}
	if !strings.Contains(Info{Version: "(devel)"}.String(), "revision unknown") {
		t.Error("no revision")
	}
	for stamped, want := range map[string]Info{
		"d9e41b8":                {Revision: "d9e41b8"},
		"d9e41b8-dirty":          {Revision: "d9e41b8", Modified: true},
		"v0.3-12-gd9e41b8-dirty": {Revision: "v0.3-12-gd9e41b8", Modified: true},
	} {
		if got := get(stamped); got != want {
			t.Errorf("get(%q) = %+v, want %+v", stamped, got, want)
		}
	}
	if s := (Info{Version: "(devel)", Revision: "v0.3-12-gd9e41b8", GoVersion: "go1.26"}).String(); !strings.Contains(s, "revision v0.3-12-gd9e41b8,") {
		t.Errorf("a described revision is cut: %q", s)
	}
}

// TestMakeBuildStamps: make build stamps the revision git describes even
// where GOFLAGS turns Go's own VCS stamping off.
func TestMakeBuildStamps(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	need.Tools(t, "git", "make")
	var stderr strings.Builder
	git := exec.Command("git", "-C", root, "describe", "--always", "--dirty")
	git.Stderr = &stderr
	desc, err := git.Output()
	if err != nil {
		// Such as a checkout another user owns, which git refuses to read
		// (safe.directory): the machine's, not the stamping's.
		msg := fmt.Sprintf("git describe: %v: %s", err, strings.TrimSpace(stderr.String()))
		if need.Required(os.Getenv) {
			t.Fatal(msg)
		}
		t.Skipf("skipping: %s; CI=true or %s=1 makes this a failure", msg, need.EnvRequire)
	}
	stamped := get(strings.TrimSpace(string(desc)))
	want := "(revision " + stamped.Revision + ","
	if stamped.Modified {
		want = "(revision " + stamped.Revision + "+changes,"
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "tapfwd")
	cmd := exec.Command("make", "-C", root, "build", "BIN="+bin, "BENCH_BIN="+filepath.Join(dir, "tapfwd-bench"))
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, b := range []string{bin, filepath.Join(dir, "tapfwd-bench")} {
		out, err := exec.Command(b, "--version").Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s --version: %q, %v; want %q", filepath.Base(b), out, err, want)
		}
	}
}

// TestChangelogVersion: the release the binary reports is the one
// CHANGELOG.md names first (an "## [Unreleased]" heading above it is
// skipped).
func TestChangelogVersion(t *testing.T) {
	b, err := os.ReadFile("../../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindSubmatch(b)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release heading (## [x.y.z] - DATE)")
	}
	if string(m[1]) != Version {
		t.Errorf("CHANGELOG.md's latest release is %s, buildinfo.Version is %s: make them one", m[1], Version)
	}
}
