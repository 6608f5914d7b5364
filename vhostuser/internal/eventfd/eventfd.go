package eventfd

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A Signaller adds one to eventfds another process shares. write(2) on an
// eventfd waits while the counter is at 0xfffffffffffffffe unless the open
// file is O_NONBLOCK, and the other process can clear that flag on the file
// it shares, fill the counter and never read it. No write flag helps
// (pwritev2's RWF_NOWAIT is refused: an eventfd has no write_iter), a
// reopen through /proc/self/fd for an open file of one's own fails (ENXIO
// for anonymous inodes), and polling for POLLOUT before the write leaves a
// window in which the other process fills the counter.
//
// So a Signaller has the kernel signal the eventfd, as drivers/vhost does
// for its call eventfds: eventfd_signal never waits (at the top of its
// range the counter stays at 0xffffffffffffffff, readable, so the
// notification is not lost). Userspace reaches it through asynchronous
// I/O: a request with IOCB_FLAG_RESFD signals its eventfd as it completes,
// and a poll request on a file already ready (a private eventfd, always
// writable) completes inside io_submit. Signal is safe for concurrent use.
type Signaller struct {
	ctx   uint64 // the aio_context_t
	ready int    // the private eventfd the poll requests wait on
}

// iocb is struct iocb (include/uapi/linux/aio_abi.h), little-endian, with
// the fields a poll request leaves zero blank.
type iocb struct {
	_      [16]byte // aio_data, aio_key, aio_rw_flags
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	buf    uint64   // for a poll request, the events it waits for
	_      [24]byte // aio_nbytes, aio_offset, aio_reserved2
	flags  uint32
	resfd  uint32
}

// ioEvent is struct io_event: data, obj, res, res2.
type ioEvent [4]uint64

const (
	iocbCmdPoll   = 5 // IOCB_CMD_POLL
	iocbFlagResfd = 1 // IOCB_FLAG_RESFD
	// events is the completion ring's size. Requests complete at once; the
	// ring is emptied whenever a submission finds it full.
	events = 64
)

// NewSignaller sets up an asynchronous I/O context (its 64 events count
// against the system's fs.aio-max-nr), kept for the life of the process.
func NewSignaller() (*Signaller, error) {
	s := &Signaller{}
	var err error
	if s.ready, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("eventfd: %w", os.NewSyscallError("eventfd", err))
	}
	if err := s.setup(); err != nil {
		_ = unix.Close(s.ready)
		hint := ""
		if err == unix.EAGAIN {
			hint = " (the system's fs.aio-max-nr is reached)"
		}
		return nil, fmt.Errorf("eventfd: asynchronous I/O, which signals eventfds without waiting%s: %w",
			hint, os.NewSyscallError("io_setup", err))
	}
	return s, nil
}

// Signal adds one to eventfd fd without ever waiting. It allocates nothing.
// EINVAL: fd is not an eventfd.
func (s *Signaller) Signal(fd int) error {
	cb := iocb{opcode: iocbCmdPoll, fildes: uint32(s.ready), buf: unix.POLLOUT, flags: iocbFlagResfd, resfd: uint32(fd)}
	for try := 0; ; try++ {
		err := s.submit(&cb)
		if err != unix.EAGAIN || try == 2 {
			return err
		}
		s.reap() // the completion ring is full of requests done
	}
}

// Check accepts only an eventfd. Every anonymous inode has the same inode
// number (stat cannot tell an eventfd from an epoll fd or a timerfd), but
// its /proc/self/fd link names its kind in a name the kernel gives
// ("anon_inode:[eventfd]"), which no other file's link can have: those of
// files with a path start with "/".
func Check(fd int) error {
	l, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	switch {
	case err != nil:
		return fmt.Errorf("cannot tell whether the fd is an eventfd: %w", err)
	case l != "anon_inode:[eventfd]":
		return fmt.Errorf("the fd is %s, not an eventfd", l)
	}
	return nil
}
