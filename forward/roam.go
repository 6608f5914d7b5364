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
// CPU pays no one. Half a second after a move the roamer compares what the
// worker delivered with what it delivered just before: if it lost more
// than roamWorse allows, it moves back and waits twice as long before the
// next move (roamHold, up to roamHoldMax), so two CPUs that each look
// better from the other cannot keep it moving. The
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
	// roamCheck is the look after a move that compares what the worker
	// delivered with the look before it (the first one after pays for the
	// move itself); under roamWorse of it, the move is undone.
	roamCheck = 2
	roamWorse = 0.85
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
	// What the last look read, and what the queue had delivered then.
	prev         []procfs.CPUTimes
	frames, byts uint64
	// The looks in a row that agreed on moving to cand.
	cand, agree int
	// The last move: when, from where, the bytes per look before it, the
	// looks since, and the hold after it.
	movedAt time.Time
	from    int
	before  uint64
	since   int
	hold    time.Duration
	// stop ends the roamer; done is closed when it has.
	stop chan struct{}
	done chan struct{}
}

// delivered is what the queue has delivered so far, both ways: frames
// and bytes.
func (q *QueueWorker) delivered() (frames, bytes uint64) {
	c := &q.Counters
	return c.NICToTAP.Tx.Packets.Load() + c.TAPToNIC.Tx.Packets.Load(), c.NICToTAP.Tx.Bytes.Load() + c.TAPToNIC.Tx.Bytes.Load()
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

// look reads the CPUs' times and what the queue delivered since the last
// look; it moves the worker back when the last move cost it (undo), and
// off a saturated CPU when roamSure looks in a row said so.
func (r *roamer) look(now time.Time) error {
	times, err := r.times()
	if err != nil {
		return err
	}
	frames, byts := r.q.delivered()
	prev, busy, rate := r.prev, frames-r.frames >= roamBusyFrames, byts-r.byts
	r.prev, r.frames, r.byts = times, frames, byts
	if r.since++; r.since == roamCheck && r.from >= 0 {
		if busy && float64(rate) < roamWorse*float64(r.before) {
			return r.undo(now, rate)
		}
		r.hold = roamHold
	}
	home, cand := r.q.CPUNow(), -1
	if prev != nil && busy {
		cand = roomier(prev, times, home, r.cpus)
	}
	switch {
	case cand < 0:
		r.agree = 0
	case cand == r.cand:
		r.agree++
	default:
		r.cand, r.agree = cand, 1
	}
	if r.agree < roamSure || now.Sub(r.movedAt) < r.hold {
		return nil
	}
	r.log.Debug("worker moves to an idle CPU", "queue", r.q.ID, "from_cpu", home, "to_cpu", cand)
	return r.moveTo(cand, now, rate)
}

// undo moves the worker back to where the last move took it from: it
// delivered less since. The next move waits twice as long.
func (r *roamer) undo(now time.Time, rate uint64) error {
	r.log.Debug("worker moves back: it delivered less since it moved", "queue", r.q.ID, "from_cpu", r.q.CPUNow(), "to_cpu", r.from,
		"bytes_per_look_before", r.before, "bytes_per_look_since", rate)
	hold := min(2*r.hold, roamHoldMax)
	if err := r.moveTo(r.from, now, 0); err != nil {
		return err
	}
	r.from, r.hold = -1, hold // nothing to check: home is known better
	return nil
}

// moveTo pins the worker to cpu and notes the move: rate is the bytes it
// delivered in the look before, which the look roamCheck after compares.
func (r *roamer) moveTo(cpu int, now time.Time, rate uint64) error {
	from := r.q.CPUNow()
	if err := r.move(cpu); err != nil {
		return err
	}
	r.from, r.movedAt, r.before, r.since, r.agree = from, now, rate, 0, 0
	r.q.moves.Add(1)
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

// startRoamers starts a roamer for each pinned queue worker of a queue not
// split, when there are two or more CPUs to roam among (Config.Roam);
// each starts from the CPU its worker pins itself to. stopRoamers ends
// them.
func (f *Forwarder) startRoamers() []*roamer {
	if len(f.roam) < 2 {
		return nil
	}
	var rs []*roamer
	for _, q := range f.queues {
		if q.CPU < 0 || !slices.Contains(f.roam, q.CPU) || q.tx.own() {
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
