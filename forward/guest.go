package forward

import (
	"fmt"
	"math/bits"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// GuestPort is a VM on the forwarder's segment besides the TAP and the NIC
// (a vhost-user port). Its own worker moves what the guest sends: to the
// guest its destination names, to the TAP or the NIC by what it learned of
// where an address lives, and, for broadcast, multicast and unknown
// unicast, everywhere else. The other workers hand it what is addressed to
// it through a bounded inbox, so a slow guest never stalls them: what does
// not fit is dropped and counted (DropGuestBusy).
type GuestPort struct {
	// Guest reads what the guest sent and writes what is for it, each frame
	// behind a 10-byte vnet header. Write may refuse a frame with
	// EOPNOTSUPP (an offload the guest did not take: it is segmented or its
	// checksum completed here) or EAGAIN (no room: the frames wait in the
	// inbox, and Fd says when there is).
	Guest Endpoint
	// MAC is the guest's address: unicast to it reaches it alone.
	MAC net.HardwareAddr
	// NIC sends what the guest sends to the wire: a packet socket of its
	// own (the queue workers' are theirs).
	NIC Endpoint
	// CPU pins the guest's worker; -1 leaves it unpinned.
	CPU int
}

// GuestWorker is one guest port's worker and its counters: From counts what the
// guest sent (received from it; transmitted when delivered to its first
// destination, the others being copies), To what is for it (received into
// its inbox, transmitted into its queue).
type GuestWorker struct {
	ID       int
	MAC      net.HardwareAddr
	Counters GuestCounters

	fw      *Forwarder
	port    GuestPort
	mac     [6]byte
	in      *inbox
	tap     Endpoint // a TAP queue, for writing
	batch   int
	bufs    [][]byte
	sizes   []int
	nicOut  [][]byte
	tapOut  [][]byte
	tapMain []bool // tapOut[i] has the TAP as its first destination
	taken   [][]byte
	from    []side
	where   map[[6]byte]side // learned from what comes in: which side an address lives on
	seg     segBuffers       // for frames the guest's offloads do not cover
	segOut  [][]byte         // the segments of one such frame, for one Write
	dirty   uint64
	live    live
	pfd     [3]unix.PollFd
	fromT   tally
	toT     tally
}

// GuestCounters are one guest's counters, padded like a queue's.
type GuestCounters struct {
	From, To Dir
	_        [64]byte
}

// fabric is the segment's guests, as every worker sees them.
type fabric struct {
	guests []*GuestWorker
	byMAC  map[[6]byte]*GuestWorker
}

// maxGuests bounds the guests: a worker marks those it handed frames to in
// a 64-bit mask.
const maxGuests = 64

// inboxSlots is how many frames wait for a guest at most.
const inboxSlots = 64

// maxLearned bounds what a guest's worker remembers of addresses (forged
// sources cannot make it grow for good).
const maxLearned = 4096

func newFabric(f *Forwarder, c Config) (*fabric, error) {
	if len(c.Guests) > maxGuests {
		return nil, fmt.Errorf("forward: %d guest ports, at most %d", len(c.Guests), maxGuests)
	}
	fab := &fabric{byMAC: map[[6]byte]*GuestWorker{}}
	for i, gp := range c.Guests {
		if len(gp.MAC) != 6 || gp.MAC[0]&1 != 0 {
			return nil, fmt.Errorf("forward: guest port %d: %s is not a unicast Ethernet address", i, gp.MAC)
		}
		in, err := newInbox(inboxSlots)
		if err != nil {
			return nil, fmt.Errorf("forward: eventfd: %w", os.NewSyscallError("eventfd", err))
		}
		g := &GuestWorker{ID: i, MAC: gp.MAC, fw: f, port: gp, mac: [6]byte(gp.MAC), in: in, batch: c.Batch,
			tap: f.queues[i%len(f.queues)].tap, where: map[[6]byte]side{}}
		g.alloc(c)
		if _, dup := fab.byMAC[g.mac]; dup {
			return nil, fmt.Errorf("forward: two guest ports with the address %s", gp.MAC)
		}
		fab.byMAC[g.mac] = g
		fab.guests = append(fab.guests, g)
	}
	return fab, nil
}

func (g *GuestWorker) alloc(c Config) {
	g.bufs = makeBufs(c.Batch, bufSize)
	g.sizes = make([]int, c.Batch)
	g.nicOut = make([][]byte, 0, c.Batch)
	g.tapOut = make([][]byte, 0, c.Batch)
	g.tapMain = make([]bool, 0, c.Batch)
	g.taken = make([][]byte, inboxSlots)
	g.from = make([]side, inboxSlots)
	g.seg = segBuffers{hdr: hdrLen, mtu: c.MTU}
	g.segOut = make([][]byte, 0, maxSegments)
	g.pfd[0] = unix.PollFd{Fd: int32(g.fw.stopFd), Events: unix.POLLIN}
	g.pfd[1] = unix.PollFd{Fd: int32(g.port.Guest.Fd()), Events: unix.POLLIN}
	g.pfd[2] = unix.PollFd{Fd: int32(g.in.efd), Events: unix.POLLIN}
}

// GuestWorkers returns the guest ports' workers, for reading counters.
func (f *Forwarder) GuestWorkers() []*GuestWorker {
	if f.fab == nil {
		return nil
	}
	return f.fab.guests
}

// deliver hands b (a vnet header and a frame from side from, not from
// origin) to the guests its destination names: the one with that address,
// or all for a group address. It reports whether b was for a guest alone,
// and marks in dirty the guests it handed frames to (wake them after the
// batch).
func (fab *fabric) deliver(b []byte, from side, origin *GuestWorker, dirty *uint64) (alone bool) {
	dst := b[hdrLen : hdrLen+6]
	if dst[0]&1 != 0 {
		for _, g := range fab.guests {
			if g != origin {
				g.offer(b, from, dirty)
			}
		}
		return false
	}
	g, ok := fab.byMAC[[6]byte(dst)]
	if !ok || g == origin {
		return false
	}
	g.offer(b, from, dirty)
	return true
}

// offer puts b in g's inbox, or counts it dropped when the inbox is full.
func (g *GuestWorker) offer(b []byte, from side, dirty *uint64) {
	g.Counters.To.Rx.Packets.Add(1)
	g.Counters.To.Rx.Bytes.Add(uint64(len(b) - hdrLen))
	if !g.in.push(b, from) {
		g.Counters.To.Drops[DropGuestBusy].Add(1)
		return
	}
	*dirty |= 1 << g.ID
}

// wake wakes the guests marked in dirty and clears it.
func (fab *fabric) wake(dirty *uint64) {
	for d := *dirty; d != 0; d &= d - 1 {
		fab.guests[bits.TrailingZeros64(d)].in.wake()
	}
	*dirty = 0
}

func (f *Forwarder) closeFabric() {
	if f.fab == nil {
		return
	}
	for _, g := range f.fab.guests {
		g.in.close()
	}
}

// run is the guest's worker: it moves what the guest sends and writes
// what waits in its inbox, sleeping in ppoll when neither has work.
func (g *GuestWorker) run() error {
	if err := lockTo(g.port.CPU); err != nil {
		return err
	}
	g.fw.workerUp()
	for !g.fw.stop.Load() {
		g.live.beats.Add(1)
		sent, err := g.fromGuest()
		if err != nil {
			return err
		}
		more, err := g.toGuest()
		if err != nil {
			return err
		}
		if sent == g.batch || more {
			continue
		}
		if err := g.live.poll(g.pfd[:]); err != nil {
			return err
		}
		if g.pfd[0].Revents != 0 {
			return nil
		}
		if g.pfd[2].Revents != 0 {
			g.in.settle()
		}
	}
	return nil
}
