package vhost

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/syncbuf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestGroupKillLeavesJanitor (issue 35): tapfwd with --user and a
// vhost-user port, in a process group of its own as a shell's job is, is
// killed with kill -9 -- -PGID. Its janitor is not in that group, so it
// lives on and removes the socket, which the unprivileged tapfwd could not.
func TestGroupKillLeavesJanitor(t *testing.T) {
	testkit.NeedRoot(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	dir := filepath.Join(t.TempDir(), "vhost") // tapfwd makes it
	cmd := bed.Command(context.Background(), bed.FwdNS, testkit.Tapfwd(t), bed.TapfwdArgs("--user", "nobody", "--vhost-user", dir, "--vm-ports", "1")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid // ip netns exec execs tapfwd in place
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bed.WaitLabReachable(ctx, 10*time.Second); err != nil {
		t.Fatalf("%v; tapfwd said:\n%s", err, out.String())
	}
	vhostPorts(t, bed, 1)
	if !strings.Contains(out.String(), `msg="dropped privileges" user=nobody`) {
		t.Fatalf("tapfwd did not drop privileges:\n%s", out.String())
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	socketsGone(t, "kill -9 -- -PGID of tapfwd's group", dir)
}
