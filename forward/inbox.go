package forward

import (
	"sync"

	"golang.org/x/sys/unix"
)

// side says where a frame came from, so a guest's worker learns where an
// address lives: a frame from the NIC tells that its source is on the
// wire, one from the TAP that its source is behind the TAP.
type side uint8

const (
	sideUnknown side = iota
	sideNIC
	sideTAP
	sideGuest
)

// inbox holds frames for one guest until its worker writes them into the
// guest's receive queue: a bounded ring of buffers carved once, filled by
// any worker (copying the frame in), emptied by the guest's worker alone.
// A full inbox drops what comes (a slow guest never stalls the others).
// The consumer takes a run of slots, writes them without the lock, and
// only then frees them, so a producer never overwrites a slot in use.
type inbox struct {
	mu    sync.Mutex
	slots [][]byte
	sizes []int
	from  []side
	head  uint64  // the oldest slot not yet freed
	tail  uint64  // the next slot to fill
	efd   int     // readable while frames wait; written once per producer batch
	one   [8]byte // what wake writes (never changes: producers share it)
	drain [8]byte // what take reads into (the consumer's)
}

func newInbox(n int) (*inbox, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &inbox{slots: makeBufs(n, hdrLen+frameCap), sizes: make([]int, n), from: make([]side, n), efd: efd, one: [8]byte{1}}, nil
}

// push copies b (a vnet header and a frame) into a free slot; false when
// the inbox is full.
func (b *inbox) push(frame []byte, from side) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := uint64(len(b.slots))
	if b.tail-b.head == n {
		return false
	}
	i := b.tail % n
	b.sizes[i] = copy(b.slots[i], frame)
	b.from[i] = from
	b.tail++
	return true
}

// wake makes the consumer's poll see the frames pushed (once per batch).
func (b *inbox) wake() {
	unix.Write(b.efd, b.one[:])
}

// settle clears the eventfd once the consumer's poll found it readable, so
// that the next poll sleeps until another batch is pushed. Frames pushed
// before it are taken on the worker's next turn, which comes before its
// next poll: no wake-up is lost.
func (b *inbox) settle() {
	unix.Read(b.efd, b.drain[:])
}

// take returns up to len(out) waiting frames, in order, in out, with where
// they came from in from; they stay the consumer's until release.
func (b *inbox) take(out [][]byte, from []side) int {
	b.mu.Lock()
	head, tail := b.head, b.tail
	b.mu.Unlock()
	n := uint64(len(b.slots))
	k := 0
	for s := head; s < tail && k < len(out); s++ {
		i := s % n
		out[k], from[k] = b.slots[i][:b.sizes[i]], b.from[i]
		k++
	}
	return k
}

// release frees the k oldest slots and reports whether frames still wait.
func (b *inbox) release(k int) (left bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.head += uint64(k)
	return b.tail != b.head
}

func (b *inbox) close() error { return unix.Close(b.efd) }
