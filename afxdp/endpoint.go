package afxdp

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Read copies up to len(bufs) frames from the RX ring into
// bufs[i][offset+10:], each behind a 10-byte virtio_net_hdr: zero, or
// VIRTIO_NET_HDR_F_NEEDS_CSUM where the frame's checksum is partial (a
// veth peer's stack left it so: see SocketConfig.PartialChecksums and
// vnethdr.RecoverPartial). sizes[i] is
// header plus frame, larger than len(bufs[i])-offset when the frame did not
// fit. Frames keep their VLAN tags; there is no GSO on this path.
//
// With nothing to read Read returns unix.EAGAIN; with inline busy polling
// it first polls the queue's NAPI once (recvfrom). ENETDOWN: the device is
// down (seen by that recvfrom); ENODEV: it is gone.
func (s *Socket) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if s.gone {
		return 0, unix.ENODEV
	}
	n, more := s.q.receive(bufs, sizes, offset)
	if n == 0 && !more && s.inline {
		if err := s.kickRX(); err != nil {
			return 0, err
		}
		n, _ = s.q.receive(bufs, sizes, offset)
	} else if s.q.fill.needWakeup() {
		// A zero-copy driver waits for a wake-up once its fill ring ran
		// dry (copy mode never sets the flag).
		s.kickRX()
	}
	s.publish()
	if n == 0 {
		return 0, unix.EAGAIN
	}
	s.rxFrames.Add(uint64(n))
	return n, nil
}

// kickRX is recvfrom(MSG_DONTWAIT), which busy-polls the socket's NAPI
// when SO_BUSY_POLL is set and wakes a zero-copy driver's RX.
func (s *Socket) kickRX() error {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0, unix.EAGAIN, unix.EINTR:
		return nil
	case unix.ENXIO, unix.EBADF:
		// net/xdp/xsk.c: xsk_notifier unbinds the socket when its device
		// is unregistered; every call then says ENXIO.
		s.gone = true
		return unix.ENODEV
	}
	return e
}

// BusyPoll polls the socket's NAPI once (recvfrom with SO_BUSY_POLL set),
// for a poller that drives the queue from its own CPU while the worker
// reads and writes elsewhere. It touches nothing Read and Write use.
func (s *Socket) BusyPoll() error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.fd < 0 {
		return unix.EBADFD
	}
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 && e != unix.EAGAIN {
		return e
	}
	return nil
}

// Write queues bufs[i][offset:] (each a virtio_net_hdr and an Ethernet
// frame) on the TX ring in order and kicks the kernel once for the batch.
// The kernel has no vnet header here, so a GSO frame goes out as its
// segments (offload.Segment, into the UMEM) and a partial checksum is
// completed first (in bufs[i], whose header is cleared so that a retry does
// not complete it twice). A frame longer than a chunk spans chunks
// (multi-buffer) or is refused with EMSGSIZE.
//
// It returns how many frames it took. When it took none the error is
// bufs[0]'s: EAGAIN (no free chunk or ring entry, even after a kick),
// EMSGSIZE (the frame can never fit), EINVAL (a header or frame that cannot
// be sent), ENETDOWN (the device is down), ENODEV (it is gone). A short
// count with a nil error: the next Write from bufs[n] says why. Frames the
// kernel took and then dropped (its qdisc-less path said NET_XMIT_DROP)
// are counted in Counters().TXDropped.
func (s *Socket) Write(bufs [][]byte, offset int) (int, error) {
	if s.gone {
		return 0, unix.ENODEV
	}
	if s.down {
		// Frames queued before the link went down are sent when it
		// comes back; until then nothing new is queued.
		if err := s.kickTX(); err != nil {
			return 0, err
		}
	}
	q := &s.q
	q.reclaim()
	q.beginTX()
	n := 0
	var err error
	for ; n < len(bufs); n++ {
		if err = q.put(bufs[n][offset:]); err == unix.EAGAIN && q.txQueued > 0 {
			// Out of chunks or ring: send what is queued, take back
			// what completed and try this frame once more.
			q.submitTX()
			s.kickTX()
			q.reclaim()
			q.beginTX()
			err = q.put(bufs[n][offset:])
		}
		if err != nil {
			break
		}
	}
	if q.submitTX() {
		if kerr := s.kickTX(); kerr != nil && n == 0 {
			err = kerr
		}
	}
	s.publish()
	if n > 0 {
		return n, nil
	}
	return 0, err
}

// kickTX asks the kernel to send what the TX ring holds: sendto with
// MSG_DONTWAIT when the ring asks for a wake-up (copy mode always does; the
// send then runs in this call, net/xdp/xsk.c: __xsk_generic_xmit). EAGAIN
// means its per-call budget ran out with frames left: kick again while it
// makes progress.
func (s *Socket) kickTX() error {
	for i := 0; i < 8 && s.q.tx.needWakeup(); i++ {
		before := s.q.tx.cons.Load()
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			s.down = false
			return nil
		case unix.EAGAIN, unix.EINTR, unix.ENOBUFS:
			s.down = false
			if s.q.tx.cons.Load() == before {
				return nil // no progress: POLLOUT or the next Write retries
			}
		case unix.EBUSY:
			// NET_XMIT_DROP: the device dropped one frame; its chunk comes
			// back on the completion ring. Go on with the rest.
			s.txDropped.Add(1)
		case unix.ENETDOWN:
			s.down = true
			return unix.ENETDOWN
		case unix.ENXIO, unix.EBADF:
			s.gone = true
			return unix.ENODEV
		default:
			return e
		}
	}
	return nil
}

// refusedCounters is what the worker publishes of queue.refused.
type refusedCounters struct {
	last                                              Refused
	rxDescs, compAddrs, ringIndex, fillFull, oversize atomic.Uint64
}

// publish copies the queue's refusal counts for Counters, when they changed.
func (s *Socket) publish() {
	r := &s.refused
	if s.q.refused == r.last {
		return
	}
	r.last = s.q.refused
	r.rxDescs.Store(r.last.RXDescs)
	r.compAddrs.Store(r.last.CompAddrs)
	r.ringIndex.Store(r.last.RingIndex)
	r.fillFull.Store(r.last.FillFull)
	r.oversize.Store(r.last.Oversize)
}

// VLAN always reports no tag: XDP sees frames as the wire has them, tags
// included, and so does this socket.
func (s *Socket) VLAN(int) (tpid, tci uint16, ok bool) { return 0, 0, false }

// Counters is everything the socket and its kernel side count.
type Counters struct {
	RXFrames  uint64 // frames Read returned
	TXDropped uint64 // frames the kernel took from the TX ring and dropped (EBUSY)
	Refused   Refused
	Kernel    unix.XDPStatistics // XDP_STATISTICS: rx_dropped, rx_invalid_descs, tx_invalid_descs, rx_ring_full, rx_fill_ring_empty_descs, tx_ring_empty_descs
}

// Counters reads the socket's counters and the kernel's XDP_STATISTICS
// (which count from the socket's creation and do not reset on read).
func (s *Socket) Counters() (Counters, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	r := &s.refused
	c := Counters{
		RXFrames:  s.rxFrames.Load(),
		TXDropped: s.txDropped.Load(),
		Refused: Refused{RXDescs: r.rxDescs.Load(), CompAddrs: r.compAddrs.Load(), RingIndex: r.ringIndex.Load(),
			FillFull: r.fillFull.Load(), Oversize: r.oversize.Load()},
	}
	if s.fd < 0 {
		return c, unix.EBADFD
	}
	k, err := statistics(s.fd)
	c.Kernel = k
	return c, err
}

// Stats is forward.KernelCounters: frames that reached the socket, drops
// included, and frames the kernel dropped on the way in (rx_dropped: no
// fill entry or frame too large; rx_ring_full: the RX ring was full).
func (s *Socket) Stats() (packets, drops uint64, err error) {
	c, err := s.Counters()
	drops = c.Kernel.Rx_dropped + c.Kernel.Rx_ring_full
	return c.RXFrames + drops, drops, err
}
