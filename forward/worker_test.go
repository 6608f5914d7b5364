package forward

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// running starts f.Run and returns what stops it and says how it ended.
func running(f *Forwarder) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// TestStartedAndStalled: Started closes once every worker runs; a worker
// wedged in a read is reported by Stalled, idle and busy ones are not.
func TestStartedAndStalled(t *testing.T) {
	nics := []*forwardtest.Fake{forwardtest.NewFake(t), forwardtest.NewFake(t)}
	taps := []Endpoint{forwardtest.NewFake(t), forwardtest.NewFake(t)}
	f, err := New(taps, []NIC{nics[0], nics[1]}, Config{Batch: 8, CPUs: []int{-1, -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop := running(f)
	defer func() {
		nics[1].Release()
		stop()
	}()
	select {
	case <-f.Started():
	case <-time.After(2 * time.Second):
		t.Fatal("Started not closed 2 s after Run")
	}
	// Two looks 100 ms apart, after the workers had 100 ms to settle.
	stalled := func() []string {
		time.Sleep(100 * time.Millisecond)
		f.Stalled()
		time.Sleep(100 * time.Millisecond)
		return f.Stalled()
	}
	if s := stalled(); len(s) != 0 {
		t.Errorf("idle workers reported stalled: %v", s)
	}
	nics[1].Hold()
	if s := stalled(); !slices.Equal(s, []string{"queue 1"}) {
		t.Errorf("queue 1 wedged in a read: Stalled = %v, want [queue 1]", s)
	}
	nics[1].Release()
	nics[0].Push(forwardtest.Frame{Data: withHdr(vnethdr.Hdr{}, tcpFrame(t, 60))})
	if s := stalled(); len(s) != 0 {
		t.Errorf("after release: Stalled = %v", s)
	}
}

// waitingNIC is a Fake NIC that waits for its worker (a Waiter): it counts
// the waits and, on the first, reports the stop eventfd ready with no stop
// set, as a Waiter may after an earlier Run's stop.
type waitingNIC struct {
	*forwardtest.Fake
	waits atomic.Int32
}

func (n *waitingNIC) Wait(pfd []unix.PollFd, timeout *unix.Timespec) error {
	if n.waits.Add(1) == 1 {
		pfd[0].Revents = unix.POLLIN
		return nil
	}
	_, err := unix.Ppoll(pfd, timeout, nil)
	return err
}

// TestWaiter: a NIC that is a Waiter does the worker's waiting, a stale
// stop it reports does not end the worker, and frames still flow both
// ways after it.
func TestWaiter(t *testing.T) {
	nic := &waitingNIC{Fake: forwardtest.NewFake(t)}
	tap := forwardtest.NewFake(t)
	f, err := New([]Endpoint{tap}, []NIC{nic}, Config{Batch: 8, CPUs: []int{-1}, TAPVnetHdr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop := running(f)
	frame := withHdr(vnethdr.Hdr{}, tcpFrame(t, 60))
	for deadline := time.Now().Add(time.Second); nic.waits.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	nic.Push(forwardtest.Frame{Data: frame})
	tap.Push(forwardtest.Frame{Data: frame})
	deadline := time.Now().Add(2 * time.Second)
	for (len(tap.Written()) == 0 || len(nic.Written()) == 0) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(tap.Written()) != 1 || len(nic.Written()) != 1 {
		t.Errorf("after a stale stop: %d frames reached the TAP and %d the NIC, want 1 each", len(tap.Written()), len(nic.Written()))
	}
	if w := nic.waits.Load(); w < 3 {
		t.Errorf("the worker waited %d times through the NIC, want the stale stop and at least two more", w)
	}
}
