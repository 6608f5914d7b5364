package fabric

import (
	"sync"
	"sync/atomic"

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

// Inbox holds frames for one worker until the worker writes them: up to a
// number of frames, packed one after another into a byte ring carved once,
// filled by any worker (copying the frame in), emptied by its owner alone.
// Small frames fill its frame count, large ones its bytes; a full inbox
// drops what comes (a slow consumer never stalls the others). The room is
// shared by sender (each guest, the wire, the TAP: a frame's Tag says
// which), not first come first served: a sender holding Share times the
// frames or the bytes the inbox has left free is refused, so one sender
// flooding alone holds at most three quarters of it (SoleShare), and
// however many flood, room stays free for a sender that sends little (a
// guest that floods on all its queue pairs reaches every TAP queue's
// inbox, but takes no room another sender needs). The owner takes a run
// of frames, writes them without the lock, and only then releases them,
// so a producer never overwrites a frame in use.
type Inbox struct {
	mu      sync.Mutex
	buf     []byte  // the byte ring
	frames  []entry // the frame ring: where each frame lies in buf
	head    uint64  // the oldest frame not yet released
	tail    uint64  // the next frame to fill
	wr      int     // where in buf the next frame goes, when it fits there
	arrived Arrivals
	used    int              // bytes in buf held by frames not yet released
	pushed  atomic.Bool      // frames came since the last Wake
	efd     int              // readable while frames wait; written once per producer batch
	one     [8]byte          // what Wake writes (never changes: producers share it)
	drain   [8]byte          // what Settle reads into (the owner's)
	held    [senders]holding // what each sender's frames hold of the inbox
}

type entry struct {
	off, len int
	tag      Tag
	sender   uint8
}

// Share is how many times the room an inbox has left free (in frames and
// in bytes) one sender may hold before its frames are refused: the
// dynamic threshold of shared-memory switches (Choudhury and Hahne, 1998).
// k senders that keep it full hold Share/(Share*k+1) of it each, and
// 1/(Share*k+1) stays free for a sender that sends little.
const Share = 3

// SoleShare is how many of n frames (or bytes) one sender alone may fill:
// the least h at which h >= Share*(n-h).
func SoleShare(n int) int { return (Share*n + Share) / (Share + 1) }

// senders are those whose frames an inbox tells apart: each guest, then
// one per From of the others.
const senders = MaxGuests + 4

// holding is what one sender's frames hold of an inbox.
type holding struct{ frames, bytes int }

// sender is the index of the sender of a frame with tag t in Inbox.held.
func (t Tag) sender() uint8 {
	if t.From == Guest {
		return t.Guest % MaxGuests
	}
	return MaxGuests + uint8(t.From)%4
}

// NewInbox returns an inbox of up to frames frames and bytes bytes of them
// (vnet headers included); bytes must hold two of the largest frames.
func NewInbox(frames, bytes int) (*Inbox, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &Inbox{buf: make([]byte, bytes), frames: make([]entry, frames), efd: efd, one: [8]byte{1}}, nil
}

// Push copies frame (a vnet header and a frame) into the inbox; false
// when it has no room (it is counted in Arrivals either way).
func (b *Inbox) Push(frame []byte, tag Tag) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrived.Frames++
	if len(frame) > vnethdr.Len {
		b.arrived.Bytes += uint64(len(frame) - vnethdr.Len)
	}
	s := tag.sender()
	h := &b.held[s]
	off, ok := b.room(len(frame))
	if !ok || !b.fair(h) {
		b.arrived.Full++
		return false
	}
	copy(b.buf[off:], frame)
	b.frames[b.tail%uint64(len(b.frames))] = entry{off: off, len: len(frame), tag: tag, sender: s}
	b.tail++
	b.wr = off + len(frame)
	h.frames++
	h.bytes += len(frame)
	b.used += len(frame)
	b.pushed.Store(true)
	return true
}

// fair reports whether a sender holding h may have one more frame in the
// inbox: it holds less than Share times the frames and the bytes left free.
func (b *Inbox) fair(h *holding) bool {
	return h.frames < Share*(len(b.frames)-int(b.tail-b.head)) && h.bytes < Share*(len(b.buf)-b.used)
}

// room finds where n bytes go in the byte ring: after the newest frame, or
// at the start when they do not fit before its end and the oldest frame
// leaves room there.
func (b *Inbox) room(n int) (int, bool) {
	if b.tail == b.head {
		return 0, n <= len(b.buf) // empty: start again at the front
	}
	if b.tail-b.head == uint64(len(b.frames)) {
		return 0, false
	}
	rd := b.frames[b.head%uint64(len(b.frames))].off
	switch {
	case b.wr > rd && b.wr+n <= len(b.buf): // in use: [rd, wr)
		return b.wr, true
	case b.wr > rd:
		return 0, n <= rd
	default: // wrapped: in use [rd, end) and [0, wr)
		return b.wr, b.wr+n <= rd
	}
}

// Fd is readable while frames wait (after a Wake).
func (b *Inbox) Fd() int { return b.efd }

// Wake makes the owner's poll see the frames pushed (once per batch).
func (b *Inbox) Wake() {
	b.pushed.Store(false)
	unix.Write(b.efd, b.one[:])
}

// wakePushed wakes the owner when frames came since the last Wake.
func (b *Inbox) wakePushed() {
	if b.pushed.Load() && b.pushed.Swap(false) {
		unix.Write(b.efd, b.one[:])
	}
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
	n := uint64(len(b.frames))
	k := 0
	for s := head; s < tail && k < len(out) && k < len(tags); s++ {
		e := &b.frames[s%n]
		out[k], tags[k] = b.buf[e.off:e.off+e.len:e.off+e.len], e.tag
		k++
	}
	return k, a
}

// Release frees the k oldest frames and reports whether frames still wait.
func (b *Inbox) Release(k int) (left bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := int(b.head % uint64(len(b.frames)))
	for range k {
		e := &b.frames[i]
		h := &b.held[e.sender]
		h.frames--
		h.bytes -= e.len
		b.used -= e.len
		if i++; i == len(b.frames) {
			i = 0
		}
	}
	b.head += uint64(k)
	return b.tail != b.head
}

// Close releases Fd.
func (b *Inbox) Close() error { return unix.Close(b.efd) }
