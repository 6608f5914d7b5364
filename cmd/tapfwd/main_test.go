package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// The test binary doubles as tapfwd: the integration tests start it in a
// namespace with TAPFWD_TEST_MAIN=1, so they exercise the code under test
// (race detector included) without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("TAPFWD_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv("TAPFWD_TEST_MAIN", "1") // for the children only
	code := m.Run()
	if plainPath != "" {
		os.RemoveAll(filepath.Dir(plainPath))
	}
	os.Exit(code)
}

// exe is the tapfwd binary of the end-to-end tests: this test binary.
func exe(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startForwarder builds a Forwarder bed and starts tapfwd (this binary) on
// it with args; both are removed when t ends.
func startForwarder(t testing.TB, args ...string) (*testbed.Bed, *testbed.Process) {
	t.Helper()
	return testkit.StartTapfwd(t, exe(t), args...)
}

func TestCLIUsageErrors(t *testing.T) {
	checkCLI(t, []cliCase{
		{nil, 2, "Usage:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"run"}, 2, "--nic is required"},
		{[]string{"run", "--nic", "x", "--napi", "maybe"}, 2, "--napi maybe: want auto, on or off"},
		{[]string{"run", "--nic", "x", "--queues", "0"}, 2, "--queues 0: want 1 to 256"},
		{[]string{"run", "--nic", "x", "--cpus", "1-0"}, 2, "bad CPU range"},
		{[]string{"run", "--nic", "x", "--tap-addr", "198.18.0.1"}, 2, "--tap-addr"},
		{[]string{"run", "--nic", "x", "--tap-mac", "zz"}, 2, "--tap-mac zz: want six hex bytes"},
		{[]string{"run", "--nic", "no-such-nic0"}, 1, `NIC "no-such-nic0" not found`},
		{[]string{"run", "--nic", "x", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"help"}, 0, ""},
		{[]string{"run", "-h"}, 0, "TAP MTU in bytes"},
	})
}

// cliCase is one command line run in process: its exit status and a
// string its output must contain.
type cliCase struct {
	args []string
	code int
	want string
}

func checkCLI(t *testing.T, cases []cliCase) {
	t.Helper()
	cs := make([]clitest.Case, len(cases))
	for i, c := range cases {
		cs[i] = clitest.Case{Args: c.args, Code: c.code, Want: c.want}
	}
	clitest.Check(t, "tapfwd", run, cs)
}

func oneLineError(t *testing.T, name string, cmd *exec.Cmd, want string) {
	t.Helper()
	clitest.OneLineError(t, name, cmd, want)
}

// asNobody runs tapfwd args as user nobody without capabilities and checks
// for a one-line error containing want.
func asNobody(t *testing.T, want string, args ...string) {
	t.Helper()
	clitest.AsNobody(t, "tapfwd", exe(t), want, args...)
}
