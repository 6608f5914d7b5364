package forward

import (
	"log/slog"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Endpoint is one queue of one side: a TAP queue (tap.Queue), a packet
// socket (afpacket.Socket), a vhost-user port (vhostuser.Port). Frames
// are read and written in batches, each frame preceded by the side's
// virtio-net header when it has one. Every endpoint has one worker that
// reads it and one that writes it (the same one for those forward owns,
// unless their queue is split: Duplex): Read and Write are each called
// from one goroutine.
type Endpoint interface {
	// Read fills bufs[i][offset:] with up to len(bufs) frames and sets
	// sizes[i] to each one's length; it returns how many it filled and
	// handles all of them before reporting an error. A size larger than
	// len(bufs[i])-offset means the frame did not fit its buffer.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// Write hands bufs[i][offset:] to the device in order and returns how
	// many it took. When it took none, err says why bufs[0] failed; a short
	// count with a nil error means bufs[n] failed and writing again from
	// there reports why.
	Write(bufs [][]byte, offset int) (n int, err error)
	// Fd is polled for readability (and writability after EAGAIN).
	Fd() int
}

// NIC is the wire side: an Endpoint plus what the kernel says about each
// frame it received besides the frame itself.
type NIC interface {
	Endpoint
	// VLAN returns the 802.1Q/802.1ad tag the kernel stripped from frame i
	// of the last Read, if it stripped one.
	VLAN(i int) (tpid, tci uint16, ok bool)
}

// KernelCounters is implemented by a NIC whose kernel side drops frames
// before the worker sees them (afpacket.Socket: PACKET_STATISTICS).
type KernelCounters interface {
	Stats() (packets, drops uint64, err error)
}

// Waiter is implemented by a NIC that waits for the worker: its kernel
// busy-polls the device's NAPI while the worker waits (an AF_XDP socket
// with io_uring's NAPI busy polling), so the worker waits through it
// instead of in ppoll. Wait has ppoll's contract on pfd (the stop eventfd
// and the worker's fds) and timeout (nil: none), but a reported fd may no
// longer be ready by the time Wait returns: the worker reads readiness as
// a hint, and its stop as the flag. EINTR: call again.
type Waiter interface {
	Wait(pfd []unix.PollFd, timeout *unix.Timespec) error
}

// action is what a worker does about an error an endpoint returned.
type action uint8

// The errors every endpoint returns are errno values with one meaning,
// read or written, whichever the endpoint: a TAP queue, a packet socket,
// a vhost-user port, or an AF_XDP socket (which answers as a packet
// socket does). classify reads them:
//
//	errno                 action   meaning, and what the worker does
//	EAGAIN                wait     nothing to read, or no room to write: wait on Fd
//	EINTR                 retry    interrupted: call again
//	ENOBUFS               busy     no room for that frame now (a packet socket with qdisc
//	                               bypass on a full device queue): it is dropped
//	ENETDOWN, EIO         down     the device is down: a packet socket says so once
//	                               (af_packet.c: packet_notifier, NETDEV_DOWN), a TAP on
//	                               every write (tun.c: tun_get_user), a vhost-user port
//	                               while no front-end runs the guest's receive queue;
//	                               what was for it is dropped and the worker waits
//	ENODEV, ENXIO, EBADFD gone     the device or port is gone: the NIC was unregistered
//	                               (ENODEV; ENXIO on a send with no device), the TAP
//	                               queue detached or a vhost-user port closed (EBADFD);
//	                               the worker ends (a guest's: quietly)
//	EPROTO                breach   the guest broke the virtqueue rules
//	                               (vhostuser.ErrBroken): its port stopped itself and
//	                               said so; what was for it is dropped until its
//	                               driver restarts the rings
//	EOPNOTSUPP            offload  the frame needs an offload the guest did not take:
//	                               it is segmented, or its checksum completed, here
//	anything else         failed   that one frame failed: a read took it off the queue
//	                               and lost it (EINVAL: its GSO type has no vnet header
//	                               form, expected; any other is also counted an error),
//	                               a write refused it (EINVAL, EMSGSIZE, ...)
const (
	failed action = iota
	wait
	retry
	busy
	down
	gone
	breach
	needsOffload
)

func classify(err error) action {
	e, _ := err.(unix.Errno)
	switch e {
	case unix.EAGAIN:
		return wait
	case unix.EINTR:
		return retry
	case unix.ENOBUFS:
		return busy
	case unix.ENETDOWN, unix.EIO:
		return down
	case unix.ENODEV, unix.ENXIO, unix.EBADFD:
		return gone
	case unix.EPROTO:
		return breach
	case unix.EOPNOTSUPP:
		return needsOffload
	}
	return failed
}

// A source is an endpoint a worker reads, and what its errors cost.
type source struct {
	link *link // its device's state (nil: the endpoint reports its own)
	gone error // what ends the worker when it is gone
	// lost is what a frame a failed read took off the queue is dropped
	// for; noLoss: the endpoint's failed reads take none.
	lost DropReason
}

// noLoss is source.lost for an endpoint whose failed reads lose no frame
// (a vhost-user port): the failure is counted as an error alone.
const noLoss = NumDropReasons

// received handles what a Read returned besides its n frames, by the
// contract: it marks the link up or down, counts a frame the read lost in
// t, and returns s.gone once the endpoint is gone.
func (s *source) received(n int, err error, t *tally) error {
	if n > 0 {
		s.link.cameUp()
	}
	if err == nil {
		return nil
	}
	switch classify(err) {
	case wait, retry, breach:
	case down:
		s.link.wentDown()
	case gone:
		return s.gone
	default:
		if s.lost != noLoss {
			t.rxPkts++
			t.drop(s.lost)
		}
		if err != unix.EINVAL || s.lost == noLoss {
			t.errors++
		}
	}
	return nil
}

// A sink is an endpoint a worker writes, and what its refusals cost.
type sink struct {
	ep      Endpoint
	hdr     int        // bytes in front of each frame that are not the frame (a vnet header)
	refused DropReason // a frame it refused, and the rest of the batch once it is down or gone
	busy    DropReason // a frame it had no room for
	link    *link      // its device's state (nil: the endpoint reports its own)
	gone    error      // what ends the worker once it is gone (nil: it goes on, its reader finds out)
	// keep: when it has no room, the rest stays with the caller (a guest's
	// inbox, until the guest posts buffers) instead of a short wait and a
	// drop.
	keep bool
	// soft writes a frame it refused for an offload (EOPNOTSUPP) in a form
	// it takes, and counts it; nil drops such a frame.
	soft func(b []byte, t *tally)
}

// send writes frames to s in order and accounts for each one in t, by the
// contract (classify): transmitted, or dropped for the reason s gives. It
// returns how many it accounted for, which is all of them unless s keeps
// what it has no room for, and s.gone once s is gone. On a full device it
// waits for room once (up to 10 ms, less when the forwarder stops) and
// then drops what still does not fit.
func (w *worker) send(s *sink, frames [][]byte, t *tally) (int, error) {
	done, waited := 0, false
	for done < len(frames) {
		n, err := s.ep.Write(frames[done:], 0)
		t.sent(frames[done:done+n], s.hdr)
		if n > 0 {
			s.link.cameUp()
		}
		if done += n; done == len(frames) || err == nil {
			continue
		}
		switch a := classify(err); a {
		case retry:
		case wait:
			if s.keep {
				return done, nil
			}
			if !waited && w.waitRoom(s.ep.Fd()) {
				waited = true
				continue
			}
			t.drops[s.busy] += uint64(len(frames) - done)
			return len(frames), nil
		case busy:
			t.drop(s.busy)
			done++
		case needsOffload:
			if s.soft != nil {
				s.soft(frames[done], t)
			} else {
				t.drop(s.refused)
			}
			done++
		case down, breach, gone:
			// Nothing more goes until it is back (or for good).
			t.drops[s.refused] += uint64(len(frames) - done)
			if a == down {
				s.link.wentDown()
			}
			if a == gone {
				return len(frames), s.gone
			}
			return len(frames), nil
		default:
			t.drop(s.refused)
			done++
		}
	}
	return done, nil
}

// link is a device's state as the workers saw it, shared by them so that
// each change is logged once.
type link struct {
	down    atomic.Bool
	log     *slog.Logger
	downMsg string // logged when it went down
	upMsg   string // logged when it forwards again
}

// wentDown marks l down and logs it the first time; a nil l does nothing.
func (l *link) wentDown() {
	if l != nil && l.down.CompareAndSwap(false, true) {
		l.log.Warn(l.downMsg)
	}
}

// cameUp marks l up and logs it when it was down; a nil l does nothing.
func (l *link) cameUp() {
	if l != nil && l.down.Load() && l.down.CompareAndSwap(true, false) {
		l.log.Info(l.upMsg)
	}
}
