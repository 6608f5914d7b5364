package forward

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSpinAdapts: sleeps within the longest spin double the next spin up
// to it; a spin that found nothing before a long sleep halves it down to
// none; with no longest spin it never spins.
func TestSpinAdapts(t *testing.T) {
	s := spin{max: 20 * time.Microsecond}
	var got []time.Duration
	for _, d := range []time.Duration{time.Microsecond, 5 * time.Microsecond, 20 * time.Microsecond, time.Microsecond, time.Microsecond,
		time.Millisecond, time.Millisecond, time.Second, time.Second, time.Second, time.Second} {
		s.slept(d)
		got = append(got, s.cur/time.Microsecond)
	}
	want := []time.Duration{2, 4, 8, 16, 20, 10, 5, 2, 0, 0, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("spins after each sleep %v µs, want %v", got, want)
		}
	}
	off := spin{}
	off.slept(time.Microsecond)
	if off.cur != 0 {
		t.Errorf("a worker without SpinMax spins %v", off.cur)
	}
}

// pokes is a kind that reads a frame on the k-th turn after it was poked.
type pokes struct {
	k, turns int
	ready    bool
}

func (p *pokes) turn() (bool, error) {
	if p.ready {
		p.turns++
	}
	return false, nil
}
func (p *pokes) woke([]unix.PollFd) {}
func (p *pokes) poke()              { p.ready = true }
func (p *pokes) moved() bool        { return p.k > 0 && p.turns == p.k }

// TestSpinRun: a spin ends as soon as a turn reads something, and after
// its time when none does; a spin of none, or a kind that cannot spin,
// does not turn at all.
func TestSpinRun(t *testing.T) {
	w := &worker{fw: &Forwarder{}}
	p := &pokes{k: 3}
	w.kind = p
	s := spin{max: time.Millisecond, cur: time.Millisecond}
	if found, err := s.run(w); !found || err != nil || p.turns != 3 {
		t.Errorf("spin found %v (%v) after %d turns, want a frame on the 3rd", found, err, p.turns)
	}
	p = &pokes{}
	w.kind = p
	t0 := time.Now()
	if found, _ := s.run(w); found || time.Since(t0) < time.Millisecond || p.turns == 0 {
		t.Errorf("spin over nothing found %v after %v and %d turns; want nothing after 1ms", found, time.Since(t0), p.turns)
	}
	p.turns = 0
	s.cur = 0
	if found, _ := s.run(w); found || p.turns != 0 {
		t.Errorf("a spin of none turned %d times", p.turns)
	}
}
