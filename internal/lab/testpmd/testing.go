package testpmd

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/need"
)

// NeedTest skips t where dpdk-testpmd cannot run: not installed (with
// stdbuf, which Start runs it under), which fails t in CI instead
// (need.Tools), or not root (its memory, its runtime directory).
func NeedTest(t testing.TB) {
	t.Helper()
	need.Found(t, Binary, Find)
	need.Tools(t, "stdbuf")
	if os.Geteuid() != 0 {
		t.Skip("dpdk-testpmd needs root here (its memory, its runtime directory)")
	}
}

// StartTest is Start for a test: it waits up to a minute for the prompt,
// fails t when testpmd does not start, and kills it when t ends.
func StartTest(t testing.TB, c Config) *Process {
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
