package vhost

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// sparseEnv hands TestHelperSparse the socket it attacks.
const sparseEnv = "TAPFWD_E2E_SPARSE"

// The attack of issue 35, item 2: a 64 GiB memory file, 32,768 frames of
// 65,000 bytes in its holes, each at its own 64 KiB offset past 1 GiB.
const (
	sparseMem    = 64 << 30
	sparseFrames = 32768
)

// TestHelperSparse is the front-end of TestSparseFrontEnd, in a process of
// its own: it posts the frames, prints "taken N: sent away" or "taken N:
// all", and holds its memory file (and so the pages tapfwd faulted in)
// until killed. It does nothing in a normal run.
func TestHelperSparse(t *testing.T) {
	path := os.Getenv(sparseEnv)
	if path == "" {
		t.Skip("runs only as a front-end's child process")
	}
	d, err := vhostusertest.Dial(path, vhostusertest.Config{MemSize: sparseMem})
	if err != nil {
		t.Fatal(err)
	}
	taken, err := d.SendAt(1<<30, 1<<16, 65000, sparseFrames)
	switch {
	case errors.Is(err, vhostusertest.ErrSentAway):
		fmt.Printf("taken %d: sent away\n", taken)
	case err == nil:
		fmt.Printf("taken %d: all\n", taken)
	default:
		t.Fatal(err)
	}
	select {}
}

// TestSparseFrontEnd (issue 35, item 2): a front-end on port 0 of a real
// tapfwd gives a 64 GiB memory file and transmits 32,768 frames of 65,000
// bytes from its holes; tapfwd's reads used to fault them all in, 2 GiB
// of RssShmem charged to tapfwd while the front-end's RSS stayed at 4 MB.
// Now tapfwd's RssShmem grows by less than 256 MiB or the front-end is
// sent away (and turned away when it comes back), while tapfwd and port 1
// go on forwarding.
func TestSparseFrontEnd(t *testing.T) {
	testkit.NeedRoot(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), "--vhost-user", filepath.Join(t.TempDir(), "vhost"), "--vm-ports", "2")
	ports := vhostPorts(t, bed, 2)
	before := statusKB(t, fw.Pid(), "RssShmem")
	cmd, out := vhostusertest.StartHelper(t, "TestHelperSparse", sparseEnv+"="+ports[0].Socket)
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatalf("the front-end ended (%v); tapfwd said:\n%s", lines.Err(), fw.Output())
	}
	outcome := lines.Text()
	grew := statusKB(t, fw.Pid(), "RssShmem") - before
	t.Logf("front-end: %q; tapfwd's RssShmem grew by %d MiB, the front-end's RSS is %d MiB",
		outcome, grew>>10, statusKB(t, cmd.Process.Pid, "VmRSS")>>10)
	sentAway := strings.HasSuffix(outcome, ": sent away")
	if grew >= 256<<10 && !sentAway {
		t.Fatalf("tapfwd's RssShmem grew by %d MiB and the front-end was not sent away", grew>>10)
	}
	if sentAway {
		waitPortState(t, bed, 0, "listening")
		if !strings.Contains(fw.Output(), "vhost-user front-end sent away: the memory of its guest that only this process holds is over") {
			t.Errorf("tapfwd did not say why it sent the front-end away:\n%s", fw.Output())
		}
		if d, err := vhostusertest.Dial(ports[0].Socket, vhostusertest.Config{}); err == nil {
			d.Close()
			t.Error("port 0 served a new front-end although the last one left more than its budget charged to tapfwd")
		}
	}
	mac, err := net.ParseMAC(ports[1].MAC)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, bed, ports[1].Socket, mac)
	testkit.ReachableWithin(t, bed, 5*time.Second)
}

// statusKB reads a "kB" field of /proc/PID/status.
func statusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(l); len(f) == 3 && f[0] == field+":" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
