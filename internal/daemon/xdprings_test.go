package daemon

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/metrics"
)

// fakeRing is a socket's counters as xdpRings reads them.
type fakeRing struct {
	queue int
	c     afxdp.Counters
	err   error
}

func (f *fakeRing) Counters() (afxdp.Counters, error) { return f.c, f.err }
func (f *fakeRing) Queue() int                        { return f.queue }

// TestXDPRingsRefused: afxdp's refusals of each queue's socket reach
// metrics.XDPRing beside the kernel's counters; a reattach (retire, then
// new sockets) keeps both, summed per queue; a socket whose kernel read
// fails still reports its own refusals, and the failure is returned.
func TestXDPRingsRefused(t *testing.T) {
	refused := func(n uint64) afxdp.Refused {
		return afxdp.Refused{RXDescs: n, CompAddrs: 2 * n, RingIndex: 3 * n, FillFull: 4 * n, Oversize: 5 * n}
	}
	old := &fakeRing{queue: 0, c: afxdp.Counters{Refused: refused(1), Kernel: unix.XDPStatistics{Rx_dropped: 7, Rx_ring_full: 1}}}
	var r xdpRings
	r.socks = []ringSocket{old}
	got, err := r.read()
	want := metrics.XDPRing{Queue: 0, RxDropped: 7, RxRingFull: 1,
		RefusedRxDescs: 1, RefusedCompletions: 2, RefusedRingIndex: 3, FillRingFull: 4, Oversize: 5}
	if err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("read: %+v, %v; want [%+v]", got, err, want)
	}

	// A reattach: the old socket is retired, closed (its kernel read now
	// fails), and two new ones count from zero.
	r.retire()
	old.err, old.c.Kernel = unix.EBADFD, unix.XDPStatistics{}
	r.socks = []ringSocket{
		&fakeRing{queue: 0, c: afxdp.Counters{Refused: refused(10), Kernel: unix.XDPStatistics{Rx_dropped: 100}}},
		&fakeRing{queue: 1, c: afxdp.Counters{Refused: refused(100)}, err: unix.EBADFD},
	}
	got, err = r.read()
	if err == nil {
		t.Error("read with a failed socket: no error")
	}
	wantAll := []metrics.XDPRing{
		{Queue: 0, RxDropped: 107, RxRingFull: 1, RefusedRxDescs: 11, RefusedCompletions: 22, RefusedRingIndex: 33, FillRingFull: 44, Oversize: 55},
		{Queue: 1, RefusedRxDescs: 100, RefusedCompletions: 200, RefusedRingIndex: 300, FillRingFull: 400, Oversize: 500},
	}
	if len(got) != len(wantAll) {
		t.Fatalf("after the reattach: %+v, want %+v", got, wantAll)
	}
	for i := range wantAll {
		if got[i] != wantAll[i] {
			t.Errorf("after the reattach, queue %d: %+v, want %+v", i, got[i], wantAll[i])
		}
	}
}
