package napi

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// Record is the steps that undo the changes made to one device, oldest
// first, in a form that outlives the process that made them (it marshals
// to JSON): what a Journal keeps for its Changes. A process that finds the
// Record of one that died before its Restore puts the device back with
// Record.Restore.
type Record struct {
	Ifindex int    `json:"ifindex"`
	Steps   []Step `json:"steps"`
}

// Step undoes one change: exactly one of NAPI and Thread is set.
type Step struct {
	NAPI   *NAPIStep   `json:"napi,omitempty"`
	Thread *ThreadStep `json:"thread,omitempty"`
}

// NAPIStep puts back the attributes of NAPI instance ID that a change
// replaced.
type NAPIStep struct {
	ID  uint32    `json:"id"`
	Was SavedAttr `json:"was"`
}

// SavedAttr is Attrs as a Record keeps them: nil fields were not changed.
type SavedAttr struct {
	Threaded          *Threaded `json:"threaded,omitempty"`
	DeferHardIRQs     *uint32   `json:"defer_hard_irqs,omitempty"`
	GROFlushTimeoutNS *int64    `json:"gro_flush_timeout_ns,omitempty"`
	IRQSuspendTimeout *int64    `json:"irq_suspend_timeout_ns,omitempty"`
}

// ThreadStep puts back what a change replaced on a thread (a NAPI's
// kthread): its CPU affinity or its scheduling policy, one of the two.
type ThreadStep struct {
	PID int `json:"pid"`
	// Start is when the thread started, in clock ticks after boot
	// (/proc/PID/stat): a thread that now has the pid but another start
	// is not the one changed, and is left alone.
	Start uint64 `json:"start"`
	CPUs  []int  `json:"cpus,omitempty"`
	Sched *Sched `json:"sched,omitempty"`
}

// Sched is a thread's scheduling policy as a Record keeps it.
type Sched struct {
	Policy      uint32 `json:"policy"` // SCHED_OTHER, SCHED_FIFO, ...
	Priority    uint32 `json:"priority"`
	Nice        int32  `json:"nice"`
	ResetOnFork bool   `json:"reset_on_fork,omitempty"`
}

// ErrBadRecord means a Record holds what no Changes writes: it is not to
// be trusted.
var ErrBadRecord = errors.New("not a valid NAPI record")

// ErrStale means a Record names NAPI instances the device does not have
// (any more): the device, or its NAPI instances, were made again since,
// and the settings the Record would put back went with the old ones.
var ErrStale = errors.New("the NAPI instances it names are gone")

func saveAttrs(a Attrs) SavedAttr {
	var s SavedAttr
	s.Threaded, s.DeferHardIRQs = a.Threaded, a.DeferHardIRQs
	if a.GROFlushTimeout != nil {
		s.GROFlushTimeoutNS = new(int64(*a.GROFlushTimeout))
	}
	if a.IRQSuspendTimeout != nil {
		s.IRQSuspendTimeout = new(int64(*a.IRQSuspendTimeout))
	}
	return s
}

// Attrs are the attributes the step sets.
func (s SavedAttr) Attrs() Attrs {
	a := Attrs{Threaded: s.Threaded, DeferHardIRQs: s.DeferHardIRQs}
	if s.GROFlushTimeoutNS != nil {
		a.GROFlushTimeout = new(time.Duration(*s.GROFlushTimeoutNS))
	}
	if s.IRQSuspendTimeout != nil {
		a.IRQSuspendTimeout = new(time.Duration(*s.IRQSuspendTimeout))
	}
	return a
}

// Check refuses a Record that no Changes could have written: a step with
// neither or both kinds, an id or pid of 0, a value out of the kernel's
// range, a policy tapfwd does not restore. The error matches ErrBadRecord.
func (r Record) Check() error {
	if r.Ifindex <= 0 {
		return fmt.Errorf("%w: ifindex %d", ErrBadRecord, r.Ifindex)
	}
	for i, s := range r.Steps {
		if err := s.check(); err != nil {
			return fmt.Errorf("%w: step %d: %v", ErrBadRecord, i, err)
		}
	}
	return nil
}

func (s Step) check() error {
	switch {
	case (s.NAPI == nil) == (s.Thread == nil):
		return errors.New("want one of napi and thread")
	case s.NAPI != nil:
		return s.NAPI.check()
	}
	return s.Thread.check()
}

func (n *NAPIStep) check() error {
	a := n.Was
	switch {
	case n.ID == 0:
		return errors.New("NAPI id 0")
	case a.Attrs().empty():
		return fmt.Errorf("NAPI %d: no attribute to put back", n.ID)
	case a.Threaded != nil && *a.Threaded > ThreadedBusyPoll:
		return fmt.Errorf("NAPI %d: threaded %d", n.ID, uint32(*a.Threaded))
	case a.DeferHardIRQs != nil && *a.DeferHardIRQs > maxDeferHardIRQs:
		return fmt.Errorf("NAPI %d: defer-hard-irqs %d", n.ID, *a.DeferHardIRQs)
	case a.GROFlushTimeoutNS != nil && *a.GROFlushTimeoutNS < 0, a.IRQSuspendTimeout != nil && *a.IRQSuspendTimeout < 0:
		return fmt.Errorf("NAPI %d: a negative timeout", n.ID)
	}
	return nil
}

func (t *ThreadStep) check() error {
	switch {
	case t.PID <= 0 || t.Start == 0:
		return fmt.Errorf("thread pid %d started at %d", t.PID, t.Start)
	case (t.CPUs == nil) == (t.Sched == nil):
		return fmt.Errorf("pid %d: want one of cpus and sched", t.PID)
	case t.Sched != nil:
		p := t.Sched
		if _, ok := policyNames[p.Policy]; !ok || p.Policy == unix.SCHED_DEADLINE || p.Priority > MaxFIFOPriority || p.Nice < -20 || p.Nice > 19 {
			return fmt.Errorf("pid %d: scheduling %+v", t.PID, *p)
		}
	case len(t.CPUs) == 0:
		return fmt.Errorf("pid %d: no CPU", t.PID)
	}
	for _, c := range t.CPUs {
		if c < 0 || c >= cpuSetSize {
			return fmt.Errorf("pid %d: CPU %d", t.PID, c)
		}
	}
	return nil
}

// Restore puts back what the Record's changes replaced, newest first, on
// the device of c's namespace, and returns the steps it took. It first
// checks that every NAPI instance it names is still the device's, and
// changes nothing when one is not (ErrStale). A thread step whose thread
// is gone, or whose pid another thread has now, is skipped.
func (r Record) Restore(c *Client) ([]Step, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	for _, s := range r.Steps {
		if s.NAPI == nil {
			continue
		}
		n, err := c.Get(s.NAPI.ID)
		if errors.Is(err, unix.ENOENT) || err == nil && n.Ifindex != r.Ifindex {
			return nil, fmt.Errorf("NAPI %d of ifindex %d: %w", s.NAPI.ID, r.Ifindex, ErrStale)
		}
		if err != nil {
			return nil, err
		}
	}
	var done []Step
	var errs []error
	for i := len(r.Steps) - 1; i >= 0; i-- {
		s := r.Steps[i]
		ok, err := s.restore(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", s, err))
		} else if ok {
			done = append(done, s)
		}
	}
	return done, errors.Join(errs...)
}

// restore takes the step; false when there was nothing to do.
func (s Step) restore(c *Client) (bool, error) {
	if s.NAPI != nil {
		_, err := c.Set(s.NAPI.ID, s.NAPI.Was.Attrs())
		return err == nil, err
	}
	t := s.Thread
	if start, err := threadStart(t.PID); err != nil || start != t.Start {
		return false, nil
	}
	var err error
	if t.Sched != nil {
		err = setSchedPolicy(t.PID, unix.SchedAttr{Policy: t.Sched.Policy, Priority: t.Sched.Priority, Nice: t.Sched.Nice,
			Flags: resetOnFork(t.Sched.ResetOnFork)})
	} else {
		var set unix.CPUSet
		for _, c := range t.CPUs {
			set.Set(c)
		}
		err = setAffinity(t.PID, set)
	}
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	return err == nil, err
}

func resetOnFork(on bool) uint64 {
	if on {
		return unix.SCHED_FLAG_RESET_ON_FORK
	}
	return 0
}

// String says what the step puts back: "NAPI 8193: threaded disabled,
// defer-hard-irqs 0", "pid 812: CPUs [0 1]".
func (s Step) String() string {
	if t := s.Thread; t != nil {
		if t.Sched != nil {
			return fmt.Sprintf("pid %d: scheduling policy %d priority %d nice %d", t.PID, t.Sched.Policy, t.Sched.Priority, t.Sched.Nice)
		}
		return fmt.Sprintf("pid %d: CPUs %v", t.PID, t.CPUs)
	}
	if s.NAPI == nil {
		return "nothing"
	}
	a := s.NAPI.Was.Attrs()
	var out []string
	if a.Threaded != nil {
		out = append(out, "threaded "+a.Threaded.String())
	}
	if a.DeferHardIRQs != nil {
		out = append(out, fmt.Sprintf("defer-hard-irqs %d", *a.DeferHardIRQs))
	}
	if a.GROFlushTimeout != nil {
		out = append(out, "gro-flush-timeout "+a.GROFlushTimeout.String())
	}
	if a.IRQSuspendTimeout != nil {
		out = append(out, "irq-suspend-timeout "+a.IRQSuspendTimeout.String())
	}
	return fmt.Sprintf("NAPI %d: %s", s.NAPI.ID, strings.Join(out, ", "))
}

// threadStart is when thread pid started, in clock ticks after boot.
func threadStart(pid int) (uint64, error) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return 0, fmt.Errorf("start time of pid %d: %w", pid, err)
	}
	if st.StartTime == 0 {
		return 0, fmt.Errorf("start time of pid %d: none: %w", pid, os.ErrNotExist)
	}
	return st.StartTime, nil
}

func cpuList(set unix.CPUSet) []int {
	var out []int
	for c := range cpuSetSize {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}
