package napi

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Changes makes NAPI and kthread changes and records how to undo them;
// Restore puts everything back, newest change first. tapfwd run makes its
// changes through one Changes and calls Restore on exit. It is safe for
// concurrent use.
type Changes struct {
	c    *Client
	j    *Journal
	mu   sync.Mutex
	undo []undo
}

type undo struct {
	what string
	fn   func() error
	e    *entry // its step in ch.j; nil without one
}

// NewChanges returns an empty record of changes made through c. Restore uses
// c too, so close c only after Restore.
func NewChanges(c *Client) *Changes { return &Changes{c: c} }

// UseJournal has ch write the step that undoes each change to j before it
// makes the change, and forget it once Restore has taken it; call it
// before the first change. It returns ch.
func (ch *Changes) UseJournal(j *Journal) *Changes {
	ch.j = j
	return ch
}

func (ch *Changes) push(what string, fn func() error, e *entry) {
	ch.mu.Lock()
	ch.undo = append(ch.undo, undo{what, fn, e})
	ch.mu.Unlock()
}

// journal adds the step step makes to ch's Journal, if it has one; its
// entry is dropped again should the change fail (unjournal).
func (ch *Changes) journal(step func() (Step, error)) (*entry, error) {
	if ch.j == nil || step == nil {
		return nil, nil
	}
	s, err := step()
	if err != nil {
		return nil, err
	}
	return ch.j.add(s)
}

func (ch *Changes) unjournal(e *entry) {
	if e != nil {
		ch.j.drop(e)
	}
}

// Set is Client.Set, recording the previous values.
func (ch *Changes) Set(id uint32, a Attrs) error {
	var step func() (Step, error)
	if !a.empty() {
		step = func() (Step, error) {
			cur, err := ch.c.Get(id)
			return Step{NAPI: &NAPIStep{ID: id, Was: saveAttrs(a.from(cur))}}, err
		}
	}
	e, err := ch.journal(step)
	if err != nil {
		return err
	}
	prev, err := ch.c.Set(id, a)
	if err != nil || prev.empty() {
		ch.unjournal(e)
		return err
	}
	ch.push(fmt.Sprintf("settings of NAPI %d", id), func() error {
		_, err := ch.c.Set(id, prev)
		return err
	}, e)
	return nil
}

// PinKthread is PinKthread, recording the thread's previous affinity.
func (ch *Changes) PinKthread(pid, cpu int) error {
	return changeThread(ch, fmt.Sprintf("CPU affinity of pid %d", pid), pid, affinity, setAffinity,
		func(old unix.CPUSet) ThreadStep { return ThreadStep{CPUs: cpuList(old)} },
		func() error { return PinKthread(pid, cpu) })
}

// SetFIFO is SetFIFO, recording the thread's previous scheduling policy.
func (ch *Changes) SetFIFO(pid, prio int) error {
	return changeThread(ch, fmt.Sprintf("scheduling policy of pid %d", pid), pid, schedPolicy, setSchedPolicy,
		func(old unix.SchedAttr) ThreadStep {
			return ThreadStep{Sched: &Sched{Policy: old.Policy, Priority: old.Priority, Nice: old.Nice,
				ResetOnFork: old.Flags&unix.SCHED_FLAG_RESET_ON_FORK != 0}}
		},
		func() error { return SetFIFO(pid, prio) })
}

// changeThread makes change to thread pid after reading, with get, what
// it replaces, and records putting that back as the undo (in the journal
// as step makes it).
func changeThread[T any](ch *Changes, what string, pid int, get func(int) (T, error), put func(int, T) error,
	step func(T) ThreadStep, change func() error) error {
	old, err := get(pid)
	if err != nil {
		return err
	}
	e, err := ch.journal(func() (Step, error) {
		s := step(old)
		s.PID = pid
		s.Start, err = threadStart(pid)
		return Step{Thread: &s}, err
	})
	if err != nil {
		return err
	}
	if err := change(); err != nil {
		ch.unjournal(e)
		return err
	}
	ch.push(what, func() error { return put(pid, old) }, e)
	return nil
}

// Len returns the number of changes Restore would undo.
func (ch *Changes) Len() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return len(ch.undo)
}

// Restore undoes every recorded change, newest first, and forgets them. A
// change whose object is gone counts as undone: a kthread that exited (ESRCH;
// disabling threaded stops it) or a NAPI instance that went away with its
// device or its GRO setting (ENOENT) takes its settings with it. Restore
// tries every change and returns the other errors joined. With a Journal,
// the steps of the changes undone leave it; those that failed stay, for
// another process to restore.
func (ch *Changes) Restore() error {
	ch.mu.Lock()
	undo := ch.undo
	ch.undo = nil
	ch.mu.Unlock()
	var errs []error
	var done []*entry
	for i := len(undo) - 1; i >= 0; i-- {
		err := undo[i].fn()
		if err == nil || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) {
			done = append(done, undo[i].e)
			continue
		}
		errs = append(errs, fmt.Errorf("restoring the %s: %w", undo[i].what, err))
	}
	if ch.j != nil {
		errs = append(errs, ch.j.drop(done...))
	}
	return errors.Join(errs...)
}
