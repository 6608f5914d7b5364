package forward

import (
	"github.com/tapfwd/tapfwd/forward/fabric"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// fromGuestPort moves one batch of what the guest sent and returns how
// many frames it read.
func (g *GuestWorker) fromGuestPort() (int, error) {
	t := &g.fromT
	n, err := g.port.Guest.Read(g.bufs, g.sizes, headroom-hdrLen)
	// A breach (EPROTO): the port stopped itself and said so; nothing
	// comes until the guest's driver starts its rings again.
	err = g.fromGuest.received(n, err, t)
	for i := 0; i < n; i++ {
		buf, size := g.bufs[i], g.sizes[i]-hdrLen
		if g.fw.untrusted.check(t, buf, size, g.own, true) {
			g.route(buf[headroom-hdrLen : headroom+size])
		}
	}
	g.w.send(&g.toNIC, g.nicOut, t)
	g.nicOut = g.nicOut[:0]
	if g.tapDirty {
		g.tapIn.Wake()
		g.tapDirty = false
	}
	t.publish(&g.counters.From, nil, n)
	g.fw.sw.Wake(&g.dirty)
	return n, err
}

// route sends b by its destination: to a guest, to the side where the
// address was seen, else (and for group addresses) to the NIC and the TAP
// and, for group addresses, every other guest.
func (g *GuestWorker) route(b []byte) {
	if g.fw.sw.Deliver(b, g.tag, &g.dirty) {
		g.fromT.txPkts++
		g.fromT.txBytes += uint64(len(b) - hdrLen)
		return
	}
	switch g.where.Lookup([6]byte(b[hdrLen : hdrLen+6])) {
	case fabric.TAP:
		g.pushTAP(b, false)
	case fabric.Wire:
		g.nicOut = append(g.nicOut, b)
	default: // group address or not seen yet
		g.nicOut = append(g.nicOut, b)
		g.pushTAP(b, true)
	}
}

// pushTAP hands b to the queue worker that writes the guest's frames to
// the TAP (it counts them on the guest, GuestCounters.From). When its
// inbox is full, b is dropped, or, as a copy, counted as an error.
func (g *GuestWorker) pushTAP(b []byte, copy bool) {
	tag := g.tag
	tag.Copy = copy
	switch {
	case g.tapIn.Push(b, tag):
		g.tapDirty = true
	case copy:
		g.fromT.errors++
	default:
		g.fromT.drop(DropTAPWrite)
	}
}

// toGuestPort writes what waits in the inbox into the guest's queue and
// reports whether frames are left that it could take now.
func (g *GuestWorker) toGuestPort() (more bool, err error) {
	t := &g.toT
	k, a := g.in.Take(g.taken, g.tags)
	t.rxPkts += a.Frames
	t.rxBytes += a.Bytes
	t.drops[DropGuestBusy] += a.Full
	if k == 0 {
		t.publish(&g.counters.To, nil, 0)
		return false, nil
	}
	g.where.Learn(g.taken[:k], g.tags[:k])
	done, err := g.w.send(&g.toGuest, g.taken[:k], t)
	// Frames it had no room for wait until the guest posts buffers (the
	// port's fd says when).
	more = g.in.Release(done) && done == k
	t.publish(&g.counters.To, nil, 0)
	return more, err
}

// softOffload writes b to a guest that did not take the offload its
// header asks for, segmented or with its checksum completed, and counts it
// in t: each segment the guest took as transmitted, those it had no room
// for as guest_busy.
func (g *GuestWorker) softOffload(b []byte, t *tally) {
	var h vnethdr.Hdr
	if h.Decode(b) != nil {
		t.drop(DropGuestRefused)
		return
	}
	frame := b[hdrLen:]
	out := g.segOut[:0]
	if h.IsGSO() {
		g.seg.ensure()
		k, err := g.seg.segment(h, frame, false, 0)
		if err != nil {
			t.drop(DropSegment)
			return
		}
		out = g.seg.appendFrames(out, 0, k)
	} else {
		if vnethdr.CompleteChecksum(&h, frame) != nil {
			t.drop(DropBadHdr)
			return
		}
		clear(b[:hdrLen])
		out = append(out, b)
	}
	for done := 0; done < len(out); {
		n, err := g.port.Guest.Write(out[done:], 0)
		t.sent(out[done:done+n], hdrLen)
		if done += n; done == len(out) || err == nil || classify(err) == retry {
			continue // a short count says why on the next Write
		}
		if classify(err) == wait {
			t.drops[DropGuestBusy] += uint64(len(out) - done)
		} else {
			t.drops[DropGuestRefused] += uint64(len(out) - done)
		}
		return
	}
}
