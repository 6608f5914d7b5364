package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/testbed"
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
		{[]string{"run", "--nic", "x", "--napi", "maybe"}, 1, "--napi: want auto, on or off"},
		{[]string{"run", "--nic", "x", "--queues", "0"}, 1, "--queues 0: want 1 to 256"},
		{[]string{"run", "--nic", "x", "--cpus", "1-0"}, 1, "bad CPU range"},
		{[]string{"run", "--nic", "x", "--tap-addr", "198.18.0.1"}, 1, "--tap-addr"},
		{[]string{"run", "--nic", "x", "--tap-mac", "zz"}, 1, "bad MAC"},
		{[]string{"run", "--nic", "no-such-nic0"}, 1, `NIC "no-such-nic0" not found`},
		{[]string{"run", "--nic", "x", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"help"}, 0, ""},
		{[]string{"run", "-h"}, 0, "TAP MTU in bytes"},
	})
}

func TestWorkerCPUs(t *testing.T) {
	cpus, err := workerCPUs([]int{3, 5}, 3)
	if err != nil || cpus[0] != 3 || cpus[1] != 5 || cpus[2] != 3 {
		t.Fatalf("workerCPUs wraps: %v, %v", cpus, err)
	}
	cpus, _ = workerCPUs([]int{}, 2)
	if cpus[0] != -1 || cpus[1] != -1 {
		t.Fatalf("none: %v", cpus)
	}
	cpus, err = workerCPUs(nil, 2)
	if err != nil || len(cpus) != 2 || cpus[0] < 0 {
		t.Fatalf("allowed CPUs: %v, %v", cpus, err)
	}
}

// cliCase is one command line run in process: its exit status and a
// string its output must contain.
type cliCase struct {
	args []string
	code int
	want string
}

// checkCLI runs each case through run and checks the status, the output,
// and that an error (status 1) is one line.
func checkCLI(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code != tc.code {
			t.Errorf("tapfwd %q: exit %d, want %d; stderr: %s", tc.args, code, tc.code, errb.String())
		}
		if !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("tapfwd %q: output lacks %q:\n%s%s", tc.args, tc.want, out.String(), errb.String())
		}
		if code == 1 && strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
			t.Errorf("tapfwd %q: error is not one line:\n%s", tc.args, errb.String())
		}
	}
}

// oneLineError runs cmd and checks that it exits 1 with a one-line message
// containing want.
func oneLineError(t *testing.T, name string, cmd *exec.Cmd, want string) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("%s: %v, want exit status 1\n%s", name, err, out)
	}
	if s := strings.TrimSpace(string(out)); strings.Contains(s, "\n") || !strings.Contains(s, want) {
		t.Errorf("%s: want one line containing %q, got:\n%s", name, want, s)
	}
}

// asNobody runs tapfwd args as user nobody without capabilities (the test
// runs as root) and checks for a one-line error containing want.
func asNobody(t *testing.T, want string, args ...string) {
	t.Helper()
	testkit.NeedTools(t, "setpriv")
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", exe(t)}, args...)...)
	oneLineError(t, "tapfwd "+strings.Join(args, " ")+" as nobody", cmd, want)
}
