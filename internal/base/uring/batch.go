package uring

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Batch reads or writes batches of buffers on one fd through a ring of its
// own: one SQE per buffer, one io_uring_enter for the batch, each
// completion mapped back to its buffer by its user_data. Every request
// carries RWF_NOWAIT, so the kernel issues it inline (no io-wq worker
// thread) and a read with nothing queued or a write with no room completes
// at once with EAGAIN instead of waiting on a poll: when Read or Write
// returns, nothing is in flight.
//
// A Batch is used from one goroutine, and from its first Read or Write on
// from one OS thread (runtime.LockOSThread): the ring takes submissions
// from that thread only (IORING_SETUP_SINGLE_ISSUER); from another, Read
// and Write fail with EEXIST.
type Batch struct {
	r    *ring
	fd   int32
	gen  uint32   // the batch's number, in the top half of its user_data
	err  error    // why the last batch stopped early, for the results it lacks
	bufs [][]byte // the last batch's buffers, by index; holding them keeps them reachable
	res  []int32
	seen []uint32 // the batch (gen) each result belongs to
}

// NewBatch makes a Batch of up to size requests on fd; the caller keeps
// ownership of fd. Errors for a kernel or an fd without usable io_uring
// come with ErrUnavailable (see checkNowait).
func NewBatch(fd, size int) (*Batch, error) {
	if err := checkNowait(fd); err != nil {
		return nil, err
	}
	r, err := newRing(uint32(size), setupFlags)
	if err != nil {
		return nil, err
	}
	return newBatch(r, fd), nil
}

// checkNowait checks that the kernel has the opcodes a Batch uses and that
// fd takes non-blocking io_uring I/O, with a zero-length read through a
// short-lived ring of no thread's: it moves nothing on a TUN fd (on a
// datagram socket it would discard a queued datagram).
func checkNowait(fd int) error {
	r, err := newRing(1, setupSubmitAll|setupCoopTaskrun, opRead, opWrite)
	if err != nil {
		return err
	}
	defer r.close()
	b := newBatch(r, fd)
	if err := b.Read([][]byte{{}}, 0); err != nil {
		return fmt.Errorf("io_uring read on fd %d: %w", fd, err)
	}
	switch _, err := b.Result(0); err {
	case nil, unix.EAGAIN:
		return nil
	case unix.EOPNOTSUPP:
		return fmt.Errorf("%w: fd %d takes no non-blocking io_uring I/O (RWF_NOWAIT: EOPNOTSUPP; a TUN fd does since Linux 6.4)", ErrUnavailable, fd)
	default:
		return fmt.Errorf("io_uring zero-length read on fd %d: %w", fd, err)
	}
}

func newBatch(r *ring, fd int) *Batch {
	n := len(r.sqes)
	return &Batch{r: r, fd: int32(fd), bufs: make([][]byte, n), res: make([]int32, n), seen: make([]uint32, n)}
}

// Size is the most buffers one Read or Write takes.
func (b *Batch) Size() int { return len(b.res) }

// Close releases the ring.
func (b *Batch) Close() error { return b.r.close() }

// Write writes bufs[i][offset:] for every i, len(bufs) <= Size(), as a
// chain: each write starts once the one before it succeeded, and when one
// fails the rest complete with ECANCELED, unwritten. Result says how each
// went. An error is about the ring, not a write (io_uring_enter failed):
// the writes not submitted are withdrawn, and Result gives them that error.
func (b *Batch) Write(bufs [][]byte, offset int) error { return b.do(opWrite, bufs, offset) }

// Read reads into bufs[i][offset:] for every i, len(bufs) <= Size(), each
// read on its own (a read shorter than its buffer would end a chain), in
// order. Result says how each went; an error is as for Write.
func (b *Batch) Read(bufs [][]byte, offset int) error { return b.do(opRead, bufs, offset) }

func (b *Batch) do(op uint8, bufs [][]byte, offset int) error {
	n := len(bufs)
	b.gen++
	b.err = nil
	for i := range n {
		s := b.r.prepare()
		if s == nil { // more buffers than Size
			return b.fail(unix.EINVAL)
		}
		buf := bufs[i][offset:]
		s.opcode, s.fd, s.rwFlags, s.userData = op, b.fd, rwfNowait, uint64(b.gen)<<32|uint64(i)
		if op == opWrite && i < n-1 {
			s.flags = sqeIOLink
		}
		s.setBuf(buf)
		b.bufs[i], b.seen[i] = buf, b.gen-1
	}
	for left := n; left > 0; {
		if err := b.r.submit(uint32(left), nil); err != nil && err != unix.EINTR {
			return b.fail(err)
		}
		left -= b.reap(n)
	}
	return nil
}

func (b *Batch) fail(err error) error {
	b.err = err
	b.r.unqueue()
	return err
}

// reap reads the waiting completions and returns how many were the first
// of a request of this batch; others (of an earlier batch that failed, a
// user_data out of range, a second completion) are passed over.
func (b *Batch) reap(n int) int {
	ready, got := b.r.ready(), 0
	for j := range ready {
		c := b.r.completion(j)
		i := c.userData & 0xffffffff
		if c.userData>>32 == uint64(b.gen) && i < uint64(n) && b.seen[i] != b.gen {
			b.seen[i], b.res[i] = b.gen, c.res
			got++
		}
	}
	b.r.advance(ready)
	return got
}

// Result is the outcome of request i of the last batch: how many bytes it
// moved, never more than its buffer holds whatever the completion said,
// or its errno.
func (b *Batch) Result(i int) (int, error) {
	if b.seen[i] != b.gen {
		return 0, b.err
	}
	switch res := b.res[i]; {
	case res >= 0:
		return min(int(res), len(b.bufs[i])), nil
	case res >= -maxErrno:
		return 0, unix.Errno(-res)
	}
	return 0, unix.EIO
}
