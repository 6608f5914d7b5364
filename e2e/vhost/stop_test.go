package vhost

import (
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// stopBound is how long tapfwd may take to exit after SIGTERM with a
// front-end attached: generous against the 100 to 200 ms it takes (issue
// 38, item 7h).
const stopBound = time.Second

// TestStopWithFrontEnd: tapfwd run with --user (so a janitor removes the
// sockets) and a front-end attached to its vhost-user port exits within
// stopBound of SIGTERM, each of five runs, and its sockets are gone by
// then. It takes the plain build: the race detector makes a process sleep
// a second at exit (GORACE's atexit_sleep_ms), and the janitor's exit
// used to be waited for, so a race build took two.
func TestStopWithFrontEnd(t *testing.T) {
	testkit.NeedRoot(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	dir := filepath.Join(t.TempDir(), "vhost")
	exe := testkit.PlainTapfwd(t)
	var took []time.Duration
	for run := 0; run < 5; run++ {
		fw := testkit.StartOn(t, bed, exe, "--user", "nobody", "--vhost-user", dir, "--vm-ports", "2")
		ports := vhostPorts(t, bed, 2)
		d, err := vhostusertest.Dial(ports[0].Socket, vhostusertest.Config{})
		if err != nil {
			t.Fatal(err)
		}
		d.FillRx()
		waitPortState(t, bed, 0, "running")
		if err := syscall.Kill(fw.Pid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		took = append(took, testkit.WaitExit(t, fw, 5*time.Second))
		d.Close()
		if err := fw.Stop(); err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, fw.Output())
		}
		socketsGone(t, "SIGTERM", dir)
	}
	slices.Sort(took)
	t.Logf("exit after SIGTERM with a front-end attached: %v (median %v)", took, took[len(took)/2])
	if took[len(took)-1] > stopBound {
		t.Errorf("tapfwd took up to %v to exit after SIGTERM with a front-end attached, want at most %v", took[len(took)-1], stopBound)
	}
}
