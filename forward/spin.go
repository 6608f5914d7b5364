package forward

import "time"

// The adaptive spin: before it sleeps in ppoll, a queue worker may look at
// its fds again for a while, so that a frame that comes a few microseconds
// later costs neither it a sleep and a wake-up nor its sender the wake-up
// (try_to_wake_up, and an IPI when the worker's CPU is another). How long
// adapts the way KVM's halt polling does: a sleep that ended within the
// longest spin (Config.SpinMax) would have been caught by spinning longer,
// so the next spin doubles; a spin that caught nothing before a sleep
// longer than that halves it, down to none. An idle worker's sleeps are
// long, so its spin falls to zero at once and it costs no CPU.

// spinFirst is the first spin after one of none.
const spinFirst = 2 * time.Microsecond

// spin is one worker's adaptive spin.
type spin struct {
	max time.Duration // Config.SpinMax; 0: the worker never spins
	cur time.Duration // how long the next spin lasts, 0 to max
}

// poker is a kind that can spin: poke marks its fds ready for a turn that
// reads them without a wait, and moved says whether that turn read
// anything.
type poker interface {
	poke()
	moved() bool
}

// run spins for up to s.cur, turning w's kind with every fd marked ready,
// and reports whether a turn found frames.
func (s *spin) run(w *worker) (bool, error) {
	if s.cur == 0 { // as it always is without Config.SpinMax
		return false, nil
	}
	p, ok := w.kind.(poker)
	if !ok {
		return false, nil
	}
	end := time.Now().Add(s.cur)
	for !w.fw.stop.flag.Load() {
		p.poke()
		again, err := w.kind.turn()
		if err != nil {
			return false, err
		}
		if again || p.moved() {
			return true, nil
		}
		if time.Now().After(end) {
			break
		}
	}
	return false, nil
}

// slept adapts the spin to a sleep of d that followed it.
func (s *spin) slept(d time.Duration) {
	switch {
	case s.max == 0:
	case d <= s.max:
		s.cur = min(max(2*s.cur, spinFirst), s.max)
	case s.cur > 0:
		if s.cur /= 2; s.cur < spinFirst {
			s.cur = 0
		}
	}
}
