package forwarding

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/napi"
)

// TestABMode runs the real tapfwd with the bench's hidden A/B mode, queue
// 1 alone with IFF_NAPI and threaded: the TAP has one NAPI kthread; UDP
// and TCP from the wire reach the lab in arm 0, arm 1 and the delayed arm
// 1, each arm's frames counted on its own queue in /status; the kthread
// runs only while arm 1 writes; SIGTERM ends tapfwd, which logs its
// totals and leaves no TAP and no kthread behind.
func TestABMode(t *testing.T) {
	bed := testkit.ForwarderBed(t, "iperf3")
	path := filepath.Join(t.TempDir(), "ab")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	ctl, err := os.OpenFile(path, os.O_RDWR, 0) // the bench's end, held open
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), "--ab-control", path, "--tap-napi-threaded", "--ab-delay", "2us")
	kthreads, err := napi.Kthreads(bed.LabIf)
	if err != nil || len(kthreads) != 1 {
		t.Fatalf("NAPI kthreads of the TAP: %v, %v; want one, queue 1's\n%s", kthreads, err, fw.Output())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var prev daemon.ABStatus
	for _, arm := range []byte{0, 1, 3} {
		ctl.Write([]byte{arm})
		st := abStatusOf(t, bed)
		for ; st.ControlBytes == prev.ControlBytes; st = abStatusOf(t, bed) {
			time.Sleep(5 * time.Millisecond)
		}
		ran, _ := kernel.SchedStat(kthreads[0])
		u, err := iperf.Run(ctx, bed, iperf.Options{Duration: time.Second, UDP: true, Bitrate: "20M", Len: 1200})
		if err != nil || u.Packets < 500 {
			t.Fatalf("arm %d: UDP wire->lab: %v, %d packets", arm, err, u.Packets)
		}
		if r, err := iperf.Run(ctx, bed, iperf.Options{Duration: time.Second}); err != nil || r.Bytes < 1<<20 {
			t.Fatalf("arm %d: TCP wire->lab: %v, %d bytes", arm, err, r.Bytes)
		}
		after, _ := kernel.SchedStat(kthreads[0])
		ran = after - ran
		st = abStatusOf(t, bed)
		q := int(arm & 1)
		moved := [2]uint64{st.Q0Frames - prev.Q0Frames, st.Q1Frames - prev.Q1Frames}
		t.Logf("arm %d: frames per queue %v, NAPI kthread on CPU %v, delayed %d", arm, moved, ran, st.DelayedFrames-prev.DelayedFrames)
		switch {
		case st.Arm != q || st.Delay != (arm&2 != 0):
			t.Errorf("arm %d: status says arm %d delay %v", arm, st.Arm, st.Delay)
		case moved[q] < uint64(u.Packets)*9/10 || moved[1-q] != 0:
			// UDP may lose a few datagrams on a loaded machine (the
			// NIC's socket full): most, not all, must reach the queue.
			t.Errorf("arm %d: frames per queue %v; want at least %d on queue %d (9 in 10 of the UDP datagrams sent), none on the other", arm, moved, u.Packets*9/10, q)
		case (ran > 0) != (q == 1):
			t.Errorf("arm %d: the NAPI kthread ran %v; want it to run only while queue 1 takes the writes", arm, ran)
		case (st.DelayedFrames > prev.DelayedFrames) != (arm&2 != 0):
			t.Errorf("arm %d: delayed frames %d -> %d", arm, prev.DelayedFrames, st.DelayedFrames)
		}
		prev = st
	}
	if prev.NAPI != [2]bool{false, true} || prev.DelaySeconds != 2e-6 {
		t.Errorf("status %+v", prev)
	}
	if err := syscall.Kill(fw.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.WaitExit(t, fw, 5*time.Second)
	if err := fw.Stop(); err != nil {
		t.Errorf("exit: %v\n%s", err, fw.Output())
	}
	checkABTotals(t, fw.Output(), prev)
	if k, _ := napi.Kthreads(bed.LabIf); len(k) != 0 {
		t.Errorf("NAPI kthreads left: %v", k)
	}
	if out, err := bed.Run(ctx, bed.LabNS, "ip", "link", "show", "dev", bed.LabIf); err == nil {
		t.Errorf("the TAP is still there:\n%s", out)
	}
}

var abTotals = regexp.MustCompile(`msg="ab totals" q0_frames=(\d+) q0_bytes=\d+ q1_frames=(\d+) q1_bytes=\d+ delayed_frames=(\d+)`)

// checkABTotals: the "ab totals" line tapfwd logs at exit has at least
// the frames /status last said.
func checkABTotals(t *testing.T, log string, st daemon.ABStatus) {
	t.Helper()
	m := abTotals.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no ab totals line:\n%s", log)
	}
	for i, want := range []uint64{st.Q0Frames, st.Q1Frames, st.DelayedFrames} {
		if n, _ := strconv.ParseUint(m[i+1], 10, 64); n < want {
			t.Errorf("ab totals %q: field %d is %d, /status said %d", m[0], i, n, want)
		}
	}
}

// abStatusOf is the "ab" object of tapfwd's /status, read with the
// daemon's own schema.
func abStatusOf(t *testing.T, bed *testbed.Bed) daemon.ABStatus {
	t.Helper()
	code, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/status")
	if err != nil || code != 200 {
		t.Fatalf("GET /status: %d %v", code, err)
	}
	var st daemon.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.AB == nil {
		t.Fatalf("/status without ab: %v\n%s", err, body)
	}
	return *st.AB
}
