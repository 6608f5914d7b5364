package forward

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// live is what a watchdog reads of a worker: beats counts the turns of
// its loop, waiting is set while it sleeps in ppoll with nothing to do. A
// worker that neither waits nor turns is wedged.
type live struct {
	beats   atomic.Uint64
	waiting atomic.Bool
	seen    uint64 // beats at the last Stalled, the watchdog's own
}

// Started is closed once every worker of the first Run is in its loop
// (pinned to its CPU and polling): forwarding has started.
func (f *Forwarder) Started() <-chan struct{} { return f.started }

// workerUp counts a worker into its loop and closes Started with the last.
func (f *Forwarder) workerUp() {
	if int(f.up.Add(1)) == len(f.queues)+len(f.GuestWorkers()) {
		f.startOnce.Do(func() { close(f.started) })
	}
}

// Stalled names the workers ("queue 0", "guest port 1") that have neither
// waited for frames nor made a turn of their loop since the previous
// call: wedged in a syscall or a loop. Call it from one goroutine (a
// watchdog), at an interval well above a batch's work, while Run runs.
func (f *Forwarder) Stalled() []string {
	var out []string
	for _, q := range f.queues {
		if q.live.stalled() {
			out = append(out, fmt.Sprintf("queue %d", q.ID))
		}
	}
	for _, g := range f.GuestWorkers() {
		if g.live.stalled() {
			out = append(out, fmt.Sprintf("guest port %d", g.ID))
		}
	}
	return out
}

// stalled is one worker's part of Stalled.
func (l *live) stalled() bool {
	b := l.beats.Load()
	s := !l.waiting.Load() && b == l.seen
	l.seen = b
	return s
}

// poll blocks in ppoll on pfd (their Revents cleared first), marked as
// waiting in l meanwhile, so that the watchdog does not take a sleeping
// worker for a stuck one.
func (l *live) poll(pfd []unix.PollFd) error {
	l.waiting.Store(true)
	defer l.waiting.Store(false)
	for {
		for i := range pfd {
			pfd[i].Revents = 0
		}
		_, err := unix.Ppoll(pfd, nil, nil)
		if err == nil {
			return nil
		}
		if err != unix.EINTR {
			return os.NewSyscallError("ppoll", err)
		}
	}
}

// lockTo locks the calling goroutine to its thread for good (the thread's
// affinity changes, so it must not serve other goroutines) and pins the
// thread to cpu, unless cpu is negative.
func lockTo(cpu int) error {
	runtime.LockOSThread()
	if cpu < 0 {
		return nil
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, os.NewSyscallError("sched_setaffinity", err))
	}
	return nil
}
