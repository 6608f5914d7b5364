package testkit

import (
	"strings"
	"testing"
)

// UnitLine returns the value of the first "key=" line of a systemd unit's
// text; it fails t when the unit has none.
func UnitLine(t testing.TB, unit, key string) string {
	t.Helper()
	for l := range strings.SplitSeq(unit, "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return v
		}
	}
	t.Fatalf("the unit has no %s=", key)
	return ""
}

// SetprivArgs are setpriv's flags for a process as systemd starts a unit's
// service: uid 0, root's implicit capabilities off for good
// (SecureBits=noroot-locked), no new privileges (NoNewPrivileges=yes) and
// exactly caps (CapabilityBoundingSet=, AmbientCapabilities=).
func SetprivArgs(caps []string) []string {
	set := []string{"-all"}
	for _, c := range caps {
		set = append(set, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	list := strings.Join(set, ",")
	return []string{"--reuid=0", "--regid=0", "--clear-groups", "--securebits=+noroot,+noroot_locked", "--no-new-privs",
		"--bounding-set=" + list, "--inh-caps=" + list, "--ambient-caps=" + list}
}
