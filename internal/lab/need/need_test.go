package need

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// recorder is a test that records what a guard did to it.
type recorder struct {
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// have is a lookPath that finds only the tools named.
func have(tools ...string) func(string) (string, error) {
	return func(tool string) (string, error) {
		for _, h := range tools {
			if h == tool {
				return "/usr/bin/" + tool, nil
			}
		}
		return "", errors.New("not found")
	}
}

// TestDecide: outside CI a missing tool skips the test, in CI (CI=true) or
// with TAPFWD_REQUIRE_TOOLS=1 it fails it, and a test with its tools runs
// either way.
func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		have []string
		want Verdict
	}{
		{"no CI, tool present", nil, []string{"iperf3"}, Run},
		{"no CI, tool missing", nil, nil, Skip},
		{"CI, tool present", map[string]string{"CI": "true"}, []string{"iperf3"}, Run},
		{"CI, tool missing", map[string]string{"CI": "true"}, nil, Fail},
		{"CI=false, tool missing", map[string]string{"CI": "false"}, nil, Skip},
		{"CI=1, tool missing", map[string]string{"CI": "1"}, nil, Skip},
		{"required outside CI, tool missing", map[string]string{EnvRequire: "1"}, nil, Fail},
		{"required outside CI, tool present", map[string]string{EnvRequire: "1"}, []string{"iperf3"}, Run},
		{"TAPFWD_REQUIRE_TOOLS=0, tool missing", map[string]string{EnvRequire: "0"}, nil, Skip},
	} {
		missing := Missing(have(c.have...), "iperf3")
		if got := Decide(Required(env(c.env)), missing); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAct: the skip and the failure name the missing tools and the Debian
// packages that install them (each package once), and say how to turn the
// skip into a failure; a test with its tools is left alone.
func TestAct(t *testing.T) {
	missing := Missing(have("ping"), "iperf3", "ping", "promtool", "prometheus", "frobnicate")
	if want := []string{"iperf3", "promtool", "prometheus", "frobnicate"}; strings.Join(missing, ",") != strings.Join(want, ",") {
		t.Fatalf("Missing = %v, want %v", missing, want)
	}
	const pkgs = "apt-get install iperf3 prometheus frobnicate "
	var skip recorder
	Act(&skip, false, missing)
	if skip.failed != "" || !strings.Contains(skip.skipped, pkgs) || !strings.Contains(skip.skipped, "TAPFWD_REQUIRE_TOOLS=1") ||
		!strings.HasPrefix(skip.skipped, "skipping: iperf3 and promtool and prometheus and frobnicate not found") {
		t.Errorf("outside CI: skipped %q, failed %q", skip.skipped, skip.failed)
	}
	var fail recorder
	Act(&fail, true, missing)
	if fail.skipped != "" || !strings.Contains(fail.failed, pkgs) {
		t.Errorf("in CI: skipped %q, failed %q", fail.skipped, fail.failed)
	}
	var run recorder
	Act(&run, true, nil)
	if run != (recorder{}) {
		t.Errorf("nothing missing: %+v", run)
	}
}

// TestFound: a tool its own finder cannot find is missing, one it finds
// is not.
func TestFound(t *testing.T) {
	t.Setenv("CI", "true")
	t.Setenv(EnvRequire, "")
	var r recorder
	Found(&r, "dnsmasq", func() (string, error) { return "", errors.New("no dnsmasq") })
	if !strings.Contains(r.failed, "apt-get install dnsmasq-base") {
		t.Errorf("missing dnsmasq in CI: %+v", r)
	}
	r = recorder{}
	Found(&r, "dnsmasq", func() (string, error) { return "/usr/sbin/dnsmasq", nil })
	if r != (recorder{}) {
		t.Errorf("dnsmasq found: %+v", r)
	}
	t.Setenv("CI", "")
	Tools(&r, "tapfwd-no-such-tool")
	if r.failed != "" || !strings.Contains(r.skipped, "tapfwd-no-such-tool not found") {
		t.Errorf("missing tool outside CI: %+v", r)
	}
}

var depsEntry = regexp.MustCompile(`\[([a-z0-9_-]+)\]=([a-z0-9.+-]+)`)

// TestPackagesAsDeps: every tool scripts/deps.sh installs is in Packages
// with the same Debian package, so a skip names what deps.sh would
// install.
func TestPackagesAsDeps(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "../../../scripts/deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := depsEntry.FindAllStringSubmatch(string(raw), -1)
	if len(m) < 10 {
		t.Fatalf("found %d tools in deps.sh: %v", len(m), m)
	}
	for _, e := range m {
		if got := Packages[e[1]]; got != e[2] {
			t.Errorf("Packages[%q] = %q, deps.sh installs %q", e[1], got, e[2])
		}
	}
}
