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
// addresses and their inboxes, one per queue pair. It does not change
// after New, so any worker may deliver through it at any time.
type Switch struct {
	guests []guest
	byMAC  map[[6]byte]int
}

type guest struct {
	inboxes []*Inbox   // one per queue pair
	active  func() int // the pairs the guest runs now (nil: all)
}

// A Port is a guest as New takes it: its address, and its queue pairs,
// each with an inbox; Active, when not nil, says how many leading pairs
// the guest runs now, and frames for it are spread over those by flow.
type Port struct {
	MAC    net.HardwareAddr
	Queues int // 0 means 1
	Active func() int
}

// ErrMAC: a guest's address is no unicast Ethernet address, or two guests
// have one address.
var ErrMAC = errors.New("guest addresses must be unicast Ethernet addresses, one each")

// New returns a switch for the guests ports (at most MaxGuests), each
// queue pair with an inbox of up to frames frames and bytes bytes.
func New(ports []Port, frames, bytes int) (*Switch, error) {
	if len(ports) > MaxGuests {
		return nil, fmt.Errorf("%d guest ports, at most %d", len(ports), MaxGuests)
	}
	s := &Switch{byMAC: map[[6]byte]int{}}
	for i, p := range ports {
		if len(p.MAC) != 6 || p.MAC[0]&1 != 0 {
			return nil, fmt.Errorf("%w: guest %d has %s", ErrMAC, i, p.MAC)
		}
		if _, dup := s.byMAC[[6]byte(p.MAC)]; dup {
			return nil, fmt.Errorf("%w: two guests have %s", ErrMAC, p.MAC)
		}
		s.byMAC[[6]byte(p.MAC)] = i
	}
	for _, p := range ports {
		g := guest{active: p.Active}
		for range max(p.Queues, 1) {
			in, err := NewInbox(frames, bytes)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("make an eventfd: %w", os.NewSyscallError("eventfd", err))
			}
			g.inboxes = append(g.inboxes, in)
		}
		s.guests = append(s.guests, g)
	}
	return s, nil
}

// Inbox is the inbox of guest i's queue pair q.
func (s *Switch) Inbox(i, q int) *Inbox { return s.guests[i].inboxes[q] }

// IsGuest reports whether dst is a guest's address.
func (s *Switch) IsGuest(dst [6]byte) bool {
	_, ok := s.byMAC[dst]
	return ok
}

// Deliver hands b (a vnet header and a frame) to the guests its destination
// names, never back to the guest it came from (tag.From Guest): the one
// with that address, or every guest for a group address, each on the
// queue pair its flow hashes to. It reports whether b was for a guest
// alone, and marks in dirty the guests whose inbox took it (Wake them
// after the batch). An inbox with no room for it, or none within its
// sender's share (Inbox), drops it, and its owner finds that in Arrivals.
func (s *Switch) Deliver(b []byte, tag Tag, dirty *uint64) (alone bool) {
	except := -1
	if tag.From == Guest {
		except = int(tag.Guest)
	}
	dst := b[vnethdr.Len : vnethdr.Len+6]
	if dst[0]&1 != 0 {
		for i := range s.guests {
			if i != except && s.guests[i].inbox(b).Push(b, tag) {
				*dirty |= 1 << i
			}
		}
		return false
	}
	i, ok := s.byMAC[[6]byte(dst)]
	if !ok || i == except {
		return false
	}
	if s.guests[i].inbox(b).Push(b, tag) {
		*dirty |= 1 << i
	}
	return true
}

// inbox is the inbox of the queue pair b's flow goes to: its flow hash
// spread over the pairs the guest runs (the first when it runs none).
func (g *guest) inbox(b []byte) *Inbox {
	n := len(g.inboxes)
	if n == 1 {
		return g.inboxes[0]
	}
	if g.active != nil {
		n = min(max(g.active(), 1), n)
	}
	return g.inboxes[(uint64(FlowHash(b[vnethdr.Len:]))*uint64(n))>>32]
}

// Wake wakes the guests' inboxes that got frames, among the guests marked
// in dirty, and clears it. With no guests marked it does nothing, on a nil
// Switch too.
func (s *Switch) Wake(dirty *uint64) {
	for d := *dirty; d != 0; d &= d - 1 {
		for _, in := range s.guests[bits.TrailingZeros64(d)].inboxes {
			in.wakePushed()
		}
	}
	*dirty = 0
}

// Close releases the inboxes.
func (s *Switch) Close() {
	for _, g := range s.guests {
		for _, in := range g.inboxes {
			in.Close()
		}
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
