package vhostuser

import (
	"fmt"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// ErrBroken is the errno Read and Write return once the guest broke the
// virtqueue rules (ErrGuest says how, in the log and the EventBroken):
// EPROTO, which no device returns, so that a broken guest is not taken for
// a device that is down (EIO from a TAP).
const ErrBroken = unix.EPROTO

// Read takes up to len(bufs) frames the guest transmitted. Frame i lands
// in bufs[i][offset:] behind a vnethdr.Len (10-byte) virtio_net_hdr, the
// guest's header without num_buffers, and sizes[i] is its length with that
// header; a size larger than len(bufs[i])-offset means the frame did not
// fit and was cut. The header is the guest's: validate it (vnethdr.Fixup)
// before trusting it. A chain longer than maxFrame bytes after the guest's
// header is no frame a virtio-net driver sends: it is dropped, so a size
// is never more than vnethdr.Len+maxFrame.
//
// Read returns fewer than len(bufs) frames only when the queue is empty and
// the guest was asked to kick, which makes Fd readable, or when the call
// did its share of work (turnDescs descriptors, or as many drops as the
// ring has entries), which makes Fd readable at once; after a full batch
// call it again rather than wait on Fd.
//
// Errors: EAGAIN nothing to read (also while no front-end runs the rings);
// ErrBroken the guest broke the rules, or a kick eventfd polls in error or
// hung up (ErrGuest: logged, in Stats and an EventBroken); EBADFD the port
// is closed.
func (q *Queue) Read(bufs [][]byte, sizes []int, offset int) (n int, err error) {
	p, r := q.p, q.tx
	if err := p.lockRing(r); err != nil {
		return 0, err
	}
	defer p.unlockRing(r)
	if !r.started || r.broken.Load() {
		q.drain()
		if r.broken.Load() {
			return 0, ErrBroken
		}
		return 0, unix.EAGAIN
	}
	old := debug.SetPanicOnFault(true)
	defer p.recoverFault(r, old, &n, &err)
	var t tally
	n, err = q.readFrames(bufs[:min(len(bufs), len(sizes))], sizes, offset, &t)
	p.finish(r, &t)
	q.stats.addTx(&t)
	if n == 0 && err == nil {
		err = unix.EAGAIN
	}
	return n, err
}

// maxFrame is the longest frame Read returns, after the guest's header: a
// 64 KiB GSO frame with its Ethernet and VLAN headers.
const maxFrame = 1<<16 + 64

// readFrames takes frames off the transmit queue until bufs are full or
// the queue is empty with notifications enabled.
func (q *Queue) readFrames(bufs [][]byte, sizes []int, offset int, t *tally) (int, error) {
	p, r := q.p, q.tx
	n, drained, budget := 0, false, len(bufs)+int(r.num)
	r.w.budget = turnDescs
	for n < len(bufs) {
		if r.availLeft == 0 {
			d, err := r.refill()
			if err != nil {
				return n, p.broke(r, fmt.Errorf("%s: %w", r.name(), err))
			}
			if d == 0 {
				if drained {
					break
				}
				// Idle: consume the kicks that woke the caller, ask for
				// the next one and look once more, since the guest may
				// have added an entry before it saw the request.
				q.drain()
				if r.broken.Load() { // a kick eventfd in error
					return n, ErrBroken
				}
				drained = true
				if !r.notifyOn {
					r.setNotify(true)
				}
				continue
			}
			if r.notifyOn {
				r.setNotify(false) // busy: no kicks while draining
			}
		}
		if budget--; budget < 0 {
			// Only drops for a while: leave the rest to the next call and
			// make sure there is one.
			q.wake()
			break
		}
		head := r.nextHead()
		total, err := r.w.walk(head, false)
		if err != nil && err != errTooLong {
			// Leave the entry where it was, as drivers/vhost/vhost.c:
			// vhost_get_vq_desc does: GET_VRING_BASE answers it as next.
			r.lastAvail, r.availLeft = r.lastAvail-1, r.availLeft+1
			if err == errTurnDone {
				q.wake()
				break
			}
			return n, p.broke(r, fmt.Errorf("%s, chain at %d: %w", r.name(), head, err))
		}
		r.pushUsed(head, 0) // a transmit buffer gets nothing written
		// A disabled ring's frames are taken and dropped
		// (docs/interop/vhost-user.rst, "Ring states").
		if err != nil || !r.active || total < uint64(p.hdrLen) || total-uint64(p.hdrLen) > maxFrame {
			t.dropped++
			continue
		}
		var c int
		sizes[n], c = q.copyFrame(r.w.segs, bufs[n], offset, total)
		t.frames++
		t.bytes += uint64(c)
		n++
	}
	return n, nil
}

// copyFrame copies a walked transmit chain into b[offset:] as a 10-byte
// header and the frame, and returns the frame's size with that header and
// how many bytes of the frame it copied: fewer when b is too short, and
// what Stats count, since descriptors that overlap in guest memory make a
// chain's claimed length no measure of what it carried.
func (q *Queue) copyFrame(segs [][]byte, b []byte, offset int, total uint64) (size, copied int) {
	p := q.p
	size = vnethdr.Len + int(total) - p.hdrLen
	if offset < 0 || offset > len(b) || len(b)-offset < vnethdr.Len {
		return size, 0
	}
	dst := b[offset:]
	// The guest's header starts with the 10 bytes of struct
	// virtio_net_hdr; num_buffers, if there, means nothing on transmit.
	gather(segs, dst[:vnethdr.Len], 0)
	frame := dst[vnethdr.Len:]
	copied = gather(segs, frame, p.hdrLen)
	if copied >= 12 {
		q.learn(frame[6:12])
	}
	return size, copied
}

// learn remembers the source address of a unicast frame from the guest.
func (q *Queue) learn(src []byte) {
	if src[0]&1 != 0 || [6]byte(src) == q.macNow || [6]byte(src) == [6]byte{} {
		return
	}
	q.macNow = [6]byte(src)
	var v uint64
	for _, b := range src {
		v = v<<8 | uint64(b)
	}
	q.p.mac.Store(v | 1<<48)
}

// Write puts frames on the guest's receive queue. bufs[i][offset:] is a
// vnethdr.Len (10-byte) virtio_net_hdr and the frame; the guest gets the
// header it negotiated (12 bytes with num_buffers under VERSION_1 or
// MRG_RXBUF) and, with MRG_RXBUF, the frame spread over as many buffers as
// it takes. Write returns how many frames it took; when it took none, err
// says why bufs[0] failed, and a short count with a nil error means
// bufs[n] failed (writing again from there says why).
//
// Errors that leave the port usable: EAGAIN the guest posted no room (Fd
// becomes readable when it does), or, with n > 0, the call walked its
// share of descriptors (turnDescs; Fd is readable at once: write the rest
// from bufs[n] on the next turn); EOPNOTSUPP the frame needs an offload
// the guest did not negotiate (see GuestOffloads: segment it or complete
// its checksum first); EMSGSIZE it does not fit the guest's buffers;
// EINVAL its buffer is shorter than the header. ENETDOWN: no front-end
// runs the receive ring. ErrBroken: the guest broke the rules.
// EBADFD: closed.
func (q *Queue) Write(bufs [][]byte, offset int) (n int, err error) {
	p, r := q.p, q.rx
	if err := p.lockRing(r); err != nil {
		return 0, err
	}
	defer p.unlockRing(r)
	switch {
	case r.broken.Load():
		return 0, ErrBroken
	case !r.active:
		return 0, unix.ENETDOWN
	}
	old := debug.SetPanicOnFault(true)
	defer p.recoverFault(r, old, &n, &err)
	var t tally
	n, err = q.writeFrames(bufs, offset, &t)
	p.finish(r, &t)
	q.stats.addRx(&t)
	return n, err
}

func (q *Queue) writeFrames(bufs [][]byte, offset int, t *tally) (int, error) {
	p, r := q.p, q.rx
	var h [12]byte
	r.w.budget = turnDescs
	for n, b := range bufs {
		err := p.writeOne(r, &h, b, offset)
		if err == nil {
			t.frames++
			t.bytes += uint64(len(b) - offset - vnethdr.Len)
			continue
		}
		if err == errTurnDone {
			q.wake()
			return n, unix.EAGAIN
		}
		errno, ok := err.(unix.Errno)
		if !ok {
			return n, p.broke(r, err)
		}
		if n > 0 {
			return n, nil // the caller writes again from bufs[n] and learns why
		}
		if errno == unix.EAGAIN {
			t.noRoom++
		} else {
			t.refused++
		}
		return 0, errno
	}
	return len(bufs), nil
}

// writeOne writes one frame. It returns an errno for a frame that could
// not go, any other error when the guest broke the rules.
func (p *Port) writeOne(r *vring, h *[12]byte, b []byte, offset int) error {
	if offset < 0 || offset > len(b) || len(b)-offset < vnethdr.Len {
		return unix.EINVAL
	}
	f := b[offset:]
	copy(h[:vnethdr.Len], f)
	h[10], h[11] = 1, 0 // num_buffers
	frame := f[vnethdr.Len:]
	if !p.guestTakes(h, frame) {
		return unix.EOPNOTSUPP
	}
	return p.scatterFrame(r, h[:p.hdrLen], frame)
}

// guestTakes reports whether the guest negotiated what the frame's header
// needs, clearing the flags it must not see (virtio 1.x 5.1.6.3: without
// GUEST_CSUM the device sets flags to zero).
func (p *Port) guestTakes(h *[12]byte, frame []byte) bool {
	f := p.features
	if f&(1<<FeatureNetGuestCsum) == 0 {
		if h[0]&vnethdr.FlagNeedsCsum != 0 {
			return false
		}
		h[0] = 0
	}
	gso := h[1]
	if gso&vnethdr.GSOECN != 0 && f&(1<<FeatureNetGuestECN) == 0 {
		return false
	}
	var need uint
	switch gso &^ vnethdr.GSOECN {
	case vnethdr.GSONone:
		return gso == vnethdr.GSONone
	case vnethdr.GSOTCPv4:
		need = FeatureNetGuestTSO4
	case vnethdr.GSOTCPv6:
		need = FeatureNetGuestTSO6
	case vnethdr.GSOUDPL4:
		need = FeatureNetGuestUSO4
		if _, et, _ := vnethdr.L3Offset(frame); et == unix.ETH_P_IPV6 {
			need = FeatureNetGuestUSO6
		}
	default:
		return false
	}
	return f&(1<<need) != 0
}

// scatterFrame writes the guest's header and the frame into as many
// receive buffers as it takes (one without MRG_RXBUF) and queues them as
// used. A frame may use at most maxSegs descriptors and pieces of memory.
func (p *Port) scatterFrame(r *vring, hdr, frame []byte) error {
	need := len(hdr) + len(frame)
	if err := r.refused.verdict(r, need); err != 0 {
		return err
	}
	mrg := p.features&(1<<FeatureNetMrgRxbuf) != 0
	saveAvail, saveLeft, saveUsed := r.lastAvail, r.availLeft, r.usedIdx
	// A frame that cannot go whole, or breaks the rules, leaves the ring
	// as it was.
	undo := func(err error) error {
		if errno, ok := err.(unix.Errno); ok {
			r.refused = refusal{at: saveAvail, seen: r.lastAvail + r.availLeft, need: need, errno: errno}
		}
		r.lastAvail, r.availLeft, r.usedIdx = saveAvail, saveLeft, saveUsed
		return err
	}
	var nbLo, nbHi []byte
	pos, nbufs, segs, descs := 0, 0, 0, 0
	for pos < need {
		if r.availLeft == 0 {
			ok, err := r.room()
			if err != nil {
				return undo(fmt.Errorf("%s: %w", r.name(), err))
			}
			if !ok {
				return undo(unix.EAGAIN)
			}
		}
		head := r.nextHead()
		total, err := r.w.walk(head, true)
		switch {
		case err == errTurnDone:
			return undo(err)
		case err != nil:
			return undo(fmt.Errorf("%s, chain at %d: %w", r.name(), head, err))
		case mrg && total < uint64(len(hdr)):
			// virtio 1.x 5.1.6.3.1: with MRG_RXBUF every buffer holds a header.
			return undo(fmt.Errorf("%s, chain at %d: %d bytes, smaller than the %d-byte header", r.name(), head, total, len(hdr)))
		}
		segs, descs = segs+len(r.w.segs), descs+r.w.descs
		if segs > maxSegs || descs > maxSegs || !mrg && total < uint64(need) {
			return undo(unix.EMSGSIZE)
		}
		c := scatter(r.w.segs, hdr, frame, pos)
		if nbufs == 0 && pos+c < need {
			// num_buffers, in the first buffer's header (12 bytes: with
			// MRG_RXBUF), says how many more follow.
			nbLo, nbHi = byteAt(r.w.segs, 10), byteAt(r.w.segs, 11)
		}
		r.pushUsed(head, uint32(c))
		pos += c
		nbufs++
	}
	if nbufs > 1 {
		nbLo[0], nbHi[0] = byte(nbufs), byte(nbufs>>8)
	}
	return nil
}

// refusal remembers why the last frame that found no room (EAGAIN) or did
// not fit (EMSGSIZE) failed: a frame as long or longer, starting at the
// same entry while the guest posted nothing since, fails the same way, and
// is told so without walking the guest's buffers again.
type refusal struct {
	at, seen uint16 // the first entry the frame took; avail->idx as it read it
	need     int    // header and frame
	errno    unix.Errno
}

// verdict is the remembered errno if it applies to a frame of need bytes
// now, else 0.
func (f *refusal) verdict(r *vring, need int) unix.Errno {
	if f.errno == 0 || need < f.need || r.lastAvail != f.at || r.availIdx() != f.seen {
		return 0
	}
	return f.errno
}

// byteAt is the chain's byte i, which exists.
func byteAt(segs [][]byte, i int) []byte {
	for _, s := range segs {
		if i < len(s) {
			return s[i : i+1]
		}
		i -= len(s)
	}
	return nil
}

// room makes sure a write has an available entry. When the guest posted
// none it asks for a kick and looks once more.
func (r *vring) room() (bool, error) {
	d, err := r.refill()
	if err == nil && d == 0 && !r.notifyOn {
		r.setNotify(true)
		d, err = r.refill()
	}
	if err != nil || d == 0 {
		return false, err
	}
	if r.notifyOn {
		r.setNotify(false)
	}
	return true, nil
}

// lockRing holds the port, open, and ring r, for a Read or Write of r:
// EBADFD, and nothing held, when the port is closed. unlockRing lets go.
func (p *Port) lockRing(r *vring) error {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return unix.EBADFD
	}
	r.mu.Lock()
	return nil
}

func (p *Port) unlockRing(r *vring) {
	r.mu.Unlock()
	p.mu.RUnlock()
}

// finish publishes the batch's used entries and notifies the guest if it
// wants to know: one signal of the call eventfd per batch at most.
func (p *Port) finish(r *vring, t *tally) {
	if r.usedIdx == r.published {
		return
	}
	r.publish()
	if r.wantsCall() && p.sig.Signal(r.call) == nil {
		t.irqs++
	}
}

// broke stops the port after the guest broke the rules on ring r: every
// ring stops, the front-end hears of it on the ring's error eventfd
// (QEMU logs "vhost vring error"), and the ring's kicks no longer wake the
// caller. It returns the errno for the data path.
func (p *Port) broke(r *vring, err error) error {
	if !r.broken.CompareAndSwap(false, true) {
		return ErrBroken
	}
	for i := range p.rings {
		p.rings[i].broken.Store(true)
		if k := p.rings[i].kick; k >= 0 {
			_ = unix.EpollCtl(p.queueOf(i).epfd, unix.EPOLL_CTL_DEL, k, nil)
		}
	}
	e := fmt.Errorf("%w: %w", ErrGuest, err)
	p.stats.guestErrors.Add(1)
	p.plog.Error("vhost-user guest broke the virtqueue rules: port stopped until its driver restarts the rings",
		"queue", r.name(), "err", e)
	if r.errFd >= 0 {
		_ = p.sig.Signal(r.errFd)
	}
	p.state.Store(int32(StateBroken))
	p.emit(Event{Kind: EventBroken, Err: e})
	p.wake()
	return ErrBroken
}

// recoverFault ends a Read or Write that faulted on guest memory (a file
// the front-end shrank under its mapping raises SIGBUS, which
// debug.SetPanicOnFault turns into a panic): the port stops instead of the
// process.
func (p *Port) recoverFault(r *vring, old bool, n *int, err *error) {
	if v := memFault(old, recover()); v != nil {
		*n, *err = 0, p.broke(r, fmt.Errorf("fault on guest memory (did the front-end shrink its memory file?): %v", v))
	}
}

// memFault closes a window opened with debug.SetPanicOnFault(true): it
// restores the setting to old and sorts v, what recover returned in the
// deferred call. A fault on memory (the runtime error with an Addr method)
// is returned, nil stays nil, and any other panic goes on.
func memFault(old bool, v any) any {
	debug.SetPanicOnFault(old)
	if v == nil {
		return nil
	}
	if _, ok := v.(interface{ Addr() uintptr }); !ok {
		panic(v)
	}
	return v
}
