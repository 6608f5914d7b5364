package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/tapport/tapporttest"
)

// TestHelpOnStdout: --help, -h and help CMD of every command go to stdout
// with status 0, and nothing to stderr.
func TestHelpOnStdout(t *testing.T) {
	var cases []clitest.Case
	for _, c := range append([]string{"", "vm-port", "napi"}, commands...) {
		for _, h := range []string{"--help", "-h"} {
			cases = append(cases, clitest.Case{Args: append(strings.Fields(c), h), Want: "Usage:"})
		}
	}
	cases = append(cases, clitest.Case{Args: []string{"help", "run"}, Want: "Usage: tapfwd run --nic IFACE"},
		clitest.Case{Args: []string{"run", "--nic", "x", "--help"}, Want: "--log-format string"},
		clitest.Case{Args: []string{"vm-port", "add", "-h"}, Want: "--tap-netns string (also --netns)"},
		clitest.Case{Args: []string{"down", "-h"}, Want: "--tap-netns string (also --netns)"},
		clitest.Case{Args: []string{"help"}, Want: "Usage:"},
		clitest.Case{Args: []string{"run", "-h"}, Want: "TAP MTU in bytes"})
	clitest.Check(t, "tapfwd", run, cases)
	var out, errb bytes.Buffer
	if run([]string{"run", "--help"}, &out, &errb); !strings.Contains(out.String(), "--stats-interval duration") || errb.Len() != 0 {
		t.Errorf("run --help: stdout %q, stderr %q", out.String(), errb.String())
	}
}

// TestVersion: tapfwd --version, -V and version say which build this is.
func TestVersion(t *testing.T) {
	clitest.Check(t, "tapfwd", run, []clitest.Case{
		{Args: []string{"--version"}, Want: "tapfwd 0.1.0 (revision "},
		{Args: []string{"-V"}, Want: "(revision "},
		{Args: []string{"version"}, Want: "(revision "},
		{Args: []string{"version", "--json"}, Want: `"go_version"`},
	})
}

// TestUsageErrors: a bad flag or value is one line naming the flag, the
// value and what it wants, pointing at the command's --help, with status
// 2 and no usage text (a bare tapfwd prints its usage); what only the
// machine can refuse is one line with status 1.
func TestUsageErrors(t *testing.T) {
	clitest.Check(t, "tapfwd", run, []clitest.Case{
		{Args: []string{"run", "--nic", "x", "--gro", "false"}, Code: 2, Want: "tapfwd run: --gro false: a true/false flag takes its value after '=': write --gro=false (see tapfwd run --help)"},
		{Args: []string{"run", "--nic", "x", "--stats-interval", "10"}, Code: 2, Want: "--stats-interval 10: want a duration with a unit, e.g. 10s"},
		{Args: []string{"run", "--nic", "x", "--queues", "many"}, Code: 2, Want: "--queues many: want a whole number"},
		{Args: []string{"run", "--nic", "x", "--bogus"}, Code: 2, Want: "tapfwd run: unknown flag --bogus (see tapfwd run --help)"},
		{Args: []string{"run", "--nic"}, Code: 2, Want: "--nic needs a value"},
		{Args: []string{"run"}, Code: 2, Want: "tapfwd run: --nic is required (see tapfwd run --help)"},
		{Args: []string{"run", "--nic", "x", "--tap-mac", "01:00:5e:00:00:01"}, Code: 2, Want: "--tap-mac 01:00:5e:00:00:01: a multicast address"},
		{Args: []string{"run", "--nic", "x", "--tap-mac", "00:00:00:00:00:00"}, Code: 2, Want: "--tap-mac 00:00:00:00:00:00: all zeros"},
		{Args: []string{"run", "--nic", "x", "--tap-addr", "198.18.1.2"}, Code: 2, Want: "--tap-addr 198.18.1.2: want the address with its prefix length, e.g. 198.18.1.2/24"},
		{Args: []string{"run", "--nic", "x", "--queues", "257"}, Code: 2, Want: "--queues 257: want 1 to 256"},
		{Args: []string{"run", "--nic", "x", "--vm-port-owner", "qemu"}, Code: 2, Want: "tapfwd run: --vm-port-owner qemu: owns the VM ports' nodes: it needs VM ports (--vm-ports) (see tapfwd run --help)"},
		{Args: []string{"run", "--nic", "x", "--tap", "lab-with-a-long-name"}, Code: 2, Want: `tapfwd run: --tap: "lab-with-a-long-name" has 20 bytes: an interface name has at most 15 (see tapfwd run --help)`},
		{Args: []string{"frobnicate"}, Code: 2, Want: `tapfwd: unknown command "frobnicate" (see tapfwd --help)`},
		{Args: []string{"vm-port", "add", "--tap", "x", "--netns", "lab", "--mac", "ff:ff:ff:ff:ff:ff"}, Code: 2, Want: "tapfwd vm-port add: --mac ff:ff:ff:ff:ff:ff: a multicast address"},
		{Args: []string{"vm-port", "add", "--tap", "x", "--owner"}, Code: 2, Want: "tapfwd vm-port add: --owner needs a value (see tapfwd vm-port add --help)"},
		{Args: []string{"down", "extra"}, Code: 2, Want: `tapfwd down: unexpected argument "extra" (see tapfwd down --help)`},
		{Args: []string{"napi", "set", "--id", "x"}, Code: 2, Want: "tapfwd napi set: --id x: want a whole number, 0 or more (see tapfwd napi set --help)"},
		{Args: []string{"status", "--json=maybe"}, Code: 2, Want: "tapfwd status: --json maybe: want true or false (see tapfwd status --help)"},
		{Args: nil, Code: 2, Want: "Usage:"},
		{Args: []string{"run", "--nic", "x", "--napi", "maybe"}, Code: 2, Want: "--napi maybe: want auto, on or off"},
		{Args: []string{"run", "--nic", "x", "--cpus", "1-0"}, Code: 2, Want: "bad CPU range"},
		{Args: []string{"run", "--nic", "x", "--tap-mac", "zz"}, Code: 2, Want: "--tap-mac zz: want six hex bytes"},
		{Args: []string{"run", "--nic", "no-such-nic0"}, Code: 1, Want: `NIC "no-such-nic0" not found`},
		{Args: []string{"run", "--nic", "x", "extra"}, Code: 2, Want: `unexpected argument "extra"`},
		{Args: []string{"features", "extra"}, Code: 2, Want: `tapfwd features: unexpected argument "extra" (see tapfwd features --help)`},
	})
}

// TestNoGoInternals: every message these command lines provoke (no device
// made by any: each fails before) is one line in the user's words.
func TestNoGoInternals(t *testing.T) {
	for _, old := range []string{`tapfwd: --tap-addr: netip.ParsePrefix("198.18.1.2"): no '/'`, `tapfwd: NIC "x" not found: route ip+net: no such network interface`,
		"tapfwd: queue 0: pin to CPU 7: sched_setaffinity: invalid argument", `tapfwd: vmport: netns: network namespace "x" not found`,
		`tapfwd: --tap lo: name "lo" is in use in network namespace "lab" (a physical device)`, `invalid value "10" for flag -stats-interval: parse error`, "a\nb"} {
		if clitest.Flaw(old) == "" {
			t.Errorf("the check passes %q", old)
		}
	}
	for _, args := range [][]string{
		{"run", "--nic", "x", "--tap-addr", "198.18.1.2"}, {"run", "--nic", "x", "--tap-addr", "lab"}, {"run", "--nic", "x", "--tap-addr", "198.18.1.2/33"},
		{"run", "--nic", "x", "--queues", "x"}, {"run", "--nic", "x", "--batch", "99999999999999999999"}, {"run", "--nic", "x", "--pprof=yes"},
		{"run", "--nic", "x", "--cpus", "a"}, {"run", "--nic", "x", "--cpus", "0-99999999"}, {"run", "--nic", "x", "--l2-control", "drop", "--l2-control-allow", "zz"},
		{"run", "--nic", "x", "--metrics-addr", "9310"}, {"run", "--nic", "x", "--tap-mtu", "70000"}, {"run", "--nic", "x", "--dhcp", "a-b", "--host-port", "--tap-addr", "198.18.1.2/24"},
		{"run", "--nic", "x", "--tap-gro-flush-timeout", "20"}, {"run", "--nic", "tfw-no-such-nic"}, {"run", "--nic", "x", "--config", "/nonexistent/tapfwd.conf"},
		{"vm-port", "add", "--tap", "x", "--mac", "zz"}, {"vm-port", "list", "--tap-netns", "tfw-no-such-ns"}, {"vm-port", "del", "--name", "tfw-no-such-port"},
		{"down", "--tap", "tfw-no-such-tap"}, {"down", "--tap", "x", "--tap-netns", "../x"}, {"napi", "list", "--dev", "tfw-no-such-dev"},
		{"napi", "set", "--id", "1", "--gro-flush-timeout", "5"}, {"status", "--addr", "127.0.0.1:1"}, {"status", "--addr", "nohost"},
	} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if why := clitest.Flaw(errb.String()); code == 0 || why != "" {
			t.Errorf("tapfwd %q: exit %d, and the message %s:\n%s", args, code, why, errb.String())
		}
	}
}

// TestDownNoTAP: down of a TAP that is not there says so and that it
// removed nothing, pointing at --tap-netns, rather than asking whether
// tapfwd runs (issue 38, item 7c).
func TestDownNoTAP(t *testing.T) {
	clitest.Check(t, "tapfwd", run, []clitest.Case{
		{Args: []string{"down", "--tap", "tfw-no-such-tap"}, Code: 1,
			Want: `tapfwd: no TAP "tfw-no-such-tap" in this network namespace: nothing to remove (no network namespace here has one: tapfwd run --tap tfw-no-such-tap makes it)`},
	})
	var out, errb bytes.Buffer
	if run([]string{"down", "--tap", "tfw-no-such-tap"}, &out, &errb); strings.Contains(errb.String(), "?") {
		t.Errorf("down asks instead of saying: %s", errb.String())
	}
}

// TestTAPElsewhere: a command that looks for a TAP in the wrong namespace
// says where it is, and vm-port list with no ports to show says so
// instead of printing an empty table (issue 38, item 7f).
func TestTAPElsewhere(t *testing.T) {
	bed, d := tapporttest.LabTAP(t)
	there := fmt.Sprintf("(there is one in network namespace %s: pass --tap-netns %s)", bed.LabNS, bed.LabNS)
	clitest.Check(t, "tapfwd", run, []clitest.Case{
		{Args: []string{"vm-port", "list", "--tap", d.Name()}, Code: 1, Want: fmt.Sprintf("tapfwd: no TAP %q in this network namespace %s", d.Name(), there)},
		{Args: []string{"vm-port", "add", "--tap", d.Name(), "--tap-netns", bed.FwdNS}, Code: 1, Want: there},
		{Args: []string{"down", "--tap", d.Name()}, Code: 1, Want: "nothing to remove " + there},
		{Args: []string{"vm-port", "list", "--tap", d.Name(), "--tap-netns", bed.LabNS}, Want: fmt.Sprintf("no VM ports on TAP %s in network namespace %s\n", d.Name(), bed.LabNS)},
		{Args: []string{"vm-port", "list", "--tap-netns", bed.FwdNS}, Want: "no VM ports in network namespace " + bed.FwdNS},
		{Args: []string{"vm-port", "list", "--tap-netns", bed.FwdNS, "--json"}, Want: "[]"},
	})
}

// TestNoGoPackageNames: what failing commands print names none of
// tapfwd's Go packages ("tapfwd: netns: ...": issue 38, item 7e).
func TestNoGoPackageNames(t *testing.T) {
	for _, args := range [][]string{
		{"vm-port", "list", "--netns", "tfw-no-such-ns"}, {"vm-port", "add", "--tap", "x", "--netns", "tfw-no-such-ns"},
		{"vm-port", "del", "--name", "tfw-no-such-port"}, {"down", "--tap", "tfw-no-such-tap"}, {"down", "--tap", "x", "--netns", "a/b"},
		{"run", "--nic", "x", "--tap-netns", "a/b"}, {"run", "--nic", "x", "--host-port", "--tap-addr", "198.18.1.2/24", "--dhcp", "198.18.1.100"},
		{"napi", "list", "--dev", "tfw-no-such-dev"},
	} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if m := clitest.GoPackage.FindString(out.String() + errb.String()); code == 0 || m != "" {
			t.Errorf("tapfwd %q: exit %d, names the Go package %q:\n%s%s", args, code, m, out.String(), errb.String())
		}
	}
}
