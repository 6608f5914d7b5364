package fabric

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"os"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// MaxGuests bounds the guests: a worker marks those it handed frames to
// in a 64-bit mask.
const MaxGuests = 64

// Switch is the segment's guests as every worker sees them: their
// addresses and their inboxes. It does not change after New, so any worker
// may deliver through it at any time.
type Switch struct {
	inboxes []*Inbox
	byMAC   map[[6]byte]int
}

// ErrMAC: a guest's address is no unicast Ethernet address, or two guests
// have one address.
var ErrMAC = errors.New("fabric: guest addresses must be unicast Ethernet addresses, one each")

// New returns a switch for guests with the addresses macs (at most
// MaxGuests), each with an inbox of slots frames of up to size bytes.
func New(macs []net.HardwareAddr, slots, size int) (*Switch, error) {
	if len(macs) > MaxGuests {
		return nil, fmt.Errorf("fabric: %d guests, at most %d", len(macs), MaxGuests)
	}
	s := &Switch{byMAC: map[[6]byte]int{}}
	for i, mac := range macs {
		if len(mac) != 6 || mac[0]&1 != 0 {
			return nil, fmt.Errorf("%w: guest %d has %s", ErrMAC, i, mac)
		}
		if _, dup := s.byMAC[[6]byte(mac)]; dup {
			return nil, fmt.Errorf("%w: two guests have %s", ErrMAC, mac)
		}
		s.byMAC[[6]byte(mac)] = i
	}
	for range macs {
		in, err := NewInbox(slots, size)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("fabric: eventfd: %w", os.NewSyscallError("eventfd", err))
		}
		s.inboxes = append(s.inboxes, in)
	}
	return s, nil
}

// Inbox is guest i's inbox.
func (s *Switch) Inbox(i int) *Inbox { return s.inboxes[i] }

// IsGuest reports whether dst is a guest's address.
func (s *Switch) IsGuest(dst [6]byte) bool {
	_, ok := s.byMAC[dst]
	return ok
}

// Deliver hands b (a vnet header and a frame) to the guests its destination
// names, never back to the guest it came from (tag.From Guest): the one
// with that address, or every guest for a group address. It reports
// whether b was for a guest alone, and marks in dirty the guests whose
// inbox took it (Wake them after the batch). A full inbox drops it, and
// its owner finds that in Arrivals.
func (s *Switch) Deliver(b []byte, tag Tag, dirty *uint64) (alone bool) {
	except := -1
	if tag.From == Guest {
		except = int(tag.Guest)
	}
	dst := b[vnethdr.Len : vnethdr.Len+6]
	if dst[0]&1 != 0 {
		for i, in := range s.inboxes {
			if i != except && in.Push(b, tag) {
				*dirty |= 1 << i
			}
		}
		return false
	}
	i, ok := s.byMAC[[6]byte(dst)]
	if !ok || i == except {
		return false
	}
	if s.inboxes[i].Push(b, tag) {
		*dirty |= 1 << i
	}
	return true
}

// Wake wakes the guests marked in dirty and clears it. With no guests
// marked it does nothing, on a nil Switch too.
func (s *Switch) Wake(dirty *uint64) {
	for d := *dirty; d != 0; d &= d - 1 {
		s.inboxes[bits.TrailingZeros64(d)].Wake()
	}
	*dirty = 0
}

// Close releases the inboxes.
func (s *Switch) Close() {
	for _, in := range s.inboxes {
		in.Close()
	}
}

// MaxLearned bounds what a Table remembers, so that forged sources cannot
// make it grow for good: a full table starts again empty.
const MaxLearned = 4096

// Table is what one guest's worker learned of where addresses live, on the
// wire or behind the TAP, from the sources of the frames that reached the
// guest; the guest's answers then go there alone. Its owner alone uses it.
type Table struct {
	where map[[6]byte]From
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{where: make(map[[6]byte]From)} }

// Learn notes where the sources of frames (vnet header first) live, by
// their tags: only frames from the wire or the TAP teach anything.
func (t *Table) Learn(frames [][]byte, tags []Tag) {
	for i, b := range frames {
		from := tags[i].From
		if from != Wire && from != TAP {
			continue
		}
		src := [6]byte(b[vnethdr.Len+6 : vnethdr.Len+12])
		if src[0]&1 != 0 || t.where[src] == from {
			continue
		}
		if len(t.where) >= MaxLearned {
			clear(t.where)
		}
		t.where[src] = from
	}
}

// Lookup says where dst was learned to live: Wire, TAP or Unknown.
func (t *Table) Lookup(dst [6]byte) From { return t.where[dst] }
