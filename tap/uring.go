package tap

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/uring"
)

// ErrNoURing means io_uring cannot batch a queue's I/O: the kernel has no
// io_uring, it is refused (the sysctl kernel.io_uring_disabled, a seccomp
// filter), or the TUN is older than Linux 6.4 and takes no non-blocking
// io_uring reads and writes. Use a Queue. It comes with the error that
// said so.
var ErrNoURing = uring.ErrUnavailable

// URingQueue is a TAP queue whose batches go through io_uring: Write puts
// one write per frame in the ring and enters the kernel once for the
// batch, Read does the same with reads. tun marks its files FMODE_NOWAIT
// (drivers/net/tun.c, Linux 6.4), so the kernel runs each request inline
// within that io_uring_enter, in order, through the same tun_get_user or
// tun_do_read a write() or read() runs: what a batch saves is the system
// call per frame, not the work per frame.
//
// It has Queue's methods, semantics and errors, but unlike a Queue it is
// used from one goroutine at a time, locked to its OS thread
// (runtime.LockOSThread), as forward's workers are: its ring takes
// requests from the thread of its first Read or Write only
// (IORING_SETUP_SINGLE_ISSUER). When a later goroutine on another thread
// takes it over (a worker of the forwarder's next Run), its first call
// finds the ring another thread's (EEXIST, nothing submitted) and makes a
// new ring on the caller's thread. Two goroutines writing one TAP queue at
// once each need a URingQueue of their own on its fd.
type URingQueue struct {
	fd    int
	batch *uring.Batch
	// want is how many reads the next Read starts with: one more than the
	// last Read found, so a steady trickle costs one read that finds
	// nothing, as a read() loop's closing EAGAIN does.
	want int
}

// NewURingQueue batches fd's reads and writes, up to batch frames per
// io_uring_enter, through a ring of its own. Make it before frames are
// queued for reading (see uring.NewBatch). The caller keeps ownership of
// fd and closes the queue first. Errors for a kernel or fd without usable
// io_uring come with ErrNoURing.
func NewURingQueue(fd, batch int) (*URingQueue, error) {
	b, err := uring.NewBatch(fd, batch)
	if err != nil {
		return nil, fmt.Errorf("batched I/O on a TAP queue: %w", err)
	}
	return &URingQueue{fd: fd, batch: b, want: 1}, nil
}

// Close releases the ring; fd stays open.
func (q *URingQueue) Close() error { return q.batch.Close() }

// Fd is the queue's descriptor, for polling.
func (q *URingQueue) Fd() int { return q.fd }

// Write writes bufs[i][offset:], a batch per io_uring_enter, and returns how
// many the TAP took; a short count n comes with the error of bufs[n]. The
// frames after a failed one in its batch are not written (the writes are a
// chain), so writing again from bufs[n+1] goes on where it stopped.
func (q *URingQueue) Write(bufs [][]byte, offset int) (int, error) {
	if len(bufs) == 1 {
		// One frame: a write() is cheaper than an SQE, a CQE and the
		// same write around them (BenchmarkTAPWrite, batch=1).
		return (&Queue{fd: q.fd}).Write(bufs, offset)
	}
	done := 0
	for done < len(bufs) {
		k := min(len(bufs)-done, q.batch.Size())
		// When the ring fails, its error is the Result of every write
		// it did not finish.
		if q.batch.Write(bufs[done:done+k], offset) == unix.EEXIST && q.rebind() {
			q.batch.Write(bufs[done:done+k], offset)
		}
		for i := range k {
			if _, err := q.batch.Result(i); err != nil {
				return done + i, err
			}
		}
		done += k
	}
	return len(bufs), nil
}

// Read reads up to len(bufs) frames into bufs[i][offset:] and sets
// sizes[i], as Queue.Read does: it stops when a read finds nothing queued
// (EAGAIN when none did), a read that fills its buffer may have been cut
// short, and it handles all n frames before reporting another error.
func (q *URingQueue) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	limit := min(len(bufs), len(sizes))
	n := 0
	var err error
	for n < limit {
		k := min(limit-n, q.want, q.batch.Size())
		got, empty, rerr := q.readBatch(bufs[n:n+k], sizes[n:n+k], offset)
		n += got
		if err = rerr; err != nil || empty {
			break
		}
		q.want = 2 * k // all k found a frame: there may be more
	}
	q.want = max(1, min(n+1, limit))
	if n == 0 && err == nil {
		err = unix.EAGAIN
	}
	return n, err
}

// readBatch issues len(bufs) reads at once and packs the frames they got
// to the front of bufs, in the order the reads ran. empty says a read
// found nothing queued; err is the first error other than EAGAIN.
func (q *URingQueue) readBatch(bufs [][]byte, sizes []int, offset int) (got int, empty bool, err error) {
	// When the ring fails, its error is the Result of every read it did
	// not finish: EAGAIN (no room for requests) reads as nothing queued.
	if q.batch.Read(bufs, offset) == unix.EEXIST && q.rebind() {
		q.batch.Read(bufs, offset)
	}
	for i := range bufs {
		m, rerr := q.batch.Result(i)
		switch {
		case rerr == unix.EAGAIN:
			empty = true
		case rerr != nil:
			if err == nil {
				err = rerr
			}
		default:
			// A frame after a read that found none arrived meanwhile:
			// keep the frames at the front, in order.
			if i != got {
				copy(bufs[got][offset:], bufs[i][offset:offset+m])
			}
			sizes[got] = m
			got++
		}
	}
	return got, empty, err
}

// rebind replaces a ring another thread submitted to first with a new one
// for the calling thread, and says whether it could; if not, the old
// ring's EEXIST stays every request's result.
func (q *URingQueue) rebind() bool {
	b, err := uring.NewBatch(q.fd, q.batch.Size())
	if err != nil {
		return false
	}
	q.batch.Close()
	q.batch = b
	return true
}
