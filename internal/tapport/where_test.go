package tapport

import (
	"slices"
	"testing"

	"github.com/tapfwd/tapfwd/internal/tapport/tapporttest"
)

// TestWhere: a TAP in the lab is found from the caller's namespace and from
// the bed's fwd namespace, not from the lab itself; the lab has VM ports
// only once one is added.
func TestWhere(t *testing.T) {
	bed, d := tapporttest.LabTAP(t)
	if got := Where("", d.Name()); !slices.Equal(got, []string{bed.LabNS}) {
		t.Errorf(`Where("", %s) = %q, want the lab's name alone`, d.Name(), got)
	}
	if got := Where(bed.FwdNS, d.Name()); !slices.Equal(got, []string{bed.LabNS}) {
		t.Errorf("Where(fwd, %s) = %q, want the lab's name alone", d.Name(), got)
	}
	if got := Where(bed.LabNS, d.Name()); len(got) != 0 {
		t.Errorf("Where(lab, %s) = %q, want none: it is there", d.Name(), got)
	}
	if slices.Contains(Where("", ""), bed.LabNS) {
		t.Error("the lab has VM ports before any was added")
	}
	addForTest(t, Config{TAP: d.Name(), Netns: bed.LabNS})
	if !slices.Contains(Where("", ""), bed.LabNS) {
		t.Errorf(`Where("", "") = %q lacks the lab, which has a VM port`, Where("", ""))
	}
}
