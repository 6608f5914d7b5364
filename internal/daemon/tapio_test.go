package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/syncbuf"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// TestTAPIOURing: with --tap-io auto on a kernel that has io_uring for
// TUN (6.4+) the workers batch the TAP's I/O through it, with a GRO
// window: the lab answers both ways, and once the TAP is deleted under
// the ring Run ends with forward.ErrTAPGone, as it does with a system
// call per frame.
func TestTAPIOURing(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	var log syncbuf.Buffer
	c := bedConfig(bed, &log)
	c.Workers.TAPIO, c.Workers.GROWindow = TAPIOAuto, 50*time.Microsecond
	d, err := open(t, bed, c)
	if err != nil {
		t.Fatalf("Open: %v\n%s", err, log.String())
	}
	defer d.Close()
	if !strings.Contains(log.String(), `msg="TAP I/O: batched through io_uring"`) {
		t.Fatalf("the workers' TAP I/O is not io_uring's:\n%s", log.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	if err := bed.WaitLabReachable(ctx, 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	st := d.Status()
	if q := st.Queues[0]; q.NICToTAP.TxPackets == 0 || q.TAPToNIC.TxPackets == 0 {
		t.Errorf("nothing moved through the ring both ways: %+v", q)
	}
	deleteTAP(t, ctx, bed, done, &log)
}

// deleteTAP deletes the bed's TAP under a running daemon, whose Run
// reports to done: Run must end with forward.ErrTAPGone before ctx does.
func deleteTAP(t *testing.T, ctx context.Context, bed *testbed.Bed, done <-chan error, log *syncbuf.Buffer) {
	t.Helper()
	if out, err := bed.Run(ctx, bed.LabNS, "ip", "link", "del", bed.LabIf); err != nil {
		t.Fatalf("ip link del: %v %s", err, out)
	}
	select {
	case err := <-done:
		if !errors.Is(err, forward.ErrTAPGone) {
			t.Errorf("Run after the TAP was deleted: %v, want ErrTAPGone\n%s", err, log.String())
		}
	case <-ctx.Done():
		t.Fatalf("Run did not end after the TAP was deleted\n%s", log.String())
	}
}
