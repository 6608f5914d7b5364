package forward

import (
	"fmt"
	"sync/atomic"
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
	if int(f.up.Add(1)) == len(f.queues)+len(f.Guests()) {
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
	for _, g := range f.Guests() {
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
