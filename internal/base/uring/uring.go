package uring

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrUnavailable means io_uring cannot be used here: the kernel lacks it
// or an opcode or flag asked for (ENOSYS, EINVAL), it is refused (EPERM:
// the sysctl kernel.io_uring_disabled or a seccomp filter), or the file
// does not take non-blocking io_uring I/O (EOPNOTSUPP: a TUN fd does since
// Linux 6.4). Callers fall back to read and write.
var ErrUnavailable = errors.New("io_uring is unavailable")

// ABI values (include/uapi/linux/io_uring.h, include/uapi/linux/fs.h).
const (
	opRead  uint8 = 22 // IORING_OP_READ, Linux 5.6
	opWrite uint8 = 23 // IORING_OP_WRITE, Linux 5.6

	// IOSQE_IO_LINK: the next SQE starts once this one succeeded; when
	// it fails, the rest of the chain completes with ECANCELED. IOSQE_ASYNC
	// is never used: it hands a request to an io-wq worker thread.
	sqeIOLink uint8 = 1 << 2

	// IORING_SETUP_SUBMIT_ALL (5.18): an SQE that fails to prepare does
	// not stop the others. IORING_SETUP_SINGLE_ISSUER (6.0) and
	// IORING_SETUP_DEFER_TASKRUN (6.1): one thread submits, and task work
	// (the next write of a chain) runs only inside its io_uring_enter,
	// from a list of the ring's own; writes chain about a tenth cheaper
	// than with IORING_SETUP_COOP_TASKRUN. IORING_SETUP_R_DISABLED: the
	// ring starts disabled, so that the submitting thread is the one that
	// enables it (IORING_REGISTER_ENABLE_RINGS), not the one that made it.
	setupSubmitAll   = 1 << 7
	setupDisabled    = 1 << 6
	setupSingle      = 1 << 12
	setupDeferTask   = 1 << 13
	setupFlags       = setupSubmitAll | setupSingle | setupDeferTask | setupDisabled
	setupCoopTaskrun = 1 << 8 // for the short-lived ring that probes an fd

	featSingleMmap uint32 = 1 << 0 // IORING_FEAT_SINGLE_MMAP, Linux 5.4
	enterGetEvents uint32 = 1 << 0 // IORING_ENTER_GETEVENTS
	registerProbe  uint32 = 8      // IORING_REGISTER_PROBE
	registerEnable uint32 = 12     // IORING_REGISTER_ENABLE_RINGS
	opSupported    uint16 = 1 << 0 // IO_URING_OP_SUPPORTED
	offSQRing      int64  = 0
	offSQEs        int64  = 0x10000000
	rwfNowait      uint32 = 0x8 // RWF_NOWAIT
	maxErrno              = 4095
)

// sqe is struct io_uring_sqe, 64 bytes.
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64 // set by setBuf, which keeps unsafe in sys_unsafe.go
	len         uint32
	rwFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	fileIndex   uint32
	addr3       uint64
	_           uint64
}

// cqe is struct io_uring_cqe, 16 bytes (no IORING_SETUP_CQE32).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// queue is the shared part of one ring: the consumer advances the head and
// the producer the tail, each published with a store the other side loads
// before it touches the slots (io_uring/io_uring.c: smp_load_acquire and
// smp_store_release on the kernel's side; sync/atomic's sequentially
// consistent loads and stores here).
type queue struct {
	head, tail *atomic.Uint32
	mask       uint32
}

// ring is one io_uring instance: the submission queue of sqes, the
// completion queue of cqes, and how to enter the kernel.
type ring struct {
	fd       int
	features uint32 // IORING_FEAT_* the kernel has
	sq       queue
	cq       queue
	sqes     []sqe
	cqes     []cqe
	next     uint32 // SQ tail including the SQEs prepared but not yet published
	head     uint32 // CQ head: the completions before it were read
	// enter is io_uring_enter(2), or a model kernel in tests.
	// With ts it waits at most that long (then ETIME).
	enter func(toSubmit, minComplete, flags uint32, ts *unix.Timespec) (int, error)
	close func() error
	// enable makes the calling thread the ring's submitter, before its
	// first submission; nil once done.
	enable func() error
}

// prepare returns a zeroed SQE, or nil when the submission queue is full
// of SQEs the kernel has not consumed.
func (r *ring) prepare() *sqe {
	if r.next-r.sq.head.Load() >= uint32(len(r.sqes)) {
		return nil
	}
	s := &r.sqes[r.next&r.sq.mask]
	*s = sqe{}
	r.next++
	return s
}

// submit publishes the prepared SQEs and enters the kernel once to submit
// every one it has not consumed and, when wait > 0, to wait until at least
// wait completions are in the completion queue, at most until ts (nil: no
// limit; then ETIME). The kernel returns early, without waiting, when it
// consumed fewer than it was given.
func (r *ring) submit(wait uint32, ts *unix.Timespec) error {
	if r.enable != nil {
		if err := r.enable(); err != nil {
			return err
		}
		r.enable = nil
	}
	r.sq.tail.Store(r.next)
	var flags uint32
	if wait > 0 {
		flags = enterGetEvents
	}
	_, err := r.enter(r.next-r.sq.head.Load(), wait, flags, ts)
	return err
}

// unqueue withdraws the SQEs the kernel has not consumed. Without a
// submission-queue polling thread the kernel reads the queue only inside
// io_uring_enter, so they never run.
func (r *ring) unqueue() {
	r.next = r.sq.head.Load()
	r.sq.tail.Store(r.next)
}

// ready is how many completions wait to be read: never more than the
// completion queue holds, whatever its tail says.
func (r *ring) ready() uint32 {
	return min(r.cq.tail.Load()-r.head, uint32(len(r.cqes)))
}

// completion returns the i-th waiting completion, i < ready().
func (r *ring) completion(i uint32) cqe { return r.cqes[(r.head+i)&r.cq.mask] }

// advance hands the slots of the first n waiting completions back to the
// kernel.
func (r *ring) advance(n uint32) {
	r.head += n
	r.cq.head.Store(r.head)
}
