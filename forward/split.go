package forward

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// A split queue (Config.Split) runs as two workers, one per direction, on
// two CPUs: the queue's own reads the NIC (and its guests' inbox) and
// writes the TAP; a second one, tapSide's, reads the TAP and writes the
// NIC. Each direction's costs then run on a CPU of their own, the
// kernel's work inside them included: a TAP write runs the lab's receive
// path (inline in the TAP's NAPI poll), a packet socket's send the wire's.
// The two share no mutable state but the counters, which are atomic, and
// the link states, which are shared by all workers anyway; each endpoint
// is read by one of them and written by the other, which it must allow
// (Duplex).

// Duplex is implemented by an endpoint whose Read and Write may run at the
// same time on two threads: its reads and writes share no state in user
// space (a packet socket's, a TAP queue's plain read and write). Both
// endpoints of a split queue must be Duplex.
type Duplex interface {
	Endpoint
	Duplex()
}

// tapSide reads a queue's TAP and writes its NIC: in the queue worker's
// turns, or in a worker of its own when the queue is split.
type tapSide struct {
	q     *QueueWorker
	w     *worker // the queue's own worker unless split
	ready bool    // read the TAP on the next turn
	got   int     // what the last turn read, for a spin
	tally tally
	dirty uint64 // guests handed frames in this batch
	bufs  [][]byte
	sizes []int
	out   [][]byte // frames for one NIC Write
}

// own says whether the TAP side runs in a worker of its own.
func (s *tapSide) own() bool { return s.w != s.q.w }

// split gives the queue's TAP side a worker of its own, pinned to cpu
// (negative: not pinned), spinning up to spinMax before each wait.
func (q *QueueWorker) split(cpu int, spinMax time.Duration) {
	q.tx.w = q.fw.newWorker(fmt.Sprintf("queue %d from the TAP", q.ID), cpu, &q.tx, q.tap.Fd())
	q.tx.w.spin.max = spinMax
}

// TAPCPU is the CPU the worker that reads the queue's TAP is pinned to
// (-1: not pinned): the queue's worker's (CPUNow) unless it is split.
func (q *QueueWorker) TAPCPU() int { return int(q.tx.w.cpuNow.Load()) }

// turn reads a batch from the TAP and writes it to the NIC.
func (s *tapSide) turn() (bool, error) {
	s.got = 0
	if s.ready {
		n, err := s.toNIC()
		if err != nil {
			return false, err
		}
		s.ready, s.got = n == s.q.batch, n
	}
	if s.ready {
		return true, nil
	}
	if s.q.busy {
		s.poke()
		return true, nil
	}
	return false, nil
}

// woke notes whether the TAP has frames.
func (s *tapSide) woke(pfd []unix.PollFd) {
	s.ready = pfd[0].Revents&(unix.POLLIN|unix.POLLERR|unix.POLLHUP) != 0
}

func (s *tapSide) poke()       { s.ready = true }
func (s *tapSide) moved() bool { return s.got > 0 }

// checkSplit says why the endpoints cannot run split, if they cannot.
func checkSplit(taps []Endpoint, nics []NIC, cpus []int) error {
	if len(cpus) != len(taps) {
		return fmt.Errorf("split queues: %d CPUs for %d queues", len(cpus), len(taps))
	}
	for i := range taps {
		for _, ep := range []Endpoint{taps[i], nics[i]} {
			if _, ok := ep.(Duplex); !ok {
				return fmt.Errorf("split queues: queue %d's %T cannot be read and written at once", i, ep)
			}
		}
	}
	return nil
}
