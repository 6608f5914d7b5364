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
	if err := Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("building %v test bed: %v", cfg.Mode, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("removing test bed %s: %v", b.ID, err)
		}
	})
	return b
}

// NewHostsForTest builds a two-host bed for t, as NewForTest does a bed:
// it skips t when beds cannot be built here, fails t when building fails,
// and removes the bed when t and its subtests end, also when they fail.
func NewHostsForTest(t TB, cfg HostsConfig) *Hosts {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := NewHosts(ctx, cfg)
	if err != nil {
		t.Fatalf("building %v two-host test bed: %v", cfg.Mode, err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("removing two-host test bed %s: %v", h.ID, err)
		}
	})
	return h
}
