package daemon

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestWatchdogStall: the watchdog pings stop while a worker is wedged (a
// read that does not return) and resume when it moves again.
func TestWatchdogStall(t *testing.T) {
	ns := testkit.NewNotifySocket(t)
	nics := []*forwardtest.Fake{forwardtest.NewFake(t), forwardtest.NewFake(t)}
	taps := []forward.Endpoint{forwardtest.NewFake(t), forwardtest.NewFake(t)}
	fw, err := forward.New(taps, []forward.NIC{nics[0], nics[1]}, forward.Config{CPUs: []int{-1, -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()
	defer func() { nics[1].Release(); cancel(); <-done }()
	<-fw.Started()
	n := &notifier{log: slog.New(slog.DiscardHandler), Notify: Notify{Socket: ns.Path, Watchdog: 100 * time.Millisecond}}
	go n.watchdog(ctx, fw.Stalled)

	pings := func() int {
		before := ns.Count("WATCHDOG=1")
		time.Sleep(500 * time.Millisecond)
		return ns.Count("WATCHDOG=1") - before
	}
	if got := pings(); got < 5 {
		t.Errorf("%d pings in 0.5 s with the workers idle (every 50 ms), want at least 5", got)
	}
	nics[1].Hold()
	time.Sleep(150 * time.Millisecond) // a ping may be on its way
	if got := pings(); got != 0 {
		t.Errorf("%d pings in 0.5 s with queue 1 wedged, want none", got)
	}
	nics[1].Release()
	time.Sleep(150 * time.Millisecond)
	if got := pings(); got < 5 {
		t.Errorf("%d pings in 0.5 s after queue 1 moved again, want at least 5", got)
	}
}

func TestWorkerCPUs(t *testing.T) {
	cpus, err := workerCPUs([]int{3, 5}, 3)
	if err != nil || cpus[0] != 3 || cpus[1] != 5 || cpus[2] != 3 {
		t.Fatalf("workerCPUs wraps: %v, %v", cpus, err)
	}
	cpus, _ = workerCPUs([]int{}, 2)
	if cpus[0] != -1 || cpus[1] != -1 {
		t.Fatalf("none: %v", cpus)
	}
	cpus, err = workerCPUs(nil, 2)
	if err != nil || len(cpus) != 2 || cpus[0] < 0 {
		t.Fatalf("allowed CPUs: %v, %v", cpus, err)
	}
}

// TestSplitCPUs: each queue's TAP reader takes the CPU after its queue's
// in the list, wrapping; unpinned queues stay unpinned; none unsplit.
func TestSplitCPUs(t *testing.T) {
	for _, c := range []struct {
		w          Workers
		cpus, want []int
	}{
		{Workers{Split: true, CPUs: []int{0, 1}}, []int{0}, []int{1}},
		{Workers{Split: true, CPUs: []int{1, 0}}, []int{1}, []int{0}},
		{Workers{Split: true, CPUs: []int{2, 4, 6}}, []int{2, 4, 6}, []int{4, 6, 2}},
		{Workers{Split: true, CPUs: []int{3}}, []int{3}, []int{3}},
		{Workers{Split: true, CPUs: []int{}}, []int{-1}, []int{-1}},
		{Workers{CPUs: []int{0, 1}}, []int{0}, nil},
	} {
		if got, err := splitCPUs(c.w, c.cpus); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("splitCPUs(%+v, %v) = %v, %v; want %v", c.w, c.cpus, got, err, c.want)
		}
	}
}
