package testpmd

import (
	"context"
	"testing"
	"time"
)

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
