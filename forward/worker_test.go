package forward

import (
	"context"
	"slices"
	"testing"
	"time"

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
