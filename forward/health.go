package forward

import "sync/atomic"

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
	if int(f.up.Add(1)) == len(f.queues) {
		f.startOnce.Do(func() { close(f.started) })
	}
}

// Stalled returns the IDs of the queues whose worker has neither waited
// for frames nor made a turn of its loop since the previous call: wedged
// in a syscall or a loop. Call it from one goroutine (a watchdog), at an
// interval well above a batch's work, while Run runs.
func (f *Forwarder) Stalled() []int {
	var out []int
	for _, q := range f.queues {
		b := q.live.beats.Load()
		if !q.live.waiting.Load() && b == q.live.seen {
			out = append(out, q.ID)
		}
		q.live.seen = b
	}
	return out
}
