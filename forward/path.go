package forward

import (
	"github.com/tapfwd/tapfwd/forward/fabric"
	"github.com/tapfwd/tapfwd/offload"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// nicToTAP moves one batch from the NIC to the TAP and returns how many
// frames the NIC gave. Only errors that end the worker are returned;
// everything else is counted.
func (q *QueueWorker) nicToTAP() (int, error) {
	t := &q.tally
	q.frames = q.frames[:0]
	n, err := q.nic.Read(q.nicBufs, q.nicSizes, headroom-hdrLen)
	// A frame a failed read consumed: its GSO type has no vnet header form
	// (EINVAL, af_packet.c: packet_rcv_vnet), or copying it failed
	// (packet_recvmsg frees the skb either way). recvmmsg reports an error
	// after a partial batch on the next call, so this counts that frame too.
	err = q.fromNIC.received(n, err, t)
	for i := 0; i < n; i++ {
		q.acceptFromNIC(i, i)
	}
	if err == nil && n < q.batch && q.groWindow > 0 {
		n, err = q.gather(n)
	}
	if q.gro != nil && len(q.frames) > 1 {
		// Userspace GRO: consecutive segments of a flow become one GSO
		// frame, one TAP write instead of many.
		t.merged += uint64(q.gro.Coalesce(q.frames))
	}
	if werr := q.framesToTAP(t); werr != nil {
		err = werr
	}
	q.publish(&q.tally, &q.dirty, &q.Counters.NICToTAP, n)
	return n, err
}

// publish adds the batch of n frames t counted to d, and wakes the guests
// the batch handed frames to (dirty): each direction has its own t and
// dirty, the TAP side's in tapSide.
func (q *QueueWorker) publish(t *tally, dirty *uint64, d *Dir, n int) {
	t.publish(d, &q.Counters, n)
	q.fw.sw.Wake(dirty)
}

// acceptFromNIC counts frame i of the batch, frame j of the NIC's last
// Read, as received, validates it, puts back the VLAN tag the kernel
// stripped, and queues it for the TAP.
func (q *QueueWorker) acceptFromNIC(i, j int) {
	t := &q.tally
	buf, size := q.nicBufs[i], q.nicSizes[i]
	tpid, tci, tagged := q.nic.VLAN(j)
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
	if q.fw.untrusted.ours.has(buf[headroom+6:]) {
		// From the wire with an address of the TAP's side or a guest's: a
		// guest's worker would learn from it that the address lives on the
		// wire and send what is for it there.
		t.drop(DropSpoofed)
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
		if !orig.IsGSO() || offload.CheckTunnel(orig, buf[start:end]) != nil {
			t.drop(DropBadHdr)
			return
		}
		h, tunnel = orig, true
	}
	if h.IsGSO() {
		t.gso++
	}
	if sw := q.fw.sw; sw != nil {
		if tunnel {
			// Guests get no tunnel GSO frames (only the TAP path segments
			// them): one for a guest is dropped, and counted.
			if sw.IsGuest([6]byte(buf[start : start+6])) {
				t.drop(DropGuestRefused)
				return
			}
		} else {
			h.Encode(buf[start-hdrLen:])
			if sw.Deliver(buf[start-hdrLen:end], fabric.Tag{From: fabric.Wire}, &q.dirty) {
				t.guests++
				return
			}
		}
	}
	q.tunnel[len(q.frames)] = tunnel
	q.frames = append(q.frames, offload.Frame{Buf: buf, Start: start, End: end, Hdr: h})
}

// framesToTAP writes q.frames that GRO left standing to the TAP,
// accounted in t: as they are when the TAP takes vnet headers, else
// segmented and with their checksums completed. It returns an error only
// when the TAP is gone.
func (q *QueueWorker) framesToTAP(t *tally) error {
	for i := range q.frames {
		f := &q.frames[i]
		if f.Merged {
			continue
		}
		if q.tunnel[i] {
			// The packets a tunnel GSO frame was made of, for either kind
			// of TAP: segmented here (offload.SegmentTunnel), each with
			// finished checksums and, when the TAP takes one, a zero vnet
			// header.
			if err := q.segmentForTAP(f, true, t); err != nil {
				return err
			}
			continue
		}
		if q.tapHdr != 0 {
			f.Hdr.Encode(f.Buf[f.Start-hdrLen:])
			q.tapOut = append(q.tapOut, f.Buf[f.Start-hdrLen:f.End])
			continue
		}
		if err := q.plainForTAP(f, t); err != nil {
			return err
		}
	}
	return q.flushTAP(t)
}

// plainForTAP queues frame f for a TAP without a vnet header: a GSO frame
// as its segments, any other with its checksum completed.
func (q *QueueWorker) plainForTAP(f *offload.Frame, t *tally) error {
	frame := f.Buf[f.Start:f.End]
	if !f.Hdr.IsGSO() {
		if vnethdr.CompleteChecksum(&f.Hdr, frame) != nil {
			t.drop(DropBadHdr)
			return nil
		}
		q.tapOut = append(q.tapOut, frame)
		return nil
	}
	return q.segmentForTAP(f, false, t)
}

// segmentForTAP queues f's segments for the TAP. When the segment buffers
// still hold earlier frames' segments and f's do not fit behind them, it
// writes those first and starts again at the first buffer.
func (q *QueueWorker) segmentForTAP(f *offload.Frame, tunnel bool, t *tally) error {
	q.seg.ensure()
	frame := f.Buf[f.Start:f.End]
	k, err := q.seg.segment(f.Hdr, frame, tunnel, q.segUsed)
	if err == offload.ErrTooManySegments && q.segUsed > 0 {
		if err := q.flushTAP(t); err != nil {
			return err
		}
		k, err = q.seg.segment(f.Hdr, frame, tunnel, 0)
	}
	if err != nil {
		t.drop(DropSegment)
		return nil
	}
	t.segs += uint64(k)
	q.tapOut = q.seg.appendFrames(q.tapOut, q.segUsed, k)
	q.segUsed += k
	return nil
}

// flushTAP writes the queued frames to the TAP, accounted in t, and
// empties the queue. It returns ErrTAPGone when the TAP was deleted.
func (q *QueueWorker) flushTAP(t *tally) error {
	_, err := q.w.send(&q.toTAP, q.tapOut, t)
	q.tapOut, q.segUsed = q.tapOut[:0], 0
	return err
}

// guestsToTAP writes what guests left in the queue's inbox to the TAP, the
// way frames from the NIC go, and reports whether more waits. Each frame
// counts on the guest that sent it (GuestCounters.From): transmitted, or
// dropped with the reason, when the TAP was its first destination; as an
// error when it failed as a copy (the NIC got the frame first).
func (q *QueueWorker) guestsToTAP() (more bool, err error) {
	k, _ := q.in.Take(q.taken, q.tags)
	for i := 0; i < k; {
		tag, j := q.tags[i], i+1
		for j < k && q.tags[j] == tag {
			j++
		}
		t := &q.runT
		q.frames = q.frames[:0]
		for _, b := range q.taken[i:j] {
			var h vnethdr.Hdr
			h.Decode(b) // the guest's worker checked it
			q.tunnel[len(q.frames)] = false
			q.frames = append(q.frames, offload.Frame{Buf: b, Start: hdrLen, End: len(b), Hdr: h})
		}
		if e := q.framesToTAP(t); e != nil {
			err = e
		}
		if tag.Copy {
			t.asCopies()
		}
		t.publish(&q.fw.guests[tag.Guest].Counters.From, &q.Counters, 0)
		i = j
	}
	return q.in.Release(k) && err == nil, err
}

// toNIC reads up to a batch of frames from the TAP and sends them with one
// NIC write. It returns how many frames were read.
func (s *tapSide) toNIC() (int, error) {
	q, t := s.q, &s.tally
	// A TAP read starts so that its vnet header, if any, ends at headroom.
	n, err := q.tap.Read(s.bufs, s.sizes, headroom-q.tapHdr)
	// A read error after the kernel took the frame off the queue
	// (drivers/net/tun.c: tun_do_read frees it when tun_put_user fails)
	// costs that frame.
	err = q.fromTAP.received(n, err, t)
	for i := 0; i < n; i++ {
		s.accept(i)
	}
	if _, serr := s.w.send(&q.toNIC, s.out, t); err == nil {
		err = serr // the NIC is gone: the worker ends
	}
	s.out = s.out[:0]
	q.publish(t, &s.dirty, &q.Counters.TAPToNIC, n)
	return n, err
}

// accept counts frame i read from the TAP as received, validates it (the
// TAP's writer, a guest or a lab program, is not trusted) and queues it
// for the NIC with a vnet header in front.
func (s *tapSide) accept(i int) {
	q, t := s.q, &s.tally
	buf, size := s.bufs[i], s.sizes[i]-q.tapHdr
	if u := &q.fw.untrusted; !u.check(t, buf, size, u.tap, q.tapHdr != 0) {
		return
	}
	b := buf[headroom-hdrLen : headroom+size]
	if sw := q.fw.sw; sw != nil && sw.Deliver(b, fabric.Tag{From: fabric.TAP}, &s.dirty) {
		t.guests++
		return
	}
	s.out = append(s.out, b)
}

// check counts a frame from an untrusted writer (the TAP's, a guest's) as
// received into t and checks it: its size, its source address (one of
// from, unless nil), the L2 policy and, when the writer gave one (vnet),
// the vnet header's claims. It leaves a checked vnet header in front of the frame
// (a zero one without vnet), or counts the drop and returns false. The
// frame is buf[headroom:headroom+size].
func (u *untrusted) check(t *tally, buf []byte, size int, from macs, vnet bool) bool {
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
	if from != nil && !from.has(frame[6:12]) {
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
