package forward

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// idleTimes turns idle shares per CPU into a /proc/stat reading that many
// looks after a zero one.
func idleTimes(looks int, idle ...float64) []procfs.CPUTimes {
	out := make([]procfs.CPUTimes, len(idle))
	for c, i := range idle {
		d := time.Duration(looks) * roamLook
		out[c] = procfs.CPUTimes{Idle: time.Duration(i * float64(d)), System: time.Duration((1 - i) * float64(d))}
	}
	return out
}

// TestRoomier: a CPU is chosen only when the worker's is saturated and it
// idled roamRoom more; the one that idled most wins.
func TestRoomier(t *testing.T) {
	for _, c := range []struct {
		name string
		idle []float64
		home int
		want int
	}{
		{"home saturated, the other idle", []float64{0.02, 0.6}, 0, 1},
		{"home has room", []float64{0.16, 0.9}, 0, -1},
		{"both saturated", []float64{0.01, 0.05}, 0, -1},
		{"the other not roomy enough", []float64{0.05, 0.3}, 0, -1},
		{"the roomiest of three", []float64{0.5, 0.0, 0.9}, 1, 2},
		{"home not among the readings", []float64{0.0, 0.9}, 5, -1},
	} {
		got := roomier(idleTimes(0, make([]float64, len(c.idle))...), idleTimes(1, c.idle...), c.home, []int{0, 1, 2})
		if got != c.want {
			t.Errorf("%s: roomier %v from CPU %d = %d, want %d", c.name, c.idle, c.home, got, c.want)
		}
	}
}

// script is a roamer over a queue of no worker thread, fed CPU readings
// one look at a time; its moves are recorded, not made.
type script struct {
	r     *roamer
	q     *QueueWorker
	now   time.Time
	idle  []float64 // what the next look reads
	moves []int
}

func newScript() *script {
	s := &script{q: &QueueWorker{w: &worker{}}, now: time.Unix(1000, 0)}
	s.r = newRoamer(s.q, []int{0, 1}, slog.New(slog.DiscardHandler))
	sum := make([]procfs.CPUTimes, 2)
	s.r.times = func() ([]procfs.CPUTimes, error) {
		for c, t := range idleTimes(1, s.idle...) {
			sum[c] = procfs.CPUTimes{Idle: sum[c].Idle + t.Idle, System: sum[c].System + t.System}
		}
		return append([]procfs.CPUTimes(nil), sum...), nil
	}
	s.r.move = func(cpu int) error {
		s.moves = append(s.moves, cpu)
		s.q.w.cpuNow.Store(int32(cpu))
		return nil
	}
	return s
}

// look runs n looks with the CPUs idle as given, the queue delivering
// rate bytes per look (in roamBusyFrames frames) or, at 0, idle.
func (s *script) look(t *testing.T, n int, rate uint64, idle ...float64) {
	t.Helper()
	s.idle = idle
	for range n {
		if rate > 0 {
			s.q.Counters.NICToTAP.Tx.Packets.Add(roamBusyFrames)
			s.q.Counters.NICToTAP.Tx.Bytes.Add(rate)
		}
		s.now = s.now.Add(roamLook)
		if err := s.r.look(s.now); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLook: two looks that agree move a busy worker off its saturated
// CPU; an idle queue never moves; a move that pays is kept and the next
// may come roamHold later, one that costs is undone at the check and the
// next waits twice as long.
func TestLook(t *testing.T) {
	s := newScript()
	s.look(t, 2, 1000, 0.0, 0.8) // the first reading has nothing to compare
	if len(s.moves) != 0 {
		t.Fatalf("moved after one look: %v", s.moves)
	}
	s.look(t, 1, 1000, 0.0, 0.8)
	if len(s.moves) != 1 || s.moves[0] != 1 || s.q.Moves() != 1 {
		t.Fatalf("moves %v (%d counted), want [1] after two looks", s.moves, s.q.Moves())
	}
	s.look(t, 20, 1300, 0.0, 0.05) // it pays, and both CPUs are full; then the queue idles
	s.look(t, 20, 0, 0.8, 0.0)
	if len(s.moves) != 1 {
		t.Fatalf("a move that paid was undone, or an idle queue moved: %v", s.moves)
	}
	// The load changes: CPU 1 is now full and CPU 0 has room; the move
	// back loses, is undone at the check, and the next try waits 4 s.
	s.look(t, 3, 1000, 0.8, 0.0)
	if got := s.moves; len(got) != 2 || got[1] != 0 {
		t.Fatalf("moves %v, want a move back to CPU 0", got)
	}
	s.look(t, roamCheck-1, 500, 0.8, 0.0) // the look after the move was the first
	if got := s.moves; len(got) != 3 || got[2] != 1 {
		t.Fatalf("moves %v, want the losing move undone", got)
	}
	undone := s.now
	for len(s.moves) == 3 && s.now.Sub(undone) < time.Minute {
		s.look(t, 1, 1000, 0.8, 0.0)
	}
	if wait := s.now.Sub(undone); wait < 2*roamHold || wait > 2*roamHold+2*roamLook {
		t.Errorf("after an undone move the next came %v later, want %v", wait, 2*roamHold)
	}
}

// flood is a NIC that always has a frame to read and notes which CPU the
// reading thread is pinned to.
type flood struct {
	efd   int
	frame []byte
	cpu   atomic.Int32
}

func (f *flood) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil && set.Count() == 1 {
		for c := range 2 {
			if set.IsSet(c) {
				f.cpu.Store(int32(c))
			}
		}
	}
	sizes[0] = copy(bufs[0][offset:], f.frame)
	return 1, nil
}
func (f *flood) Write(bufs [][]byte, _ int) (int, error) { return len(bufs), nil }
func (f *flood) Fd() int                                 { return f.efd }
func (f *flood) VLAN(int) (uint16, uint16, bool)         { return 0, 0, false }

// TestRoamMovesTheThread: a forwarder whose roamer reads CPU 0 full and
// CPU 1 idle moves its worker's thread to CPU 1 (where the endpoint sees
// it read); with one CPU to roam among it stays.
func TestRoamMovesTheThread(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || !set.IsSet(0) || !set.IsSet(1) {
		t.Skip("needs CPUs 0 and 1")
	}
	for _, c := range []struct {
		roam []int
		want int
	}{{[]int{0, 1}, 1}, {[]int{0}, 0}} {
		efd, err := unix.Eventfd(1, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(efd)
		nic := &flood{efd: efd, frame: make([]byte, hdrLen+60)}
		copy(nic.frame[hdrLen:], []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5})
		nic.cpu.Store(-1)
		f, err := New([]Endpoint{&flood{efd: efd}}, []NIC{nic}, Config{Batch: 1, CPUs: []int{0}, Roam: c.roam})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		looks := 0
		f.roamTimes = func() ([]procfs.CPUTimes, error) { looks++; return idleTimes(looks, 0, 0.9), nil }
		q := f.QueueWorkers()[0]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if len(c.roam) < 2 {
			ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		}
		go func() { // the worker read on CPU 1: done
			for ctx.Err() == nil && (nic.cpu.Load() != 1 || q.CPUNow() != 1) {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
		}()
		err = f.Run(ctx)
		cancel()
		if err != nil || q.CPUNow() != c.want || nic.cpu.Load() != int32(c.want) {
			t.Errorf("roaming %v: worker on CPU %d, read last on CPU %d (%v); want %d", c.roam, q.CPUNow(), nic.cpu.Load(), err, c.want)
		}
	}
}
