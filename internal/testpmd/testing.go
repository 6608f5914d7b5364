package testpmd

// The helpers of the tests that run dpdk-testpmd. Only tests link this
// package: were the bench to, these would move out (archtest checks that
// tapfwd-bench links no testing).

import (
	"context"
	"os"
	"testing"
	"time"
)

// NeedForTest skips t where dpdk-testpmd cannot run: not installed
// (scripts/deps.sh installs it) or not root (its memory, its runtime
// directory).
func NeedForTest(t testing.TB) {
	t.Helper()
	if _, err := Find(); err != nil {
		t.Skipf("%v: scripts/deps.sh installs it", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("dpdk-testpmd needs root here (its memory, its runtime directory)")
	}
}

// StartForTest starts testpmd with c for t, within a minute, failing t
// when it does not start; it is killed when t ends.
func StartForTest(t testing.TB, c Config) *Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Start(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}
