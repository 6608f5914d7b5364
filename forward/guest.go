package forward

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward/fabric"
)

// GuestPort is a VM on the forwarder's segment besides the TAP and the NIC
// (a vhost-user port). Its own worker moves what the guest sends: to the
// guest its destination names, to the TAP or the NIC by what it learned of
// where an address lives, and, for broadcast, multicast and unknown
// unicast, everywhere else (fabric). The other workers hand it what is
// addressed to it through a bounded inbox, and it hands what is for the
// TAP to the inbox of the queue worker that writes that TAP queue, so a
// slow guest never stalls them: what does not fit is dropped and counted
// (DropGuestBusy toward a guest, DropTAPWrite toward the TAP).
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

// GuestWorker is one guest port's worker and its counters: From counts
// what the guest sent (received from it; transmitted when delivered to its
// first destination, the others being copies), To what is for it
// (received into its inbox, transmitted into its queue).
type GuestWorker struct {
	ID       int
	MAC      net.HardwareAddr
	Counters GuestCounters

	w     *worker
	fw    *Forwarder
	port  GuestPort
	own   macs          // its address, the one source its frames may have
	tag   fabric.Tag    // what its frames carry through inboxes
	in    *fabric.Inbox // what is for the guest
	tapIn *fabric.Inbox // the inbox of the queue worker that writes its frames to the TAP
	where *fabric.Table // where the addresses it heard from live
	batch int
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

// inboxSlots is how many frames wait for a worker at most.
const inboxSlots = 64

// addGuests sets up the switch, a worker per guest port, and an inbox for
// the TAP on the queues whose workers write the guests' frames to it.
func (f *Forwarder) addGuests(c Config) error {
	addrs := make([]net.HardwareAddr, len(c.Guests))
	for i, gp := range c.Guests {
		addrs[i] = gp.MAC
	}
	sw, err := fabric.New(addrs, inboxSlots, hdrLen+frameCap)
	if err != nil {
		return fmt.Errorf("forward: guest ports: %w", err)
	}
	f.sw = sw
	for _, gp := range c.Guests {
		f.untrusted.ours = append(f.untrusted.ours, mac48(gp.MAC))
	}
	for i, gp := range c.Guests {
		q := f.queues[i%len(f.queues)]
		if q.in == nil {
			in, err := fabric.NewInbox(inboxSlots, hdrLen+frameCap)
			if err != nil {
				return fmt.Errorf("forward: eventfd: %w", os.NewSyscallError("eventfd", err))
			}
			q.addInbox(in)
		}
		g := &GuestWorker{ID: i, MAC: gp.MAC, fw: f, port: gp, own: macs{mac48(gp.MAC)}, batch: c.Batch,
			tag: fabric.Tag{From: fabric.Guest, Guest: uint8(i)}, in: sw.Inbox(i), tapIn: q.in, where: fabric.NewTable()}
		g.fromGuest = source{gone: errClosed, lost: noLoss}
		g.toGuest = sink{ep: gp.Guest, hdr: hdrLen, refused: DropGuestRefused, busy: DropGuestRefused, gone: errClosed,
			keep: true, soft: g.softOffload}
		g.toNIC = sink{ep: gp.NIC, hdr: hdrLen, refused: DropNICRefused, busy: DropNICBusy}
		g.bufs = makeBufs(c.Batch, bufSize)
		g.sizes = make([]int, c.Batch)
		g.nicOut = make([][]byte, 0, c.Batch)
		g.taken = make([][]byte, inboxSlots)
		g.tags = make([]fabric.Tag, inboxSlots)
		g.seg = segBuffers{hdr: hdrLen, mtu: c.MTU}
		g.segOut = make([][]byte, 0, maxSegments)
		g.w = f.newWorker(fmt.Sprintf("guest port %d", i), gp.CPU, g, gp.Guest.Fd(), g.in.Fd())
		f.guests = append(f.guests, g)
	}
	return nil
}

// GuestWorkers returns the guest ports' workers, for reading counters.
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
