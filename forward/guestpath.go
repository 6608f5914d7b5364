package forward

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// errPortClosed ends a guest's worker quietly: its port was closed.
var errPortClosed = errors.New("guest port closed")

// fromGuest moves one batch of what the guest sent and returns how many
// frames it read.
func (g *GuestWorker) fromGuest() (int, error) {
	n, err := g.port.Guest.Read(g.bufs, g.sizes, headroom-hdrLen)
	switch {
	case err == nil, err == unix.EAGAIN, err == unix.EINTR:
	case err == unix.EBADFD:
		return 0, errPortClosed
	case err == unix.EIO:
		// The guest broke the rules: its port stopped itself (and said
		// so); nothing comes until the guest starts its rings again.
	default:
		g.Counters.From.Errors.Add(1)
	}
	for i := 0; i < n; i++ {
		g.acceptFromGuest(i)
	}
	g.flush()
	g.fromT.publish(&g.Counters.From, nil, n)
	g.fw.fab.wake(&g.dirty)
	return n, nil
}

// acceptFromGuest checks frame i of the batch (the guest is not trusted)
// and routes it.
func (g *GuestWorker) acceptFromGuest(i int) {
	buf, size := g.bufs[i], g.sizes[i]-hdrLen
	if g.fw.untrusted.check(&g.fromT, buf, size, &g.mac, true) {
		g.route(buf[headroom-hdrLen : headroom+size])
	}
}

// route sends b by its destination: to a guest, to the side where the
// address was seen, else (and for group addresses) to the NIC and the TAP
// and, for group addresses, every other guest.
func (g *GuestWorker) route(b []byte) {
	if g.fw.fab.deliver(b, sideGuest, g, &g.dirty) {
		g.fromT.txPkts++
		g.fromT.txBytes += uint64(len(b) - hdrLen)
		return
	}
	switch g.where[[6]byte(b[hdrLen:hdrLen+6])] {
	case sideTAP:
		g.tapOut, g.tapMain = append(g.tapOut, b), append(g.tapMain, true)
	case sideNIC:
		g.nicOut = append(g.nicOut, b)
	default: // group address or not seen yet
		g.nicOut = append(g.nicOut, b)
		g.tapOut, g.tapMain = append(g.tapOut, b), append(g.tapMain, false)
	}
}

// flush writes the batch's frames to the NIC and the TAP. A frame counts
// once, on its first destination: transmitted, or dropped with the
// reason; a failed copy to a second destination counts as an error.
func (g *GuestWorker) flush() {
	t := &g.fromT
	sendNIC(g.port.NIC, g.nicOut, t, g.fw.stopFd)
	for out, main := g.tapOut, g.tapMain; len(out) > 0; {
		n, err := g.tap.Write(out, 0)
		for i, b := range out[:n] {
			if main[i] {
				t.txPkts++
				t.txBytes += uint64(len(b) - hdrLen)
			}
		}
		if out, main = out[n:], main[n:]; len(out) == 0 || err == nil {
			continue
		}
		if main[0] {
			t.drop(DropTAPWrite)
		} else {
			t.errors++
		}
		out, main = out[1:], main[1:]
	}
	g.nicOut, g.tapOut, g.tapMain = g.nicOut[:0], g.tapOut[:0], g.tapMain[:0]
}

// toGuest writes what waits in the inbox into the guest's queue and
// reports whether frames are left that it could take now.
func (g *GuestWorker) toGuest() (more bool, err error) {
	k := g.in.take(g.taken, g.from)
	if k == 0 {
		return false, nil
	}
	g.learn(k)
	t := &g.toT
	done := 0
	for done < k {
		n, err := g.port.Guest.Write(g.taken[done:k], 0)
		t.sent(g.taken[done:done+n], hdrLen)
		if done += n; done == k || err == nil {
			continue
		}
		switch err {
		case unix.EINTR:
		case unix.EAGAIN:
			// No room: the rest waits until the guest posts buffers
			// (the port's fd says when).
			g.in.release(done)
			t.publish(&g.Counters.To, nil, 0)
			return false, nil
		case unix.EOPNOTSUPP:
			g.softOffload(g.taken[done])
			done++
		case unix.EBADFD:
			g.in.release(done)
			return false, errPortClosed
		default: // no front-end, or a frame the guest cannot take
			t.drop(DropGuestRefused)
			done++
		}
	}
	more = g.in.release(done)
	t.publish(&g.Counters.To, nil, 0)
	return more, nil
}

// learn notes on which side the sources of the k frames taken live, so
// that the guest's answers go there alone.
func (g *GuestWorker) learn(k int) {
	for i := 0; i < k; i++ {
		if g.from[i] != sideNIC && g.from[i] != sideTAP {
			continue
		}
		src := [6]byte(g.taken[i][hdrLen+6 : hdrLen+12])
		if src[0]&1 != 0 || g.where[src] == g.from[i] {
			continue
		}
		if len(g.where) >= maxLearned {
			clear(g.where)
		}
		g.where[src] = g.from[i]
	}
}

// softOffload writes b to a guest that did not take the offload its
// header asks for: segmented, or with its checksum completed.
func (g *GuestWorker) softOffload(b []byte) {
	t := &g.toT
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
	if n, _ := g.port.Guest.Write(out, 0); n != len(out) {
		t.drop(DropGuestRefused)
		return
	}
	t.txPkts++
	t.txBytes += uint64(len(frame))
}
