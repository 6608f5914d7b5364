package forward

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward/fabric"
)

// GuestPort is a VM on the forwarder's segment besides the TAP and the NIC
// (a vhost-user port). Each of its queue pairs has a worker of its own,
// which moves what the guest sends on that pair: to the guest its
// destination names, to the TAP or the NIC by what it learned of where an
// address lives, and, for broadcast, multicast and unknown unicast,
// everywhere else (fabric). The other workers hand it what is addressed
// to the guest through a bounded inbox per pair, spreading flows over the
// pairs the guest runs, and it hands what is for the TAP to the inbox of
// the queue worker that writes that TAP queue, so a slow guest never
// stalls them: what does not fit is dropped and counted (DropGuestBusy
// toward a guest, DropTAPWrite toward the TAP).
type GuestPort struct {
	// Queues are the port's queue pairs (at least one), each served by a
	// worker of its own.
	Queues []GuestQueue
	// Active, when not nil, says how many leading queue pairs the guest
	// runs now (the rest get nothing); nil: all of them.
	Active func() int
	// MAC is the guest's address: unicast to it reaches it alone.
	MAC net.HardwareAddr
}

// GuestQueue is one queue pair of a guest port and what its worker uses.
type GuestQueue struct {
	// Guest reads what the guest sent and writes what is for it, each frame
	// behind a 10-byte vnet header. Write takes what the guest has buffers
	// for; it may refuse a frame with EOPNOTSUPP (an offload the guest did
	// not take: it is segmented or its checksum completed here) or EAGAIN
	// (no room: the frames wait in the inbox, and Fd says when there is).
	Guest Endpoint
	// NIC sends what the guest sends to the wire: a packet socket of its
	// own (the queue workers' are theirs).
	NIC Endpoint
	// CPU pins the queue's worker; -1 leaves it unpinned.
	CPU int
}

// GuestWorker is the worker of one queue pair of a guest port. The first
// pair's worker's Counters are the port's, which the workers of all its
// pairs add to (GuestWorkers returns those): From counts
// what the guest sent (received from it; transmitted when delivered to its
// first destination, the others being copies), To what is for it
// (received into its inboxes; transmitted into its queues, each segment
// of a frame segmented here counting once).
type GuestWorker struct {
	ID       int // the guest port
	Queue    int // its queue pair
	MAC      net.HardwareAddr
	Counters GuestCounters

	counters *GuestCounters // the port's: its first pair's worker's Counters
	w        *worker
	fw       *Forwarder
	port     GuestQueue
	own      macs          // its address, the one source its frames may have
	tag      fabric.Tag    // what its frames carry through inboxes
	in       *fabric.Inbox // what is for the guest on this pair
	tapIn    *fabric.Inbox // the inbox of the queue worker that writes its frames to the TAP
	where    *fabric.Table // where the addresses it heard from live
	batch    int
	// What the guest's port and its sender cost when they fail.
	fromGuest      source
	toGuest, toNIC sink
	bufs           [][]byte
	sizes          []int
	nicOut         [][]byte
	tapDirty       bool // frames pushed to tapIn in this batch
	taken          [][]byte
	tags           []fabric.Tag
	seg            segBuffers // for frames the guest's offloads do not cover
	segOut         [][]byte   // the segments of one such frame, for one Write
	dirty          uint64     // guests handed frames in this batch
	fromT, toT     tally
}

// GuestCounters are one guest's counters, padded like a queue's.
type GuestCounters struct {
	From, To Dir
	_        [64]byte
}

// What an inbox holds: toward a guest, a ring's worth of frames (a
// virtio ring has at most 1024 entries by default in QEMU, 256 in most
// guests) in 2 MiB, 32 of the largest GSO frames; toward a TAP queue,
// 256 frames in 4 MiB. One sender (a guest, the wire, the TAP) holds at
// most three quarters of either (fabric.SoleShare), so that a guest
// flooding on all its queue pairs leaves room for the others.
const (
	guestInboxFrames = 1024
	guestInboxBytes  = 2 << 20
	tapInboxFrames   = 256
	tapInboxBytes    = 4 << 20
)

// addGuests sets up the switch, a worker per guest queue pair, and an
// inbox for the TAP on the queues whose workers write the guests' frames
// to it.
func (f *Forwarder) addGuests(c Config) error {
	ports := make([]fabric.Port, len(c.Guests))
	for i, gp := range c.Guests {
		if len(gp.Queues) == 0 {
			return fmt.Errorf("guest port %d has no queue pairs", i)
		}
		ports[i] = fabric.Port{MAC: gp.MAC, Queues: len(gp.Queues), Active: gp.Active}
	}
	sw, err := fabric.New(ports, guestInboxFrames, guestInboxBytes)
	if err != nil {
		return fmt.Errorf("guest ports: %w", err)
	}
	f.sw = sw
	for _, gp := range c.Guests {
		f.untrusted.ours = append(f.untrusted.ours, mac48(gp.MAC))
	}
	for i, gp := range c.Guests {
		var first *GuestWorker
		for k, gq := range gp.Queues {
			g, err := f.newGuestWorker(c, i, k, gp.MAC, gq)
			if err != nil {
				return err
			}
			if k == 0 {
				first = g
				f.guests = append(f.guests, g)
			}
			g.counters = &first.Counters
		}
	}
	return nil
}

// newGuestWorker sets up the worker of guest port i's queue pair k, which
// hands the guest's frames for the TAP to TAP queue i+k's worker.
func (f *Forwarder) newGuestWorker(c Config, i, k int, mac net.HardwareAddr, gq GuestQueue) (*GuestWorker, error) {
	q := f.queues[(i+k)%len(f.queues)]
	if q.in == nil {
		in, err := fabric.NewInbox(tapInboxFrames, tapInboxBytes)
		if err != nil {
			return nil, fmt.Errorf("make an eventfd: %w", os.NewSyscallError("eventfd", err))
		}
		q.addInbox(in)
	}
	g := &GuestWorker{ID: i, Queue: k, MAC: mac, fw: f, port: gq, own: macs{mac48(mac)}, batch: c.Batch,
		tag: fabric.Tag{From: fabric.Guest, Guest: uint8(i)}, in: f.sw.Inbox(i, k), tapIn: q.in, where: fabric.NewTable()}
	g.fromGuest = source{gone: errClosed, lost: noLoss}
	g.toGuest = sink{ep: gq.Guest, hdr: hdrLen, refused: DropGuestRefused, busy: DropGuestBusy, gone: errClosed,
		keep: true, soft: g.softOffload}
	g.toNIC = sink{ep: gq.NIC, hdr: hdrLen, refused: DropNICRefused, busy: DropNICBusy}
	g.bufs = makeBufs(c.Batch, bufSize)
	g.sizes = make([]int, c.Batch)
	g.nicOut = make([][]byte, 0, c.Batch)
	g.taken = make([][]byte, guestInboxFrames)
	g.tags = make([]fabric.Tag, guestInboxFrames)
	g.seg = segBuffers{hdr: hdrLen, mtu: c.MTU}
	g.segOut = make([][]byte, 0, maxSegments)
	g.w = f.newWorker(fmt.Sprintf("guest port %d queue %d", i, k), gq.CPU, g, gq.Guest.Fd(), g.in.Fd())
	return g, nil
}

// GuestWorkers returns each guest port's first queue pair's worker, for
// reading the port's counters.
func (f *Forwarder) GuestWorkers() []*GuestWorker { return f.guests }

// turn moves a batch of what the guest sent and writes what waits in its
// inbox.
func (g *GuestWorker) turn() (bool, error) {
	sent, err := g.fromGuestPort()
	if err != nil {
		return false, err
	}
	more, err := g.toGuestPort()
	if err != nil {
		return false, err
	}
	return sent == g.batch || more, nil
}

// woke settles the inbox's fd when it woke the worker; the port's needs
// nothing (the next turn reads it).
func (g *GuestWorker) woke(pfd []unix.PollFd) {
	if pfd[1].Revents != 0 {
		g.in.Settle()
	}
}
