package testpmd

import (
	"context"
	"os"
	"time"
)

// TB is what NeedForTest and StartForTest need of a test: the methods of
// testing.TB they call, so that the testing package stays out of the
// binaries that link testpmd.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// NeedForTest skips t where dpdk-testpmd cannot run: not installed
// (scripts/deps.sh installs it) or not root (its memory, its runtime
// directory).
func NeedForTest(t TB) {
	t.Helper()
	if _, err := Find(); err != nil {
		t.Skipf("%v: scripts/deps.sh installs it", err)
	}
	if os.Geteuid() != 0 {
		t.Skipf("dpdk-testpmd needs root here (its memory, its runtime directory)")
	}
}

// StartForTest starts testpmd with c for t, within a minute, failing t
// when it does not start; it is killed when t ends.
func StartForTest(t TB, c Config) *Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Start(ctx, c)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(p.Kill)
	return p
}
