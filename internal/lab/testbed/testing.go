package testbed

import (
	"context"
	"time"
)

// TB is what NewForTest and NewHostsForTest need of a test: the methods
// of testing.TB they call. Naming them here keeps the testing package out
// of the binaries that link testbed (tapfwd-bench).
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// NewForTest builds a bed for t: it skips t with the reason when beds cannot
// be built here (not root, no CAP_NET_ADMIN, no ip command), fails t when
// building fails, and removes the bed when t and its subtests end, also when
// they fail.
func NewForTest(t TB, cfg Config) *Bed {
	t.Helper()
	return forTest(t, cfg.Mode.String()+" test bed", func(ctx context.Context) (*Bed, error) { return New(ctx, cfg) },
		func(b *Bed) string { return b.ID })
}

// NewReachableForTest is NewForTest for a test that needs the lab to answer
// from the wire first (a baseline bed, Direct or Bridge: nothing forwards
// on the others until the test starts it): it fails t when the lab is not
// reachable within 10 s.
func NewReachableForTest(t TB, cfg Config) *Bed {
	t.Helper()
	b := NewForTest(t, cfg)
	if err := b.WaitLabReachable(context.Background(), 10*time.Second); err != nil {
		t.Fatalf("%v", err)
	}
	return b
}

// NewHostsForTest builds a two-host bed for t, as NewForTest does a bed:
// it skips t when beds cannot be built here, fails t when building fails,
// and removes the bed when t and its subtests end, also when they fail.
func NewHostsForTest(t TB, cfg HostsConfig) *Hosts {
	t.Helper()
	return forTest(t, cfg.Mode.String()+" two-host test bed", func(ctx context.Context) (*Hosts, error) { return NewHosts(ctx, cfg) },
		func(h *Hosts) string { return h.ID })
}

// forTest builds what (a bed, described in t's messages) with build for
// t, as NewForTest says, id naming the built one.
func forTest[B interface{ Close() error }](t TB, what string, build func(context.Context) (B, error), id func(B) string) B {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := build(ctx)
	if err != nil {
		t.Fatalf("building %s: %v", what, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("removing %s %s: %v", what, id(b), err)
		}
	})
	return b
}
