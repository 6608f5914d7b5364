package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// The test binary doubles as tapfwd-bench: the tests start it (as the
// bench, and as the naive forwarder in a namespace) with
// TAPFWD_BENCH_TEST_MAIN=1, so they exercise the code under test (race
// detector included) without a separate build. tapfwd itself is built
// once, on first use (testkit.Tapfwd).
func TestMain(m *testing.M) {
	if os.Getenv("TAPFWD_BENCH_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv("TAPFWD_BENCH_TEST_MAIN", "1") // for the children only
	os.Exit(testkit.Main(m))
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

// TestBenchHelpAndVersion: --help, -h and help CMD of every command go to
// stdout with status 0; --version, -V and version say which build this
// is.
func TestBenchHelpAndVersion(t *testing.T) {
	var cases []clitest.Case
	for _, c := range []string{"", "throughput", "latency", "compare", "version"} {
		for _, h := range []string{"--help", "-h"} {
			cases = append(cases, clitest.Case{Args: append(strings.Fields(c), h), Want: "Usage:"})
		}
	}
	cases = append(cases, clitest.Case{Args: []string{"help", "latency"}, Want: "Usage: tapfwd-bench latency"},
		clitest.Case{Args: []string{"--version"}, Want: "tapfwd-bench 0.1.0 (revision "},
		clitest.Case{Args: []string{"-V"}, Want: "(revision "},
		clitest.Case{Args: []string{"version"}, Want: "(revision "},
		clitest.Case{Args: []string{"throughput", "--budget", "10"}, Code: 2, Want: "--budget 10: want a duration with a unit, e.g. 10s"},
		clitest.Case{Args: []string{"latency", "--bogus"}, Code: 2, Want: "tapfwd-bench latency: unknown flag --bogus (see tapfwd-bench latency --help)"})
	clitest.Check(t, "tapfwd-bench", run, cases)
}
