package daemon

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/tap"
)

// TestRemovedText: what down prints of what it removed, counts in words,
// and a line for each process that held it.
func TestRemovedText(t *testing.T) {
	text := func(r Removed, want string) {
		t.Helper()
		if got := r.Text("lab0", "/run/v"); got != want {
			t.Errorf("%+v: %q, want %q", r, got, want)
		}
	}
	text(Removed{}, "removed TAP lab0")
	text(Removed{VMPorts: 1}, "removed TAP lab0 with its 1 VM port")
	text(Removed{VMPorts: 2, Sockets: 1}, "removed TAP lab0 with its 2 VM ports and 1 vhost-user socket in /run/v")
	text(Removed{Sockets: 3}, "removed TAP lab0 with 3 vhost-user sockets in /run/v")
	text(Removed{VMPorts: 1, InUse: []Holder{{"VM port tfwvm0", 42, "qemu-system-x86"}}},
		"removed TAP lab0 with its 1 VM port\nVM port tfwvm0 was in use by pid 42 (qemu-system-x86): its guest has lost its NIC")
}

// TestDownNamesHolders (issue 38, item 7g): Down removes a persistent TAP
// whose VM port a process still has open, as a guest's QEMU would, and
// names that process; it names none for a port nobody holds.
func TestDownNamesHolders(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	t.Cleanup(func() { tap.Remove(bed.LabIf, bed.LabNS) })
	var held tapport.Port
	for _, hold := range []bool{true, false} {
		err := bed.Do(bed.FwdNS, func() error {
			d, err := tap.Open(tap.Config{Name: bed.LabIf, Netns: bed.LabNS, VnetHdr: tap.On, Persist: true})
			if err == nil {
				err = d.Close()
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if held, err = tapport.Add(tapport.Config{TAP: bed.LabIf, Netns: bed.LabNS}); err != nil {
			t.Fatal(err)
		}
		var f *os.File
		if hold {
			if f, err = os.OpenFile(held.Dev, os.O_RDWR, 0); err != nil {
				t.Fatal(err)
			}
		}
		var r Removed
		err = bed.Do(bed.FwdNS, func() (err error) { r, err = Down(bed.LabIf, bed.LabNS, ""); return err })
		if f != nil {
			f.Close() // a port made next may get its device number
		}
		if err != nil {
			t.Fatal(err)
		}
		me := Holder{"VM port " + held.Name, os.Getpid(), procfs.Comm(os.Getpid())}
		line := fmt.Sprintf("VM port %s was in use by pid %d (%s): its guest has lost its NIC", held.Name, me.Pid, me.Comm)
		if hold && (!slices.Contains(r.InUse, me) || !strings.Contains(r.Text(bed.LabIf, ""), line)) {
			t.Errorf("Down with %s open here: %+v, %q; want this process named", held.Dev, r, r.Text(bed.LabIf, ""))
		}
		if !hold && len(r.InUse) != 0 {
			t.Errorf("Down with %s open nowhere named %+v", held.Dev, r.InUse)
		}
	}
}
