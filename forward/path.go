package forward

import (
	"bytes"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// nicToTAP moves one batch from the NIC to the TAP and returns how many
// frames the NIC gave. Only errors that end the worker are returned;
// everything else is counted.
func (q *QueueWorker) nicToTAP() (int, error) {
	n, err := q.nic.Read(q.nicBufs, q.nicSizes, headroom-hdrLen)
	switch err {
	case nil:
	case unix.EAGAIN, unix.EINTR:
		return 0, nil
	case unix.ENETDOWN, unix.ENODEV:
		return 0, q.nicDownOrGone(err)
	default:
		// The frame was consumed: its GSO type has no vnet header form
		// (EINVAL, af_packet.c: packet_rcv_vnet), or copying it failed
		// (packet_recvmsg frees the skb either way). recvmmsg reports
		// an error after a partial batch on the next call, so this counts
		// that frame too.
		q.Counters.NICToTAP.Rx.Packets.Add(1)
		q.Counters.NICToTAP.Drops[DropNICRecv].Add(1)
		if err != unix.EINVAL {
			q.Counters.NICToTAP.Errors.Add(1)
		}
		return 1, nil
	}
	if n > 0 && q.fw.nicDown.Load() {
		q.linkUp(&q.fw.nicDown, "NIC")
	}
	for i := 0; i < n; i++ {
		q.acceptFromNIC(i)
	}
	if q.gro != nil && len(q.frames) > 1 {
		// Userspace GRO: consecutive segments of a flow become one GSO
		// frame, one TAP write instead of many.
		q.tally.merged += uint64(q.gro.Coalesce(q.frames))
	}
	err = q.toTAP()
	q.frames = q.frames[:0]
	q.tally.publish(&q.Counters.NICToTAP, &q.Counters, n)
	if q.dirty != 0 {
		q.fw.fab.wake(&q.dirty)
	}
	return n, err
}

// acceptFromNIC counts frame i of the batch as received, validates it, puts
// back the VLAN tag the kernel stripped, and queues it for the TAP.
func (q *QueueWorker) acceptFromNIC(i int) {
	t := &q.tally
	buf, size := q.nicBufs[i], q.nicSizes[i]
	tpid, tci, tagged := q.nic.VLAN(i)
	// Every frame counts as received, so that received = transmitted +
	// merged + drops holds for whatever happens to it next.
	t.rxPkts++
	if size > hdrLen {
		t.rxBytes += uint64(size - hdrLen)
		if tagged {
			t.rxBytes += 4 // the tag the kernel stripped
		}
	}
	if size > hdrLen+frameCap {
		t.drop(DropOversize)
		return
	}
	if size < hdrLen+14 {
		t.drop(DropBadHdr)
		return
	}
	var h vnethdr.Hdr
	if h.Decode(buf[headroom-hdrLen:]) != nil {
		t.drop(DropBadHdr)
		return
	}
	start, end := headroom, headroom-hdrLen+size
	if tagged {
		var err error
		if start, err = vnethdr.InsertVLAN(buf, start, end-start, tpid, tci, &h); err != nil {
			t.drop(DropBadHdr)
			return
		}
	}
	orig, tunnel := h, false
	if vnethdr.Fixup(&h, buf[start:end]) != nil {
		// The kernel's GRO merges segments inside a tunnel too, and the
		// vnet header cannot say so: toTAP segments such a frame.
		if !orig.IsGSO() || vnethdr.CheckTunnel(orig, buf[start:end]) != nil {
			t.drop(DropBadHdr)
			return
		}
		h, tunnel = orig, true
	}
	if h.IsGSO() {
		t.gso++
	}
	if fab := q.fw.fab; fab != nil {
		if tunnel {
			// Guests get no tunnel GSO frames (only the TAP path segments
			// them): one for a guest is dropped, and counted.
			if fab.byMAC[[6]byte(buf[start:start+6])] != nil {
				t.drop(DropGuestRefused)
				return
			}
		} else {
			h.Encode(buf[start-hdrLen:])
			if fab.deliver(buf[start-hdrLen:end], sideNIC, nil, &q.dirty) {
				t.guests++
				return
			}
		}
	}
	q.tunnel[len(q.frames)] = tunnel
	q.frames = append(q.frames, vnethdr.Frame{Buf: buf, Start: start, End: end, Hdr: h})
}

// toTAP writes the batch's frames that GRO left standing to the TAP: as
// they are when the TAP takes vnet headers, else segmented and with their
// checksums completed. It returns an error only when the TAP is gone.
func (q *QueueWorker) toTAP() error {
	for i := range q.frames {
		f := &q.frames[i]
		if f.Merged {
			continue
		}
		if q.tunnel[i] {
			if err := q.tunnelForTAP(f); err != nil {
				return err
			}
			continue
		}
		if q.tapHdr != 0 {
			f.Hdr.Encode(f.Buf[f.Start-hdrLen:])
			q.tapOut = append(q.tapOut, f.Buf[f.Start-hdrLen:f.End])
			continue
		}
		if err := q.plainForTAP(f); err != nil {
			return err
		}
	}
	return q.flushTAP()
}

// plainForTAP queues frame f for a TAP without a vnet header: a GSO frame
// as its segments, any other with its checksum completed.
func (q *QueueWorker) plainForTAP(f *vnethdr.Frame) error {
	frame := f.Buf[f.Start:f.End]
	if !f.Hdr.IsGSO() {
		if vnethdr.CompleteChecksum(&f.Hdr, frame) != nil {
			q.tally.drop(DropBadHdr)
			return nil
		}
		q.tapOut = append(q.tapOut, frame)
		return nil
	}
	return q.segmentForTAP(f, false)
}

// tunnelForTAP queues the packets a tunnel GSO frame was made of, for
// either kind of TAP: segmented in userspace (vnethdr.SegmentTunnel), each
// with finished checksums and, when the TAP takes one, a zero vnet header.
func (q *QueueWorker) tunnelForTAP(f *vnethdr.Frame) error {
	return q.segmentForTAP(f, true)
}

// segmentForTAP queues f's segments for the TAP. When the segment buffers
// still hold earlier frames' segments and f's do not fit behind them, it
// writes those first and starts again at the first buffer.
func (q *QueueWorker) segmentForTAP(f *vnethdr.Frame, tunnel bool) error {
	q.seg.ensure()
	frame := f.Buf[f.Start:f.End]
	k, err := q.seg.segment(f.Hdr, frame, tunnel, q.segUsed)
	if err == vnethdr.ErrTooManySegments && q.segUsed > 0 {
		if err := q.flushTAP(); err != nil {
			return err
		}
		k, err = q.seg.segment(f.Hdr, frame, tunnel, 0)
	}
	if err != nil {
		q.tally.drop(DropSegment)
		return nil
	}
	q.tally.segs += uint64(k)
	q.tapOut = q.seg.appendFrames(q.tapOut, q.segUsed, k)
	q.segUsed += k
	return nil
}

// flushTAP writes the queued frames to the TAP, counting each as
// transmitted or dropped, and empties the queue. It returns ErrTAPGone
// when the TAP was deleted.
func (q *QueueWorker) flushTAP() error {
	t := &q.tally
	out := q.tapOut
	q.tapOut, q.segUsed = q.tapOut[:0], 0
	for len(out) > 0 {
		n, err := q.tap.Write(out, 0)
		t.sent(out[:n], q.tapHdr)
		if n > 0 && q.fw.tapDown.Load() {
			q.linkUp(&q.fw.tapDown, "TAP")
		}
		out = out[n:]
		if len(out) == 0 || err == nil {
			continue
		}
		if gone(err) {
			// Every frame that entered leaves as transmitted, merged or
			// dropped, also when the worker ends here.
			t.drops[DropTAPWrite] += uint64(len(out))
			return ErrTAPGone
		}
		// EIO while the TAP is down, EAGAIN/ENOBUFS under pressure,
		// EINVAL for a frame the TAP refuses: that frame is dropped.
		t.drop(DropTAPWrite)
		if err == unix.EIO && q.fw.tapDown.CompareAndSwap(false, true) {
			q.fw.log.Warn("TAP is down: frames from the NIC are dropped (tap_write) until it is up")
		}
		out = out[1:]
	}
	return nil
}

// tapToNIC reads up to a batch of frames from the TAP and sends them with
// one NIC write. It returns how many frames were read.
func (q *QueueWorker) tapToNIC() (int, error) {
	t := &q.tally
	// A TAP read starts so that its vnet header, if any, ends at headroom.
	n, err := q.tap.Read(q.tapBufs, q.tapSizes, headroom-q.tapHdr)
	for i := 0; i < n; i++ {
		q.acceptFromTAP(i)
	}
	q.toNIC()
	t.publish(&q.Counters.TAPToNIC, &q.Counters, n)
	if q.dirty != 0 {
		q.fw.fab.wake(&q.dirty)
	}
	switch {
	case err == nil, err == unix.EAGAIN, err == unix.EINTR:
		return n, nil
	case gone(err):
		return n, ErrTAPGone
	}
	// Any other read error came after the kernel took the frame off the
	// queue (drivers/net/tun.c: tun_do_read frees it when tun_put_user
	// fails): that frame entered and is lost.
	q.Counters.TAPToNIC.Rx.Packets.Add(1)
	q.Counters.TAPToNIC.Drops[DropTAPRead].Add(1)
	q.Counters.TAPToNIC.Errors.Add(1)
	return n, nil
}

// acceptFromTAP counts frame i read from the TAP as received, validates it
// (the TAP's writer, a guest or a lab program, is not trusted) and queues
// it for the NIC with a vnet header in front.
func (q *QueueWorker) acceptFromTAP(i int) {
	t := &q.tally
	buf, size := q.tapBufs[i], q.tapSizes[i]-q.tapHdr
	if u := &q.fw.untrusted; !u.check(t, buf, size, &u.tapMAC, q.tapHdr != 0) {
		return
	}
	b := buf[headroom-hdrLen : headroom+size]
	if fab := q.fw.fab; fab != nil && fab.deliver(b, sideTAP, nil, &q.dirty) {
		t.guests++
		return
	}
	q.nicOut = append(q.nicOut, b)
}

// check counts a frame from an untrusted writer (the TAP's, a guest's) as
// received into t and checks it: its size, its source address (StrictMAC:
// mac), the L2 policy and, when the writer gave one (vnet), the vnet
// header's claims. It leaves a checked vnet header in front of the frame
// (a zero one without vnet), or counts the drop and returns false. The
// frame is buf[headroom:headroom+size].
func (u *untrusted) check(t *tally, buf []byte, size int, mac *[6]byte, vnet bool) bool {
	t.rxPkts++
	if size > 0 {
		t.rxBytes += uint64(size)
	}
	if size > frameCap {
		t.drop(DropOversize)
		return false
	}
	if size < 14 {
		t.drop(DropBadHdr)
		return false
	}
	frame := buf[headroom : headroom+size]
	if u.strict && !bytes.Equal(frame[6:12], mac[:]) {
		t.drop(DropSpoofed)
		return false
	}
	if r, ok := u.l2.refuses(frame); ok {
		t.drop(r)
		return false
	}
	var h vnethdr.Hdr
	if vnet {
		if h.Decode(buf[headroom-hdrLen:]) != nil || vnethdr.Fixup(&h, frame) != nil {
			t.drop(DropBadHdr)
			return false
		}
		if h.IsGSO() {
			t.gso++
		}
	}
	h.Encode(buf[headroom-hdrLen:])
	return true
}

// toNIC hands the queued frames to the NIC and empties the queue.
func (q *QueueWorker) toNIC() {
	sendNIC(q.nic, q.nicOut, &q.tally, q.fw.stopFd)
	q.nicOut = q.nicOut[:0]
}

// sendNIC hands frames to nic in order, counting each in t as transmitted
// or dropped with its reason: on a full send buffer it waits for room once
// (up to 10 ms, less when the forwarder stops) and then drops what still
// does not fit; a NIC that is down or gone takes none of the rest.
func sendNIC(nic Endpoint, frames [][]byte, t *tally, stopFd int) {
	waited := false
	for len(frames) > 0 {
		n, err := nic.Write(frames, 0)
		t.sent(frames[:n], hdrLen)
		frames = frames[n:]
		if err == nil || len(frames) == 0 {
			continue
		}
		switch err {
		case unix.EINTR:
		case unix.EAGAIN:
			if !waited && waitWritable(stopFd, nic.Fd()) {
				waited = true
				continue
			}
			t.drops[DropNICBusy] += uint64(len(frames))
			return
		case unix.ENOBUFS:
			t.drop(DropNICBusy)
			frames = frames[1:]
		case unix.ENETDOWN, unix.ENXIO, unix.ENODEV:
			t.drops[DropNICRefused] += uint64(len(frames))
			return
		default:
			t.drop(DropNICRefused)
			frames = frames[1:]
		}
	}
}

// waitWritable waits up to 10 ms for fd to take writes; false when it
// did not, or when stopFd said stop first.
func waitWritable(stopFd, fd int) bool {
	p := [2]unix.PollFd{
		{Fd: int32(stopFd), Events: unix.POLLIN},
		{Fd: int32(fd), Events: unix.POLLOUT},
	}
	ts := unix.NsecToTimespec(int64(10 * time.Millisecond))
	n, err := unix.Ppoll(p[:], &ts, nil)
	return err == nil && n > 0 && p[1].Revents&unix.POLLOUT != 0
}
