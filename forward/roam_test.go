package forward_test

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
)

// flood is a NIC that always has a frame to read, and reads slowly unless
// the reading thread is pinned to fast: a load that is cheaper to serve
// from one CPU than from the others, as a lab beside its worker is.
type flood struct {
	efd   int
	frame []byte
	fast  int
}

func newFlood(t *testing.T, fast int) *flood {
	efd, err := unix.Eventfd(1, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	wire, lab := net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
	return &flood{efd: efd, frame: append(make([]byte, 10), frame(lab, wire, "load")...), fast: fast}
}

func (f *flood) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil || set.Count() != 1 || !set.IsSet(f.fast) {
		for t0 := time.Now(); time.Since(t0) < 50*time.Microsecond; {
		}
	}
	sizes[0] = copy(bufs[0][offset:], f.frame)
	return 1, nil
}

func (f *flood) Write(bufs [][]byte, offset int) (int, error) { return len(bufs), nil }
func (f *flood) Fd() int                                      { return f.efd }
func (f *flood) VLAN(int) (uint16, uint16, bool)              { return 0, 0, false }

// sink takes every frame and never has one to read.
type sink struct{ efd int }

func (s sink) Read([][]byte, []int, int) (int, error)  { return 0, unix.EAGAIN }
func (s sink) Write(bufs [][]byte, _ int) (int, error) { return len(bufs), nil }
func (s sink) Fd() int                                 { return s.efd }

// roaming runs a forwarder of one queue, pinned to start at CPU start and
// roaming over CPUs 0 and 1, under a load served faster from fast, for
// d; it returns the queue.
func roaming(t *testing.T, start, fast int, roam []int, d time.Duration) *forward.QueueWorker {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || !set.IsSet(0) || !set.IsSet(1) {
		t.Skip("needs CPUs 0 and 1")
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	f, err := forward.New([]forward.Endpoint{sink{efd}}, []forward.NIC{newFlood(t, fast)},
		forward.Config{Batch: 1, CPUs: []int{start}, Roam: roam})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := f.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return f.QueueWorkers()[0]
}

// TestRoamFindsTheFasterCPU: a worker started on the CPU its load is slow
// from moves to the one it is fast from, and stays there.
func TestRoamFindsTheFasterCPU(t *testing.T) {
	q := roaming(t, 0, 1, []int{0, 1}, 2*time.Second)
	if q.CPUNow() != 1 || q.Moves() != 1 {
		t.Fatalf("worker on CPU %d after %d moves; want CPU 1 after 1 (it delivered %d frames)",
			q.CPUNow(), q.Moves(), q.Counters.NICToTAP.Tx.Packets.Load())
	}
}

// TestRoamStaysWhereItIsFast: a worker that starts where its load is fast
// tries the other CPU and comes back.
func TestRoamStaysWhereItIsFast(t *testing.T) {
	q := roaming(t, 1, 1, []int{0, 1}, 2*time.Second)
	if q.CPUNow() != 1 || q.Moves() != 0 {
		t.Fatalf("worker on CPU %d after %d moves; want CPU 1 after none", q.CPUNow(), q.Moves())
	}
}

// TestNoRoamWithOneCPU: without two CPUs to roam among the worker stays
// where it was pinned, however slow it is there.
func TestNoRoamWithOneCPU(t *testing.T) {
	q := roaming(t, 0, 1, []int{0}, time.Second)
	if q.CPUNow() != 0 || q.Moves() != 0 {
		t.Fatalf("worker on CPU %d after %d moves; want CPU 0 after none", q.CPUNow(), q.Moves())
	}
}
