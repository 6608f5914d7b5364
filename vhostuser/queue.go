package vhostuser

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Queue is one queue pair of a port: the guest's receive queue (Write)
// and transmit queue (Read), and Fd, which polls the guest's kicks on
// both. It has the forwarder's Endpoint shape; one worker owns it.
type Queue struct {
	p      *Port
	index  int
	rx, tx *vring
	// epfd holds the rings' kick eventfds (edge-triggered, tagged with
	// the ring's index+1) and wakefd (level-triggered, tag 0).
	epfd, wakefd int

	// Read's scratch, under tx.mu.
	evs    [3]unix.EpollEvent
	rdBuf  [8]byte
	macNow [6]byte

	stats queueCounters
}

// Epoll tags: which fd became readable.
const (
	tagWake = 0 // the queue's own eventfd
	tagKick = 1 // + ring index: the ring's kick eventfd
)

func (q *Queue) openFds() error {
	var err error
	if q.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("set up a vhost-user queue: %w", os.NewSyscallError("epoll_create1", err))
	}
	if q.wakefd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("set up a vhost-user queue: %w", os.NewSyscallError("eventfd", err))
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: tagWake}
	if err = unix.EpollCtl(q.epfd, unix.EPOLL_CTL_ADD, q.wakefd, &ev); err != nil {
		return fmt.Errorf("set up a vhost-user queue: %w", os.NewSyscallError("epoll_ctl", err))
	}
	return nil
}

func (q *Queue) closeFds() {
	for _, fd := range []*int{&q.epfd, &q.wakefd} {
		if *fd >= 0 {
			_ = unix.Close(*fd)
			*fd = -1
		}
	}
}

// Index is the queue pair's number: its rings are 2*Index (receive) and
// 2*Index+1 (transmit).
func (q *Queue) Index() int { return q.index }

// Fd becomes readable when the guest transmitted frames on this pair
// (Read has work), when it posted receive buffers after a Write found
// none, and when the port's state changed. Read consumes the
// notifications; poll it for reading only. Once Read said EIO, Fd stays
// quiet until the front-end restarts the rings: a broken port no longer
// polls the guest's kicks.
func (q *Queue) Fd() int { return q.epfd }

// wake makes Fd readable, so that a worker waiting on it looks again.
func (q *Queue) wake() { _, _ = unix.Write(q.wakefd, eventfdOne[:]) }

// drain consumes the notifications that made Fd readable: the queue's own
// wake-ups, read from its eventfd, and the guest's kicks, which epoll
// reports edge-triggered and which are never read: the front-end shares
// the kick eventfd and can make a read of it wait (emptied, O_NONBLOCK
// cleared). A kick eventfd that polls in error (its counter driven to the
// top, which kicks never do) or hung up breaks the port, and its ring
// stops being polled. Under tx.mu.
func (q *Queue) drain() {
	n, err := unix.EpollWait(q.epfd, q.evs[:], 0)
	if err != nil {
		return
	}
	for _, ev := range q.evs[:n] {
		switch {
		case ev.Fd == tagWake:
			_, _ = unix.Read(q.wakefd, q.rdBuf[:])
		case ev.Events&(unix.EPOLLERR|unix.EPOLLHUP) != 0:
			r := &q.p.rings[ev.Fd-tagKick]
			_ = q.p.broke(r, fmt.Errorf("%s: kick eventfd %s", r.name(), pollEvents(ev.Events)))
		}
	}
}

// pollEvents says what the error bits of epoll events mean for a kick
// eventfd.
func pollEvents(ev uint32) string {
	switch {
	case ev&unix.EPOLLERR != 0 && ev&unix.EPOLLHUP != 0:
		return "is in error and hung up"
	case ev&unix.EPOLLERR != 0:
		return "is in error (its counter at the top)"
	}
	return "hung up"
}
