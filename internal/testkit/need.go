package testkit

import (
	"os/exec"
	"testing"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// NeedRoot skips t when test beds cannot be built here (not root, no
// CAP_NET_ADMIN, no ip command).
func NeedRoot(t testing.TB) {
	t.Helper()
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
}

// NeedTools fails t when one of tools is not on $PATH: the README's test
// command installs them, and a test that needs one must not pass silently.
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (the README's test command installs it): %v", tool, err)
		}
	}
}
