package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/testbed"
)

// The test binary doubles as tapfwd-bench: the tests start it (as the
// bench, and as the naive forwarder in a namespace) with
// TAPFWD_BENCH_TEST_MAIN=1, so they exercise the code under test (race
// detector included) without a separate build. tapfwd itself is built
// once, on first use (see tapfwdExe).
func TestMain(m *testing.M) {
	if os.Getenv("TAPFWD_BENCH_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv("TAPFWD_BENCH_TEST_MAIN", "1") // for the children only
	code := m.Run()
	if tapfwdDir != "" {
		os.RemoveAll(tapfwdDir)
	}
	os.Exit(code)
}

var (
	tapfwdOnce sync.Once
	tapfwdDir  string
	tapfwdErr  error
)

// tapfwdExe is a tapfwd binary built from ../tapfwd, with the race
// detector when this test binary has it.
func tapfwdExe(t *testing.T) string {
	t.Helper()
	tapfwdOnce.Do(func() {
		if tapfwdDir, tapfwdErr = os.MkdirTemp("", "tapfwd-bench-test"); tapfwdErr != nil {
			return
		}
		args := []string{"build", "-o", filepath.Join(tapfwdDir, "tapfwd")}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "../tapfwd")...).CombinedOutput()
		if err != nil {
			tapfwdErr = fmt.Errorf("go build ../tapfwd: %v\n%s", err, out)
		}
	})
	if tapfwdErr != nil {
		t.Fatal(tapfwdErr)
	}
	return filepath.Join(tapfwdDir, "tapfwd")
}

// exe is this test binary: tapfwd-bench.
func exe(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (the README's test command installs it): %v", tool, err)
		}
	}
}

// startForwarder builds a Forwarder bed and starts tapfwd on it; both are
// removed when t ends.
func startForwarder(t *testing.T, args ...string) (*testbed.Bed, *testbed.Process) {
	t.Helper()
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fw, err := forwarder.Start(ctx, bed, tapfwdExe(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Stop() })
	return bed, fw
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
	clitest.Check(t, "tapfwd-bench", run, cs)
}

func oneLineError(t *testing.T, name string, cmd *exec.Cmd, want string) {
	t.Helper()
	clitest.OneLineError(t, name, cmd, want)
}

// asNobody runs tapfwd-bench args as user nobody without capabilities and
// checks for a one-line error containing want.
func asNobody(t *testing.T, want string, args ...string) {
	t.Helper()
	clitest.AsNobody(t, "tapfwd-bench", exe(t), want, args...)
}

// TestFindTapfwd checks where the bench looks for tapfwd: --tapfwd, next
// to itself, on $PATH, and the error naming both places.
func TestFindTapfwd(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	self := filepath.Join(dir, "tapfwd-bench")
	for _, p := range []string{self, filepath.Join(other, "tapfwd")} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", t.TempDir())
	_, err := findTapfwd("", self)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "tapfwd")) || !strings.Contains(err.Error(), "$PATH") || strings.Contains(err.Error(), "\n") {
		t.Errorf("no tapfwd anywhere: %v", err)
	}
	t.Setenv("PATH", other)
	if p, err := findTapfwd("", self); err != nil || p != filepath.Join(other, "tapfwd") {
		t.Errorf("on $PATH: %q, %v", p, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tapfwd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := findTapfwd("", self); err != nil || p != filepath.Join(dir, "tapfwd") {
		t.Errorf("next to tapfwd-bench: %q, %v", p, err)
	}
	if p, err := findTapfwd(filepath.Join(other, "tapfwd"), self); err != nil || p != filepath.Join(other, "tapfwd") {
		t.Errorf("--tapfwd: %q, %v", p, err)
	}
	if _, err := findTapfwd(filepath.Join(other, "nothing"), self); err == nil || !strings.HasPrefix(err.Error(), "--tapfwd: ") {
		t.Errorf("--tapfwd missing: %v", err)
	}
	if _, err := findTapfwd(other, self); err == nil || !strings.Contains(err.Error(), "not an executable file") {
		t.Errorf("--tapfwd a directory: %v", err)
	}
}
