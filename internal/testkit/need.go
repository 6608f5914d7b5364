package testkit

import (
	"testing"

	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// NeedRoot skips t when test beds cannot be built here (not root, no
// CAP_NET_ADMIN, no ip command).
//
// tools, when given, are what the test runs besides: NeedTools checks
// them once root is there.
func NeedRoot(t testing.TB, tools ...string) {
	t.Helper()
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	if len(tools) > 0 {
		NeedTools(t, tools...)
	}
}

// ForwarderBed skips t as NeedRoot(t, tools...) does, then builds a
// Forwarder bed, removed when t ends.
func ForwarderBed(t testing.TB, tools ...string) *testbed.Bed {
	t.Helper()
	NeedRoot(t, tools...)
	return testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
}

// NeedTools skips t, naming the Debian packages to install, when one of
// tools is not on $PATH; in CI (CI=true) or with TAPFWD_REQUIRE_TOOLS=1 it
// fails t instead, so that a test that needs one cannot pass silently
// where it must run (need.Tools).
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	need.Tools(t, tools...)
}
