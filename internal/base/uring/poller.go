package uring

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ABI values of the Poller (include/uapi/linux/io_uring.h).
const (
	opPollAdd      uint8  = 6      // IORING_OP_POLL_ADD, one-shot (len 0)
	enterExtArg    uint32 = 1 << 3 // IORING_ENTER_EXT_ARG, Linux 5.11
	featExtArg     uint32 = 1 << 8 // IORING_FEAT_EXT_ARG
	registerNAPIOp uint32 = 27     // IORING_REGISTER_NAPI, Linux 6.9
	// struct io_uring_napi opcodes (6.13): register the settings with a
	// tracking strategy, or add a NAPI id to a static list.
	napiRegisterOp  uint8  = 0
	napiStaticAddID uint8  = 1
	napiTrackStatic uint32 = 1 // IO_URING_NAPI_TRACKING_STATIC
	// pollerEntries bounds the distinct (fd, events) pairs one Poller
	// watches: one POLL_ADD each is in flight at most.
	pollerEntries = 8
)

// napiArg is struct io_uring_napi.
type napiArg struct {
	busyPollTo uint32 // microseconds
	prefer     uint8
	opcode     uint8
	_          [2]uint8
	opParam    uint32 // the tracking strategy, or the NAPI id to add
	_          uint32
}

// NAPI is what a Poller busy-polls while it waits.
type NAPI struct {
	// IDs are NAPI instance ids (the netdev family's napi-get).
	IDs []uint32
	// BusyPoll is how long one wait busy-polls the instances before it
	// sleeps; at least a microsecond.
	BusyPoll time.Duration
	// Prefer asks for preferred busy polling: while it runs, the
	// instances' softirq processing defers to it (NAPI_F_PREFER_BUSY_POLL).
	Prefer bool
}

// Poller waits for fds as ppoll(2) does, through a ring of its own, and
// meanwhile has the kernel busy-poll the NAPI instances it was given:
// IORING_REGISTER_NAPI with static tracking (IO_URING_NAPI_STATIC_ADD_ID,
// Linux 6.13). Inside io_uring_enter, before the waiting thread sleeps,
// the kernel calls the instances' poll functions in that thread for up to
// NAPI.BusyPoll (io_uring/napi.c: io_napi_busy_loop), until a completion
// is due; a frame the device received is then handled in the waiter's
// context instead of a softirq. Unlike SO_BUSY_POLL it does not depend on
// a socket having been marked with its queue's NAPI id: the ids are given.
//
// Each fd is watched by a one-shot IORING_OP_POLL_ADD that stays armed
// across waits until it fires; Wait arms again only the fds it reported.
// A reported fd may no longer be ready (what was ready was consumed since
// its poll fired), so callers treat readiness as a hint, and the file of a
// watched fd stays referenced by the ring until its poll fires or the
// Poller is closed. Watch only fds that outlive the Poller.
//
// A Poller belongs to one goroutine locked to its OS thread, from its first
// Wait or Spin on (IORING_SETUP_SINGLE_ISSUER: from another thread they fail
// with EEXIST).
type Poller struct {
	r       *ring
	watches []watch
	ts      unix.Timespec // the timeout of the wait in flight
}

// watch is one (fd, events) pair a Wait asked for.
type watch struct {
	fd      int32
	events  int16
	armed   bool  // a POLL_ADD for it is queued or in flight
	revents int16 // what its completion said, not yet reported
}

// NewPoller makes a Poller busy-polling n's instances. Errors for a kernel
// without what it needs come with ErrUnavailable.
func NewPoller(n NAPI) (_ *Poller, err error) {
	us := n.BusyPoll.Microseconds()
	if us < 1 || us > 1<<31 || len(n.IDs) == 0 {
		return nil, fmt.Errorf("an io_uring NAPI poller needs NAPI ids and a busy-poll time of 1 µs to 35 min (got %d ids, %v)", len(n.IDs), n.BusyPoll)
	}
	r, err := newRing(pollerEntries, setupFlags, opPollAdd)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.features&featExtArg == 0 {
		return nil, fmt.Errorf("%w: no IORING_FEAT_EXT_ARG (Linux 5.11)", ErrUnavailable)
	}
	a := napiArg{busyPollTo: uint32(us), opcode: napiRegisterOp, opParam: napiTrackStatic}
	if n.Prefer {
		a.prefer = 1
	}
	if err := registerNAPI(r.fd, &a); err != nil {
		return nil, napiError("register NAPI busy polling with io_uring", err)
	}
	for _, id := range n.IDs {
		a := napiArg{opcode: napiStaticAddID, opParam: id}
		if err := registerNAPI(r.fd, &a); err != nil && err != unix.EEXIST {
			return nil, napiError(fmt.Sprintf("adding NAPI id %d", id), err)
		}
	}
	return &Poller{r: r}, nil
}

// napiError says why registering NAPI busy polling failed: EINVAL is a
// kernel before 6.13 (no static tracking) or an id that names no NAPI.
func napiError(what string, err error) error {
	err = os.NewSyscallError("io_uring_register", err)
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%s: %w: %w (static NAPI tracking needs Linux 6.13, and a NAPI id the kernel knows)", what, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Close releases the ring; the kernel cancels the polls still armed.
func (p *Poller) Close() error { return p.r.close() }

// Wait waits until one of pfd is ready or timeout passed (nil: no limit),
// busy-polling the NAPI instances first, and sets each entry's Revents
// (zero for those not found ready). Errors are bare errnos: EINTR when a
// signal came (call again), EEXIST from a thread not the Poller's, EINVAL
// when pfd holds more distinct (fd, events) pairs than a Poller watches.
func (p *Poller) Wait(pfd []unix.PollFd, timeout *unix.Timespec) error {
	p.reap()
	if p.report(pfd) > 0 {
		return nil
	}
	for i := range pfd {
		j := p.watch(pfd[i].Fd, pfd[i].Events)
		if j < 0 {
			return unix.EINVAL
		}
		if w := &p.watches[j]; !w.armed {
			s := p.r.prepare()
			if s == nil {
				return unix.EINVAL
			}
			s.opcode, s.fd, s.rwFlags, s.userData = opPollAdd, w.fd, uint32(uint16(w.events)), uint64(j)
			w.armed = true
		}
	}
	var ts *unix.Timespec
	if timeout != nil {
		p.ts = *timeout
		ts = &p.ts
	}
	err := p.r.submit(1, ts)
	p.reap()
	p.report(pfd)
	if err == unix.ETIME {
		return nil
	}
	return err
}

// Spin busy-polls the NAPI instances for d (or until a signal comes) and
// returns: the loop body of a poller on a CPU of its own. It waits for no
// fd; the fds Wait watches keep their polls.
func (p *Poller) Spin(d time.Duration) error {
	p.ts = unix.NsecToTimespec(d.Nanoseconds())
	err := p.r.submit(1, &p.ts)
	p.reap()
	if err == unix.ETIME || err == unix.EINTR {
		return nil
	}
	return err
}

// reap reads the completions: each is the poll of one watch firing.
func (p *Poller) reap() {
	ready := p.r.ready()
	for j := range ready {
		c := p.r.completion(j)
		if c.userData >= uint64(len(p.watches)) {
			continue
		}
		w := &p.watches[c.userData]
		w.armed = false
		if c.res < 0 {
			w.revents |= unix.POLLERR // the poll itself failed (EBADF: the fd was closed)
		} else {
			w.revents |= int16(c.res)
		}
	}
	p.r.advance(ready)
}

// report hands each pfd entry what its watch's completion said, and
// returns how many were ready.
func (p *Poller) report(pfd []unix.PollFd) int {
	n := 0
	for i := range pfd {
		pfd[i].Revents = 0
		j := p.find(pfd[i].Fd, pfd[i].Events)
		if j < 0 || p.watches[j].revents == 0 {
			continue
		}
		pfd[i].Revents, p.watches[j].revents = p.watches[j].revents, 0
		n++
	}
	return n
}

// find is the index of the watch of (fd, events), -1 when there is none.
func (p *Poller) find(fd int32, events int16) int {
	for i, w := range p.watches {
		if w.fd == fd && w.events == events {
			return i
		}
	}
	return -1
}

// watch is the index of the watch of (fd, events), added when missing; -1
// when the Poller watches as many as it can.
func (p *Poller) watch(fd int32, events int16) int {
	if i := p.find(fd, events); i >= 0 {
		return i
	}
	if len(p.watches) == pollerEntries {
		return -1
	}
	if p.watches == nil {
		p.watches = make([]watch, 0, pollerEntries)
	}
	p.watches = append(p.watches, watch{fd: fd, events: events})
	return len(p.watches) - 1
}
