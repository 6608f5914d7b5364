package daemon

import "testing"

// TestRemovedText: what down prints of what it removed, counts in words.
func TestRemovedText(t *testing.T) {
	for _, tc := range []struct {
		r    Removed
		want string
	}{
		{Removed{}, "removed TAP lab0"},
		{Removed{VMPorts: 1}, "removed TAP lab0 with its 1 VM port"},
		{Removed{VMPorts: 2, Sockets: 1}, "removed TAP lab0 with its 2 VM ports and 1 vhost-user socket in /run/v"},
		{Removed{Sockets: 3}, "removed TAP lab0 with 3 vhost-user sockets in /run/v"},
	} {
		if got := tc.r.Text("lab0", "/run/v"); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.r, got, tc.want)
		}
	}
}
