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
	mu   sync.Mutex
	undo []undo
}

type undo struct {
	what string
	fn   func() error
}

// NewChanges returns an empty record of changes made through c. Restore uses
// c too, so close c only after Restore.
func NewChanges(c *Client) *Changes { return &Changes{c: c} }

func (ch *Changes) push(what string, fn func() error) {
	ch.mu.Lock()
	ch.undo = append(ch.undo, undo{what, fn})
	ch.mu.Unlock()
}

// Set is Client.Set, recording the previous values.
func (ch *Changes) Set(id uint32, a Attrs) error {
	prev, err := ch.c.Set(id, a)
	if err != nil || prev.empty() {
		return err
	}
	ch.push(fmt.Sprintf("settings of NAPI %d", id), func() error {
		_, err := ch.c.Set(id, prev)
		return err
	})
	return nil
}

// PinKthread is PinKthread, recording the thread's previous affinity.
func (ch *Changes) PinKthread(pid, cpu int) error {
	return changeThread(ch, fmt.Sprintf("CPU affinity of pid %d", pid), pid, affinity, setAffinity,
		func() error { return PinKthread(pid, cpu) })
}

// SetFIFO is SetFIFO, recording the thread's previous scheduling policy.
func (ch *Changes) SetFIFO(pid, prio int) error {
	return changeThread(ch, fmt.Sprintf("scheduling policy of pid %d", pid), pid, schedPolicy, setSchedPolicy,
		func() error { return SetFIFO(pid, prio) })
}

// changeThread makes change to thread pid after reading, with get, what
// it replaces, and records putting that back as the undo.
func changeThread[T any](ch *Changes, what string, pid int, get func(int) (T, error), put func(int, T) error, change func() error) error {
	old, err := get(pid)
	if err != nil {
		return err
	}
	if err := change(); err != nil {
		return err
	}
	ch.push(what, func() error { return put(pid, old) })
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
// tries every change and returns the other errors joined.
func (ch *Changes) Restore() error {
	ch.mu.Lock()
	undo := ch.undo
	ch.undo = nil
	ch.mu.Unlock()
	var errs []error
	for i := len(undo) - 1; i >= 0; i-- {
		err := undo[i].fn()
		if err == nil || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) {
			continue
		}
		errs = append(errs, fmt.Errorf("restoring the %s: %w", undo[i].what, err))
	}
	return errors.Join(errs...)
}
