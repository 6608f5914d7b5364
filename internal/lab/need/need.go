package need

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// EnvRequire is the variable that makes a missing tool fail a test outside
// CI too (set to 1), as `make test` and CI want.
const EnvRequire = "TAPFWD_REQUIRE_TOOLS"

// Packages names the Debian package that installs each tool the tests run,
// as scripts/deps.sh installs them.
var Packages = map[string]string{
	"iperf3":             "iperf3",
	"ip":                 "iproute2",
	"ss":                 "iproute2",
	"ping":               "iputils-ping",
	"curl":               "curl",
	"qemu-system-x86_64": "qemu-system-x86",
	"promtool":           "prometheus",
	"prometheus":         "prometheus",
	"setpriv":            "util-linux",
	"unshare":            "util-linux",
	"ethtool":            "ethtool",
	"systemd-analyze":    "systemd",
	"libvirtd":           "libvirt-daemon",
	"virsh":              "libvirt-clients",
	"dnsmasq":            "dnsmasq-base",
	"dpdk-testpmd":       "dpdk-dev",
	"stdbuf":             "coreutils",
	"git":                "git",
	"make":               "make",
	"ovs-vswitchd":       "openvswitch-switch",
	"ovsdb-server":       "openvswitch-switch",
	"ovsdb-tool":         "openvswitch-switch",
	"ovs-vsctl":          "openvswitch-switch",
	"ovs-appctl":         "openvswitch-switch",
}

// Verdict is what a test does about what it needs.
type Verdict int

// The verdicts: run the test, skip it, fail it.
const (
	Run Verdict = iota
	Skip
	Fail
)

func (v Verdict) String() string {
	switch v {
	case Run:
		return "run"
	case Skip:
		return "skip"
	case Fail:
		return "fail"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Required reports whether a missing tool fails a test in the environment
// getenv reads: in CI (CI=true) or with TAPFWD_REQUIRE_TOOLS=1.
func Required(getenv func(string) string) bool {
	return getenv("CI") == "true" || getenv(EnvRequire) == "1"
}

// Decide is the verdict for a test that misses the tools named in missing
// (none: it runs), required as Required says.
func Decide(required bool, missing []string) Verdict {
	switch {
	case len(missing) == 0:
		return Run
	case required:
		return Fail
	}
	return Skip
}

// Missing returns the tools that lookPath (exec.LookPath) does not find.
func Missing(lookPath func(string) (string, error), tools ...string) []string {
	var out []string
	for _, tool := range tools {
		if _, err := lookPath(tool); err != nil {
			out = append(out, tool)
		}
	}
	return out
}

// Message says which tools are missing and which Debian packages install
// them: "iperf3 and ping not found: apt-get install iperf3 iputils-ping
// (scripts/deps.sh installs what the tests need)".
func Message(missing []string) string {
	var pkgs []string
	for _, tool := range missing {
		p, ok := Packages[tool]
		if !ok {
			p = tool
		}
		if !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	return fmt.Sprintf("%s not found: apt-get install %s (scripts/deps.sh installs what the tests need)",
		strings.Join(missing, " and "), strings.Join(pkgs, " "))
}

// TB is what the guards need of a test: the methods of testing.TB they
// call (naming them keeps the testing package out of what links this).
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Tools skips t, outside CI, or fails it, in CI or with
// TAPFWD_REQUIRE_TOOLS=1, when one of tools is not on $PATH, naming the
// Debian packages to install.
func Tools(t TB, tools ...string) {
	t.Helper()
	Act(t, Required(os.Getenv), Missing(exec.LookPath, tools...))
}

// Act skips or fails t as Decide says for the tools in missing, with
// Message's text.
func Act(t TB, required bool, missing []string) {
	t.Helper()
	switch Decide(required, missing) {
	case Skip:
		t.Skipf("skipping: %s; CI=true or %s=1 makes this a failure", Message(missing), EnvRequire)
	case Fail:
		t.Fatalf("%s: a test that needs it must not pass silently here (CI=true or %s=1)", Message(missing), EnvRequire)
	}
}

// Found is Tools for a tool that find looks up itself (on $PATH and in
// the directories the tool's package installs it to, as dhcp.Find and
// testpmd.Find do): err from find means the tool is missing.
func Found(t TB, tool string, find func() (string, error)) {
	t.Helper()
	var missing []string
	if _, err := find(); err != nil {
		missing = []string{tool}
	}
	Act(t, Required(os.Getenv), missing)
}
