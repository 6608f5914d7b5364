package fabric

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// From says where a frame came from. A guest's worker learns from it on
// which side an address lives: a frame from the wire tells that its source
// is on the wire, one from the TAP that its source is behind the TAP.
type From uint8

// Where frames come from; Unknown is also what a Table answers for an
// address it has not learned.
const (
	Unknown From = iota
	Wire
	TAP
	Guest
)

// Tag travels with a frame through an inbox.
type Tag struct {
	From From
	// Guest is the guest a frame From Guest came from.
	Guest uint8
	// Copy: another destination got the frame first (a flood's copy), so
	// it does not count as the sender's transmission.
	Copy bool
}

// Arrivals is what was offered to an inbox since its owner last took from
// it: Frames and Bytes (vnet headers left out) whether it took them or not,
// and Full, those it dropped because it had no room.
type Arrivals struct {
	Frames, Bytes, Full uint64
}

// Inbox holds frames for one worker until the worker writes them: a
// bounded ring of buffers carved once, filled by any worker (copying the
// frame in), emptied by its owner alone. A full inbox drops what comes (a
// slow consumer never stalls the others). The owner takes a run of slots,
// writes them without the lock, and only then releases them, so a
// producer never overwrites a slot in use.
type Inbox struct {
	mu      sync.Mutex
	slots   [][]byte
	sizes   []int
	tags    []Tag
	head    uint64   // the oldest slot not yet released
	tail    uint64   // the next slot to fill
	arrived Arrivals // since the last Take
	efd     int      // readable while frames wait; written once per producer batch
	one     [8]byte  // what Wake writes (never changes: producers share it)
	drain   [8]byte  // what Settle reads into (the owner's)
}

// NewInbox returns an inbox of slots frames of up to size bytes each
// (vnet header included).
func NewInbox(slots, size int) (*Inbox, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	all := make([]byte, slots*size)
	b := &Inbox{slots: make([][]byte, slots), sizes: make([]int, slots), tags: make([]Tag, slots), efd: efd, one: [8]byte{1}}
	for i := range b.slots {
		b.slots[i] = all[i*size : (i+1)*size : (i+1)*size]
	}
	return b, nil
}

// Push copies frame (a vnet header and a frame) into a free slot; false
// when the inbox is full (it is counted in Arrivals either way).
func (b *Inbox) Push(frame []byte, tag Tag) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrived.Frames++
	if len(frame) > vnethdr.Len {
		b.arrived.Bytes += uint64(len(frame) - vnethdr.Len)
	}
	n := uint64(len(b.slots))
	if b.tail-b.head == n {
		b.arrived.Full++
		return false
	}
	i := b.tail % n
	b.sizes[i] = copy(b.slots[i], frame)
	b.tags[i] = tag
	b.tail++
	return true
}

// Fd is readable while frames wait (after a Wake).
func (b *Inbox) Fd() int { return b.efd }

// Wake makes the owner's poll see the frames pushed (once per batch).
func (b *Inbox) Wake() {
	unix.Write(b.efd, b.one[:])
}

// Settle clears Fd once the owner's poll found it readable, so that the
// next poll sleeps until another batch is pushed. Frames pushed before it
// are taken on the owner's next turn, which comes before its next poll:
// no wake-up is lost.
func (b *Inbox) Settle() {
	unix.Read(b.efd, b.drain[:])
}

// Take returns up to len(out) waiting frames, in order, in out, with their
// tags in tags, and what arrived since the last Take. The frames stay the
// owner's until Release; frames taken and not released come again.
func (b *Inbox) Take(out [][]byte, tags []Tag) (int, Arrivals) {
	b.mu.Lock()
	head, tail, a := b.head, b.tail, b.arrived
	b.arrived = Arrivals{}
	b.mu.Unlock()
	n := uint64(len(b.slots))
	k := 0
	for s := head; s < tail && k < len(out) && k < len(tags); s++ {
		i := s % n
		out[k], tags[k] = b.slots[i][:b.sizes[i]], b.tags[i]
		k++
	}
	return k, a
}

// Release frees the k oldest slots and reports whether frames still wait.
func (b *Inbox) Release(k int) (left bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.head += uint64(k)
	return b.tail != b.head
}

// Close releases Fd.
func (b *Inbox) Close() error { return unix.Close(b.efd) }
