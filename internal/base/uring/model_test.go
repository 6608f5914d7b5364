package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// The ring and Batch against a model kernel: it consumes SQEs and posts
// CQEs in the shared queues the way io_uring does, with every choice the
// real kernel may make (how many SQEs it takes, how many completions it
// posts before returning, their order, their results, EINTR) and some it
// should never make (a result past the buffer, an errno out of range, a
// completion with a user_data of no request, a second completion), each
// taken from the fuzzer's bytes.

// choices hands out the fuzzer's decisions; once they run out every
// decision is its default (def), which lets a batch finish.
type choices struct{ b []byte }

func (c *choices) pick(n, def int) int {
	if len(c.b) == 0 || n <= 1 {
		return def
	}
	v := int(c.b[0]) % n
	c.b = c.b[1:]
	return v
}

func (c *choices) u32(def uint32) uint32 {
	if len(c.b) < 4 {
		return def
	}
	v := uint32(c.b[0]) | uint32(c.b[1])<<8 | uint32(c.b[2])<<16 | uint32(c.b[3])<<24
	c.b = c.b[4:]
	return v
}

// model is the kernel's side of a ring in Go memory.
type model struct {
	t                              testing.TB
	c                              *choices
	sqHead, sqTail, cqHead, cqTail atomic.Uint32
	r                              *ring
	inflight                       []sqe    // consumed, not yet completed
	overflow                       []cqe    // posted while the CQ was full (IORING_FEAT_NODROP)
	seen                           []sqe    // every SQE consumed, in order
	first                          []uint64 // user_data of requests completed, in the order posted
	res                            map[uint64]int32
	fatal                          bool // an enter failed with EBADF
}

// newModel makes a ring of entries SQEs (a power of two) whose queues
// start at the given indices, so that they wrap where the test wants.
func newModel(t testing.TB, c *choices, entries int, sqStart, cqStart uint32) *model {
	m := &model{t: t, c: c, res: map[uint64]int32{}}
	m.sqHead.Store(sqStart)
	m.sqTail.Store(sqStart)
	m.cqHead.Store(cqStart)
	m.cqTail.Store(cqStart)
	m.r = &ring{
		sq:    queue{head: &m.sqHead, tail: &m.sqTail, mask: uint32(entries - 1)},
		cq:    queue{head: &m.cqHead, tail: &m.cqTail, mask: uint32(2*entries - 1)},
		sqes:  make([]sqe, entries),
		cqes:  make([]cqe, 2*entries),
		next:  sqStart,
		head:  cqStart,
		enter: nil,
		close: func() error { return nil },
	}
	m.r.enter = m.enter
	return m
}

func (m *model) enter(toSubmit, minComplete, flags uint32, _ *unix.Timespec) (int, error) {
	if waiting := m.sqTail.Load() - m.sqHead.Load(); toSubmit > waiting {
		m.t.Fatalf("enter: to_submit %d with %d SQEs queued", toSubmit, waiting)
	}
	if (flags&enterGetEvents != 0) != (minComplete > 0) {
		m.t.Fatalf("enter: flags %#x with min_complete %d", flags, minComplete)
	}
	switch m.c.pick(16, 2) {
	case 0:
		return 0, unix.EINTR
	case 1:
		if m.c.pick(4, 1) == 0 {
			m.fatal = true
			return 0, unix.EBADF
		}
	}
	// Consume some or all of the SQEs (io_submit_sqes), in order.
	take := toSubmit - uint32(m.c.pick(int(toSubmit)+1, 0))
	for range take {
		h := m.sqHead.Load()
		s := m.r.sqes[h&m.r.sq.mask]
		m.seen = append(m.seen, s)
		m.inflight = append(m.inflight, s)
		m.sqHead.Store(h + 1)
	}
	// Post some completions, in any order; a wait returns with at least
	// one when any is due (a short completion), and with all by default.
	n := len(m.inflight)
	if n > 0 {
		lo := 0
		if minComplete > 0 {
			lo = 1
		}
		n = lo + m.c.pick(n-lo+1, n-lo)
	}
	for range n {
		i := m.c.pick(len(m.inflight), 0)
		s := m.inflight[i]
		m.inflight = append(m.inflight[:i], m.inflight[i+1:]...)
		res := m.result(s)
		if _, dup := m.res[s.userData]; !dup {
			m.res[s.userData] = res
			m.first = append(m.first, s.userData)
		}
		m.post(cqe{userData: s.userData, res: res})
		switch m.c.pick(8, 0) {
		case 1: // a completion of no request
			m.post(cqe{userData: uint64(m.c.u32(7)) << 16, res: 1})
		case 2: // a second completion of the same request
			m.post(cqe{userData: s.userData, res: -int32(unix.EIO)})
		}
	}
	m.flush()
	return int(take), nil
}

// result is what the model says request s did.
func (m *model) result(s sqe) int32 {
	switch m.c.pick(8, 0) {
	case 1:
		return int32(s.len / 2) // short
	case 2:
		return int32(s.len) + 1 + int32(m.c.pick(1<<8, 0)) // past the buffer
	case 3:
		return -int32(unix.EAGAIN)
	case 4:
		return -int32(unix.ECANCELED)
	case 5:
		return -maxErrno - 1 - int32(m.c.pick(1<<8, 0)) // no errno
	case 6:
		return 0
	}
	return int32(s.len)
}

func (m *model) post(c cqe) {
	m.overflow = append(m.overflow, c)
	m.flush()
}

// flush moves held completions into the CQ while it has room.
func (m *model) flush() {
	for len(m.overflow) > 0 && m.cqTail.Load()-m.cqHead.Load() < uint32(len(m.r.cqes)) {
		t := m.cqTail.Load()
		m.r.cqes[t&m.r.cq.mask] = m.overflow[0]
		m.overflow = m.overflow[1:]
		m.cqTail.Store(t + 1)
	}
}

// want is what Result must say of a request the model completed with res
// on a buffer of n bytes.
func want(res int32, n int) (int, error) {
	switch {
	case res >= 0:
		return min(int(res), n), nil
	case res >= -maxErrno:
		return 0, unix.Errno(-res)
	}
	return 0, unix.EIO
}

// runModel drives batches of buffers of distinct lengths through a Batch
// on the model and checks each against what the model did.
func runModel(t *testing.T, data []byte) {
	c := &choices{b: data}
	entries := 1 << c.pick(7, 3)
	m := newModel(t, c, entries, c.u32(^uint32(0)-3), c.u32(^uint32(0)-5))
	b := newBatch(m.r, 7)
	b.gen = c.u32(^uint32(0) - 1) // the batch number wraps too
	bufs := make([][]byte, entries)
	for i := range bufs {
		bufs[i] = make([]byte, 16+i)
	}
	for round := 0; round < 8 && !m.fatal; round++ {
		n, offset := 1+c.pick(entries, entries-1), c.pick(16, 0)
		op, do := opRead, b.Read
		if c.pick(2, 0) == 1 {
			op, do = opWrite, b.Write
		}
		seen, first := len(m.seen), len(m.first)
		err := do(bufs[:n], offset)
		checkBatch(t, m, b, op, bufs[:n], offset, m.seen[seen:], m.first[first:], err)
	}
}

func checkBatch(t testing.TB, m *model, b *Batch, op uint8, bufs [][]byte, offset int, sqes []sqe, done []uint64, err error) {
	t.Helper()
	if err != nil && !(m.fatal && errors.Is(err, unix.EBADF)) {
		t.Fatalf("batch failed with %v, the model failed none", err)
	}
	if err == nil && len(sqes) != len(bufs) {
		t.Fatalf("%d requests reached the kernel for %d buffers", len(sqes), len(bufs))
	}
	if m.sqTail.Load() != m.sqHead.Load() || m.r.next != m.sqHead.Load() {
		t.Fatalf("SQEs left queued: head %d tail %d next %d", m.sqHead.Load(), m.sqTail.Load(), m.r.next)
	}
	for k, s := range sqes {
		i := int(s.userData & 0xffffffff)
		link := op == opWrite && i < len(bufs)-1
		if s.userData>>32 != uint64(b.gen) || i != k || s.opcode != op || s.rwFlags != rwfNowait ||
			s.len != uint32(len(bufs[i])-offset) || (s.flags == sqeIOLink) != link || s.flags&^sqeIOLink != 0 {
			t.Fatalf("request %d of %d: %+v (batch %d, op %d)", k, len(bufs), s, b.gen, op)
		}
	}
	results := map[int]int32{}
	for _, ud := range done {
		if ud>>32 == uint64(b.gen) {
			results[int(ud&0xffffffff)] = m.res[ud]
		}
	}
	for i := range bufs {
		n, rerr := b.Result(i)
		wn, werr := 0, err
		if res, ok := results[i]; ok {
			wn, werr = want(res, len(bufs[i])-offset)
		}
		if n != wn || rerr != werr {
			t.Fatalf("Result(%d) = %d, %v; want %d, %v", i, n, rerr, wn, werr)
		}
		if n > len(bufs[i])-offset {
			t.Fatalf("Result(%d) = %d, past its %d-byte buffer", i, n, len(bufs[i])-offset)
		}
	}
}

func FuzzBatch(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 0xf0, 0xff, 0xff, 0xff, 0xfa, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff, 7, 0, 1, 2, 2, 1, 5, 3, 1})
	f.Add([]byte("\x06\x00\x00\x00\x80\x00\x00\x00\x80\x00\x00\x00\x00\x3f\x02\x01\x05\x07\x01\x04\x03\x02\x01\x00\x09\x0f"))
	f.Fuzz(runModel)
}

// TestRingWraps runs full batches through queue indices and batch numbers
// that wrap, completed in reverse order.
func TestRingWraps(t *testing.T) {
	for _, entries := range []int{1, 2, 8, 64} {
		t.Run(fmt.Sprint(entries), func(t *testing.T) {
			c := &choices{}
			m := newModel(t, c, entries, ^uint32(0)-uint32(entries)/2, ^uint32(0)-uint32(entries))
			b := newBatch(m.r, 7)
			b.gen = ^uint32(0) - 2
			bufs := make([][]byte, entries)
			for i := range bufs {
				bufs[i] = make([]byte, 16+i)
			}
			for range 10 {
				seen, first := len(m.seen), len(m.first)
				// Reverse order: always complete the last in flight.
				m.c = &choices{b: reverse(entries)}
				err := b.Write(bufs, 0)
				checkBatch(t, m, b, opWrite, bufs, 0, m.seen[seen:], m.first[first:], err)
				if len(m.first[first:]) != entries || m.first[first]&0xffffffff != uint64(entries-1) {
					t.Fatalf("completions %x", m.first[first:])
				}
			}
		})
	}
}

// reverse is the choices that make the model take every SQE of a batch of
// n and complete them all, last first, with full results (a pick among
// one option takes no byte).
func reverse(n int) []byte {
	b := []byte{2, 0} // no error, take all
	if n > 1 {
		b = append(b, byte(n-1)) // post all
	}
	for i := n - 1; i >= 0; i-- {
		if i > 0 {
			b = append(b, byte(i)) // the last in flight
		}
		b = append(b, 0, 0) // full result, no extra completion
	}
	return b
}
