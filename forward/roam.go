package forward

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Roaming: a queue's worker follows its load.
//
// Which CPU a worker runs on moves its throughput more than most of its
// code does. Beside the application on the TAP side the lab's receive path,
// which with IFF_NAPI runs inside the worker's TAP write, shares a cache
// with the reader it wakes, and a TAP write wakes a worker that needs no
// IPI; on another CPU both pay. Which CPU that is depends on where the load
// runs, which tapfwd cannot know and which may change. So a roaming worker
// finds out by trying: while it moves frames, the roamer now and then moves
// it to another of its CPUs for one window and compares what it delivered
// there with what it delivered at home just before and just after (A-B-A,
// so that a load that rises or falls does not pass for a better CPU). A
// candidate that beats both home windows by roamMargin becomes home. The
// worker's loop is not touched: the roamer sets the thread's affinity from
// outside, reading the queue's counters, and sleeps while the queue idles.
const (
	// roamWindow is one measuring window.
	roamWindow = 100 * time.Millisecond
	// roamSettle passes after each move before a window starts: the frames
	// queued during the move drain in it and are not counted.
	roamSettle = 10 * time.Millisecond
	// roamMargin is how much more a candidate must deliver than home.
	roamMargin = 0.05
	// roamFirst is the wait after a try before the next; each try that
	// keeps home doubles it, up to roamLast; a move, or load after idle,
	// starts it again.
	roamFirst = time.Second
	roamLast  = 8 * time.Second
	// roamIdlePoll is how often an idle queue is looked at, and
	// roamBusyFrames how many frames per roamIdlePoll make it busy.
	roamIdlePoll   = 250 * time.Millisecond
	roamBusyFrames = 500
)

// roamer moves one queue's worker among cpus to follow its load.
type roamer struct {
	q    *QueueWorker
	cpus []int // where it may go, home among them
	home int   // index into cpus
	next int   // the next candidate to try, index into cpus
	wait time.Duration
	// stop ends the roamer; done is closed when it has.
	stop chan struct{}
	done chan struct{}
}

// delivered is what the queue has delivered so far, both ways, in frames
// and bytes: the roamer compares bytes, and calls a queue busy by frames.
func (q *QueueWorker) delivered() (frames, bytes uint64) {
	c := &q.Counters
	frames = c.NICToTAP.Tx.Packets.Load() + c.TAPToNIC.Tx.Packets.Load()
	bytes = c.NICToTAP.Tx.Bytes.Load() + c.TAPToNIC.Tx.Bytes.Load()
	return frames, bytes
}

// CPUNow is the CPU the queue's worker is pinned to now (-1: not pinned):
// CPU, unless the worker roams (Config.Roam).
func (q *QueueWorker) CPUNow() int { return int(q.w.cpuNow.Load()) }

// Moves counts the times the queue's worker moved to another CPU to follow
// its load (Config.Roam), tries not counted.
func (q *QueueWorker) Moves() uint64 { return q.moves.Load() }

func newRoamer(q *QueueWorker, cpus []int) *roamer {
	r := &roamer{q: q, cpus: cpus, wait: roamFirst}
	for i, c := range cpus {
		if c == q.CPU {
			r.home = i
		}
	}
	r.next = (r.home + 1) % len(cpus)
	return r
}

// run roams until stop is closed: it waits for load, tries a candidate,
// and waits before the next try, longer each time home holds.
func (r *roamer) run() {
	defer close(r.done)
	t := time.NewTimer(0)
	defer t.Stop()
	sleep := func(d time.Duration) bool {
		t.Reset(d)
		select {
		case <-r.stop:
			return false
		case <-t.C:
			return true
		}
	}
	if !sleep(roamSettle) { // the worker records its thread as it starts
		return
	}
	for {
		if !r.awaitLoad(sleep) {
			return
		}
		if r.q.w.tid.Load() == 0 {
			continue
		}
		moved, ok := r.try(sleep)
		if !ok {
			return
		}
		if moved {
			r.wait = roamFirst
		} else {
			r.wait = min(2*r.wait, roamLast)
		}
		if !sleep(r.wait) {
			return
		}
	}
}

// awaitLoad returns once the queue moves roamBusyFrames in a roamIdlePoll;
// if it had to wait, the next try's wait starts again at roamFirst. false:
// stopped.
func (r *roamer) awaitLoad(sleep func(time.Duration) bool) bool {
	for idle := false; ; idle = true {
		f0, _ := r.q.delivered()
		if !sleep(roamIdlePoll) {
			return false
		}
		if f1, _ := r.q.delivered(); f1-f0 >= roamBusyFrames {
			if idle {
				r.wait = roamFirst
			}
			return true
		}
	}
}

// try measures home, the next candidate and home again, one window each,
// and keeps the candidate if it delivered more than both home windows by
// roamMargin. It reports whether the worker moved; false ok: stopped, or
// the worker's thread is gone.
func (r *roamer) try(sleep func(time.Duration) bool) (moved, ok bool) {
	home, cand := r.cpus[r.home], r.cpus[r.next]
	r.next = (r.next + 1) % len(r.cpus)
	if r.next == r.home {
		r.next = (r.next + 1) % len(r.cpus)
	}
	var rates [3]uint64
	for i, cpu := range [3]int{home, cand, home} {
		if i > 0 {
			if r.pin(cpu) != nil {
				return false, false
			}
			if !sleep(roamSettle) {
				return false, false
			}
		}
		_, b0 := r.q.delivered()
		if !sleep(roamWindow) {
			return false, false
		}
		_, b1 := r.q.delivered()
		rates[i] = b1 - b0
	}
	if float64(rates[1]) <= (1+roamMargin)*float64(max(rates[0], rates[2])) {
		return false, true
	}
	if r.pin(cand) != nil {
		return false, false
	}
	for i, c := range r.cpus {
		if c == cand {
			r.home = i
		}
	}
	r.q.moves.Add(1)
	return true, true
}

// pin moves the worker's thread to cpu. A thread that is gone (the worker
// ended) fails with ESRCH, which ends the roamer.
func (r *roamer) pin(cpu int) error {
	tid := int(r.q.w.tid.Load())
	if tid == 0 {
		return unix.ESRCH
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(tid, &set); err != nil {
		return os.NewSyscallError("sched_setaffinity", err)
	}
	r.q.w.cpuNow.Store(int32(cpu))
	return nil
}

// startRoamers starts a roamer for each pinned queue worker, when there are
// two or more CPUs to roam among (Config.Roam); each starts from the CPU
// its worker pins itself to as it starts. stopRoamers ends them.
func (f *Forwarder) startRoamers() []*roamer {
	if len(f.roam) < 2 {
		return nil
	}
	var rs []*roamer
	for _, q := range f.queues {
		if q.CPU < 0 {
			continue
		}
		r := newRoamer(q, f.roam)
		r.stop, r.done = make(chan struct{}), make(chan struct{})
		go r.run()
		rs = append(rs, r)
	}
	return rs
}

func stopRoamers(rs []*roamer) {
	for _, r := range rs {
		close(r.stop)
	}
	for _, r := range rs {
		<-r.done
	}
}
