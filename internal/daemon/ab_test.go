package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/syncbuf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/tap"
)

// fifo makes a FIFO the test holds open for writing, as the bench does.
func fifo(t *testing.T) (string, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ab")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return path, w
}

// TestCheckAB: the control path the A/B mode refuses before anything is
// made, a *Error of PartAB (what it needs of the rest of the Config is
// Validate's, TestValidate).
func TestCheckAB(t *testing.T) {
	path, _ := fifo(t)
	plain := filepath.Join(t.TempDir(), "plain")
	os.WriteFile(plain, nil, 0o600)
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.AB.Control = plain }, "not a FIFO"},
		{func(c *Config) { c.AB.Control = plain + "x" }, "no such file"},
	} {
		c := Config{TAP: tap.Config{Queues: 1}, AB: &AB{Control: path, NAPI: [2]bool{false, true}}}
		tc.change(&c)
		err := (&Daemon{c: c}).checkAB()
		var de *Error
		if tc.want == "" && err != nil || tc.want != "" && (!errors.As(err, &de) || de.Part != PartAB || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v %+v: %v, want %q", c, *c.AB, err, tc.want)
		}
	}
}

// TestAB runs the A/B mode on a bed: queue 1 alone has IFF_NAPI, threaded,
// so the TAP has one NAPI kthread; the lab answers in either arm, /status
// counts the frames of each queue, and deleting the TAP ends Run with
// forward.ErrTAPGone through the epoll fd; with either NIC backend.
func TestAB(t *testing.T) {
	for _, b := range []Backend{BackendPacket, BackendXDP} {
		t.Run(b.String(), func(t *testing.T) { testAB(t, b) })
	}
}

func testAB(t *testing.T, backend Backend) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	var log syncbuf.Buffer
	path, w := fifo(t)
	c := bedConfig(bed, &log)
	c.TAP.NAPISettings.Threaded, c.NIC.Backend = true, backend
	c.AB = &AB{Control: path, NAPI: [2]bool{false, true}, Delay: 10 * time.Microsecond}
	d, err := open(t, bed, c)
	if err != nil {
		t.Fatalf("Open: %v\n%s", err, log.String())
	}
	defer d.Close()
	if f := d.dev.Features(); len(d.dev.Fds()) != 2 || !f.NAPI || len(f.QueueNAPI) != 2 || f.QueueNAPI[0] {
		t.Fatalf("TAP: %d fds, features %+v", len(d.dev.Fds()), f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var prev ABStatus
	for _, arm := range []byte{0, 1, 3} {
		w.Write([]byte{arm})
		for d.Status().AB.ControlBytes < prev.ControlBytes+1 {
			time.Sleep(time.Millisecond)
		}
		if err := bed.WaitLabReachable(ctx, 10*time.Second); err != nil {
			t.Fatalf("arm %d: %v\n%s", arm, err, log.String())
		}
		ab := *d.Status().AB
		moved := [2]uint64{ab.Q0Frames - prev.Q0Frames, ab.Q1Frames - prev.Q1Frames}
		if ab.Arm != int(arm&1) || ab.Delay != (arm&2 != 0) || moved[arm&1] == 0 || moved[1-arm&1] != 0 {
			t.Errorf("arm %d: status %+v, frames moved per queue %v", arm, ab, moved)
		}
		prev = ab
	}
	if prev.DelayedFrames == 0 || prev.DelaySeconds != 10e-6 || prev.NAPI != [2]bool{false, true} {
		t.Errorf("status %+v", prev)
	}
	deleteTAP(t, ctx, bed, done, &log)
	if !strings.Contains(log.String(), `msg="ab totals" q0_frames=`) {
		t.Errorf("no ab totals logged:\n%s", log.String())
	}
}
