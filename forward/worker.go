package forward

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A kind is one kind of worker as the loop drives it (worker.run): a TAP
// queue's (QueueWorker) or a guest port's (GuestWorker). The loop owns
// pinning, waiting, the watchdog's heartbeat and stopping; a kind owns
// the fds it waits on (set up with the worker) and what one turn does.
type kind interface {
	// turn moves what is ready, up to a batch each way, and reports
	// whether work is left that needs no wait (a full batch, frames still
	// queued). An error ends the worker.
	turn() (again bool, err error)
	// woke hears what a wait found: the kind's fds, with their Revents.
	woke(pfd []unix.PollFd)
}

// worker is the loop every worker runs, over its kind. It is the one
// place in forward that pins a thread and waits in ppoll (wait).
type worker struct {
	name string // "queue 0", "guest port 1 queue 0": in Stalled and in Run's errors
	cpu  int    // -1: not pinned
	kind kind
	fw   *Forwarder
	pfd  []unix.PollFd // the stop eventfd, then the kind's fds
	// waiter, when set, waits in place of ppoll (a NIC that is a Waiter).
	waiter Waiter
	// one and ts are the short waits' fds (the stop eventfd and one other)
	// and timeout, kept here: handed to a Waiter they would escape, and
	// cost two allocations a wait.
	one [2]unix.PollFd
	ts  unix.Timespec
	// What a watchdog reads: beats counts the turns of the loop, waiting
	// is set while it sleeps in ppoll. A worker that neither waits nor
	// turns is wedged.
	beats   atomic.Uint64
	waiting atomic.Bool
	seen    uint64 // beats at the last Stalled, the watchdog's own
	// spin is the adaptive spin before each wait (Config.SpinMax).
	spin spin
	// tid is the thread the worker runs on while it runs (0: it does not),
	// for a roamer to move; cpuNow is the CPU that thread is pinned to.
	tid, cpuNow atomic.Int32
}

// newWorker sets up the loop for k, waiting on the stop eventfd and fds.
func (f *Forwarder) newWorker(name string, cpu int, k kind, fds ...int) *worker {
	w := &worker{name: name, cpu: cpu, kind: k, fw: f, pfd: make([]unix.PollFd, 1+len(fds))}
	w.pfd[0] = unix.PollFd{Fd: int32(f.stop.fd), Events: unix.POLLIN}
	for i, fd := range fds {
		w.pfd[1+i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	w.cpuNow.Store(int32(cpu))
	f.workers = append(f.workers, w)
	return w
}

// run is the loop: it pins the thread, counts itself into Started, and
// turns until the forwarder stops, sleeping in ppoll when its kind has
// nothing to do.
func (w *worker) run() error {
	if err := lockTo(w.cpu); err != nil {
		return err
	}
	w.cpuNow.Store(int32(w.cpu))
	w.tid.Store(int32(unix.Gettid()))
	defer w.tid.Store(0)
	w.fw.workerUp()
	for !w.fw.stop.flag.Load() {
		w.beats.Add(1)
		again, err := w.kind.turn()
		if err != nil {
			return err
		}
		if again {
			continue
		}
		if found, err := w.spin.run(w); err != nil || found {
			if err != nil {
				return err
			}
			continue
		}
		var t0 time.Time
		if w.spin.max > 0 {
			t0 = time.Now()
		}
		if err := w.wait(w.pfd, nil); err != nil {
			return err
		}
		if w.spin.max > 0 {
			w.spin.slept(time.Since(t0))
		}
		// The stop is the flag, which the loop reads: a Waiter may report
		// the eventfd of an earlier Run's stop.
		w.kind.woke(w.pfd[1:])
	}
	return nil
}

// wait blocks in ppoll (or the worker's Waiter) on pfd (their Revents
// cleared first) until one is ready or timeout passed (nil: no limit),
// marked as waiting meanwhile, so that the watchdog does not take a
// sleeping worker for a stuck one. pfd[0] is the stop eventfd.
func (w *worker) wait(pfd []unix.PollFd, timeout *unix.Timespec) error {
	w.waiting.Store(true)
	defer w.waiting.Store(false)
	for {
		for i := range pfd {
			pfd[i].Revents = 0
		}
		var err error
		if w.waiter != nil {
			if err = w.waiter.Wait(pfd, timeout); err != nil && err != unix.EINTR {
				return fmt.Errorf("waiting: %w", err)
			}
		} else if _, err = unix.Ppoll(pfd, timeout, nil); err != nil && err != unix.EINTR {
			return os.NewSyscallError("ppoll", err)
		}
		if err == nil {
			return nil
		}
	}
}

// waitRoom waits up to 10 ms for fd to take writes; false when it did not,
// or when the forwarder stopped first.
func (w *worker) waitRoom(fd int) bool {
	p := w.waitOne(fd, unix.POLLOUT, 10*time.Millisecond)
	return p != nil && p[1].Revents&unix.POLLOUT != 0
}

// waitOne waits up to d for events on fd, or for a stop; nil when the wait
// failed, else the stop eventfd's and fd's poll entries.
func (w *worker) waitOne(fd int, events int16, d time.Duration) *[2]unix.PollFd {
	w.one = [2]unix.PollFd{w.pfd[0], {Fd: int32(fd), Events: events}}
	w.ts = unix.NsecToTimespec(int64(d))
	if w.wait(w.one[:], &w.ts) != nil {
		return nil
	}
	return &w.one
}

// stop is what stops every worker: a flag their loops look at between
// turns, and an eventfd that ends their waits.
type stop struct {
	flag atomic.Bool
	fd   int
}

func (s *stop) open() (err error) {
	if s.fd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("make an eventfd: %w", os.NewSyscallError("eventfd", err))
	}
	return nil
}

// set tells the workers to stop.
func (s *stop) set() {
	s.flag.Store(true)
	one := [8]byte{1}
	unix.Write(s.fd, one[:])
}

// clear takes back a stop, before the workers start again.
func (s *stop) clear() {
	var drain [8]byte
	unix.Read(s.fd, drain[:])
	s.flag.Store(false)
}

func (s *stop) close() error { return unix.Close(s.fd) }

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

// Started is closed once every worker of the first Run is in its loop
// (pinned to its CPU and polling): forwarding has started.
func (f *Forwarder) Started() <-chan struct{} { return f.started }

// workerUp counts a worker into its loop and closes Started with the last.
func (f *Forwarder) workerUp() {
	if int(f.up.Add(1)) == len(f.workers) {
		f.startOnce.Do(func() { close(f.started) })
	}
}

// Stalled names the workers ("queue 0", "guest port 1 queue 0") that have neither
// waited for frames nor made a turn of their loop since the previous
// call: wedged in a syscall or a loop. Call it from one goroutine (a
// watchdog), at an interval well above a batch's work, while Run runs.
func (f *Forwarder) Stalled() []string {
	var out []string
	for _, w := range f.workers {
		b := w.beats.Load()
		if !w.waiting.Load() && b == w.seen {
			out = append(out, w.name)
		}
		w.seen = b
	}
	return out
}
