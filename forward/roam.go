package forward

import (
	"log/slog"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// Roaming: a queue's worker follows its load.
//
// A worker pinned to a CPU that the load's own processes also need gets
// what they leave it, while another CPU may idle: on two CPUs, with the
// sender and the worker on one, the machine was 1.2 CPUs busy of 2 and
// tapfwd delivered two thirds of the bridge's rate; with the worker on the
// idle CPU, up to a third more. Which CPU that is depends on where the
// load runs, which tapfwd cannot know and which may change. So while the
// queue moves frames the roamer looks at every CPU's idle time
// (/proc/stat) four times a second, and when the worker's CPU has had
// almost none (roamSaturated) for two looks in a row while another of its
// CPUs had a good share more (roamRoom), it moves the worker there. A CPU
// with idle time to spare is where the load is not; a worker on an idle
// CPU pays no one. After a move it holds still for roamHold, twice as long
// each time a move undoes the one before (up to roamHoldMax), so two CPUs
// that each look better from the other cannot keep it moving. The
// worker's loop is not touched: the roamer sets the thread's affinity from
// outside, and an idle queue is never moved.
const (
	// roamLook is how often the roamer looks.
	roamLook = 250 * time.Millisecond
	// roamSaturated: a CPU idle less than this share of a look is full.
	roamSaturated = 0.10
	// roamRoom: a candidate must have been idle this share of a look
	// more than the worker's CPU.
	roamRoom = 0.30
	// roamSure is how many looks in a row must agree before a move.
	roamSure = 2
	// roamHold is the least time between moves; roamHoldMax the most it
	// doubles to while moves undo each other.
	roamHold    = 2 * time.Second
	roamHoldMax = 32 * time.Second
	// roamBusyFrames is how many frames a look must see for the queue to
	// count as busy.
	roamBusyFrames = 500
)

// roamer moves one queue's worker among cpus to follow its load.
type roamer struct {
	q    *QueueWorker
	log  *slog.Logger
	cpus []int
	// times reads each CPU's times (procfs.ReadPerCPUTimes); move pins the
	// worker to a CPU (roamer.pin). Tests replace both.
	times func() ([]procfs.CPUTimes, error)
	move  func(cpu int) error
	// What the last look saw, and the looks in a row that agreed on cand.
	prev        []procfs.CPUTimes
	prevFrames  uint64
	cand, agree int
	// The last move: when, from where, and the hold after it.
	movedAt time.Time
	from    int
	hold    time.Duration
	// stop ends the roamer; done is closed when it has.
	stop chan struct{}
	done chan struct{}
}

// delivered is how many frames the queue has delivered so far, both ways.
func (q *QueueWorker) delivered() uint64 {
	return q.Counters.NICToTAP.Tx.Packets.Load() + q.Counters.TAPToNIC.Tx.Packets.Load()
}

// CPUNow is the CPU the queue's worker is pinned to now (-1: not pinned):
// CPU, unless the worker roams (Config.Roam).
func (q *QueueWorker) CPUNow() int { return int(q.w.cpuNow.Load()) }

// Moves counts the times the queue's worker moved to another CPU to follow
// its load (Config.Roam).
func (q *QueueWorker) Moves() uint64 { return q.moves.Load() }

func newRoamer(q *QueueWorker, cpus []int, log *slog.Logger) *roamer {
	r := &roamer{q: q, log: log, cpus: cpus, times: procfs.ReadPerCPUTimes, from: -1, hold: roamHold,
		stop: make(chan struct{}), done: make(chan struct{})}
	r.move = r.pin
	return r
}

// run looks every roamLook until stop is closed.
func (r *roamer) run() {
	defer close(r.done)
	t := time.NewTicker(roamLook)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			if err := r.look(now); err != nil {
				r.log.Warn("the worker stops following its load", "queue", r.q.ID, "err", err)
				return
			}
		}
	}
}

// look reads the CPUs' times and the queue's frames since the last look,
// and moves the worker when roamSure looks in a row said so.
func (r *roamer) look(now time.Time) error {
	times, err := r.times()
	if err != nil {
		return err
	}
	frames := r.q.delivered()
	prev, busy := r.prev, frames-r.prevFrames >= roamBusyFrames
	r.prev, r.prevFrames = times, frames
	home := r.q.CPUNow()
	cand := -1
	if prev != nil && busy {
		cand = roomier(prev, times, home, r.cpus)
	}
	switch {
	case cand < 0:
		r.agree = 0
		return nil
	case cand == r.cand:
		r.agree++
	default:
		r.cand, r.agree = cand, 1
	}
	if r.agree < roamSure || now.Sub(r.movedAt) < r.hold {
		return nil
	}
	if err := r.move(cand); err != nil {
		return err
	}
	if cand == r.from && now.Sub(r.movedAt) < 2*r.hold {
		r.hold = min(2*r.hold, roamHoldMax) // it undid the last move
	} else {
		r.hold = roamHold
	}
	r.from, r.movedAt, r.agree = home, now, 0
	r.q.moves.Add(1)
	r.log.Debug("worker moved to an idle CPU", "queue", r.q.ID, "from_cpu", home, "to_cpu", cand, "next_move_after", r.hold)
	return nil
}

// roomier is the CPU of cpus that idled most between the two readings,
// when home was saturated and that one idled roamRoom more; else -1.
func roomier(prev, now []procfs.CPUTimes, home int, cpus []int) int {
	idle := func(c int) float64 {
		if c < 0 || c >= len(prev) || c >= len(now) {
			return -1
		}
		d := now[c].Sub(prev[c])
		total := d.User + d.Nice + d.System + d.Idle + d.IOWait + d.IRQ + d.SoftIRQ + d.Steal
		if total <= 0 {
			return -1
		}
		return float64(d.Idle+d.IOWait) / float64(total)
	}
	h := idle(home)
	if h < 0 || h >= roamSaturated {
		return -1
	}
	best, most := -1, h+roamRoom
	for _, c := range cpus {
		if i := idle(c); c != home && i > most {
			best, most = c, i
		}
	}
	return best
}

// pin moves the worker's thread to cpu. A thread that is gone (the worker
// ended) fails with ESRCH, which ends the roamer.
func (r *roamer) pin(cpu int) error {
	tid := int(r.q.w.tid.Load())
	if tid == 0 {
		return os.NewSyscallError("sched_setaffinity", unix.ESRCH)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(tid, &set); err != nil {
		return os.NewSyscallError("sched_setaffinity", err)
	}
	r.q.w.cpuNow.Store(int32(cpu))
	return nil
}

// startRoamers starts a roamer for each pinned queue worker, when there
// are two or more CPUs to roam among (Config.Roam); each starts from the
// CPU its worker pins itself to. stopRoamers ends them.
func (f *Forwarder) startRoamers() []*roamer {
	if len(f.roam) < 2 {
		return nil
	}
	var rs []*roamer
	for _, q := range f.queues {
		if q.CPU < 0 || !slices.Contains(f.roam, q.CPU) {
			continue
		}
		r := newRoamer(q, f.roam, f.log)
		if f.roamTimes != nil {
			r.times = f.roamTimes
		}
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
