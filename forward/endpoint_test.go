package forward

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// fakePair is a queue between two scripted endpoints.
type fakePair struct {
	q        *QueueWorker
	nic, tap *forwardtest.Fake
}

func newFakePair(t *testing.T, tapVnet bool) *fakePair {
	t.Helper()
	return newPairWith(t, Config{Batch: 8, TAPVnetHdr: tapVnet})
}

// newPairWith is a fakePair whose one queue runs with c (unpinned).
func newPairWith(t *testing.T, c Config) *fakePair {
	t.Helper()
	nic, tap := forwardtest.NewFake(t), forwardtest.NewFake(t)
	c.CPUs = []int{-1}
	f, err := New([]Endpoint{tap}, []NIC{nic}, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &fakePair{q: f.queues[0], nic: nic, tap: tap}
}

// balanced checks received = transmitted + merged + drops for d, where
// what went to guests alone (ToGuests) is transmitted to them.
func balanced(t *testing.T, what string, d *Dir, merged uint64) {
	t.Helper()
	var drops uint64
	for i := range d.Drops {
		drops += d.Drops[i].Load()
	}
	rx, tx, guests := d.Rx.Packets.Load(), d.Tx.Packets.Load(), d.ToGuests.Load()
	if rx != tx+guests+merged+drops {
		t.Errorf("%s: received %d != transmitted %d + to guests %d + merged %d + dropped %d", what, rx, tx, guests, merged, drops)
	}
}

// TestVLANFromNIC: a tag the kernel stripped (reported beside the frame)
// is put back in the frame written to the TAP, and a partial checksum
// still points at the TCP header.
func TestVLANFromNIC(t *testing.T) {
	p := newFakePair(t, true)
	h, f := gsoFrame(t, 3000, 1448)
	p.nic.Push(forwardtest.Frame{Data: withHdr(h, f), Tagged: true, TPID: 0x8100, TCI: 42})
	if n, err := p.q.nicToTAP(); n != 1 || err != nil {
		t.Fatalf("nicToTAP = %d, %v", n, err)
	}
	out := p.tap.Written()
	if len(out) != 1 {
		t.Fatalf("TAP got %d frames, want 1", len(out))
	}
	var gh vnethdr.Hdr
	gh.Decode(out[0])
	frame := out[0][vnethdr.Len:]
	if binary.BigEndian.Uint16(frame[12:]) != 0x8100 || binary.BigEndian.Uint16(frame[14:])&0xfff != 42 {
		t.Fatalf("no 802.1Q tag 42 in the frame: % x", frame[:18])
	}
	if !bytes.Equal(frame[18:], f[14:]) || gh.CsumStart != h.CsumStart+4 {
		t.Errorf("tagged frame body or csum_start wrong: csum_start %d, want %d", gh.CsumStart, h.CsumStart+4)
	}
	if got := p.q.Counters.NICToTAP.Rx.Bytes.Load(); got != uint64(len(f)+4) {
		t.Errorf("received bytes %d, want %d (the tag counts)", got, len(f)+4)
	}
}

// TestTAPGoneMidBatch: the TAP disappears while a batch is written, from
// the NIC or from a guest; the worker ends with ErrTAPGone and every frame
// of the batch is accounted for (a guest's on the guest).
func TestTAPGoneMidBatch(t *testing.T) {
	for _, from := range []string{"NIC", "guest"} {
		s := newSegment(t, Config{})
		s.learnLab(t)
		src, mac, d := s.nic, wireMAC, &s.q.Counters.NICToTAP
		turn := func() error { _, err := s.q.nicToTAP(); return err }
		if from == "guest" {
			src, mac, d = s.guests[0], guestMAC0, &s.g0.Counters.From
			turn = func() error {
				s.g0.fromGuestPort()
				_, err := s.q.guestsToTAP()
				return err
			}
		}
		for i := 0; i < 3; i++ {
			src.Push(forwardtest.Frame{Data: ether(t, mac, s.tapMAC(), 100+i)})
		}
		s.tap.FailWrite(nil, unix.EBADFD)
		if err := turn(); !errors.Is(err, ErrTAPGone) {
			t.Fatalf("from the %s: %v, want ErrTAPGone", from, err)
		}
		if d.Rx.Packets.Load() != 3 || d.Tx.Packets.Load() != 1 || d.Drops[DropTAPWrite].Load() != 2 {
			t.Errorf("from the %s: rx %d tx %d tap_write %d; want 3, 1, 2", from, d.Rx.Packets.Load(), d.Tx.Packets.Load(), d.Drops[DropTAPWrite].Load())
		}
		balanced(t, "from the "+from, d, 0)
	}
}

// TestTAPWriteErrors: frames the TAP refuses (down, full) are dropped one
// by one and the rest go through.
func TestTAPWriteErrors(t *testing.T) {
	p := newFakePair(t, false)
	for i := 0; i < 4; i++ {
		p.nic.Push(forwardtest.Frame{Data: withHdr(vnethdr.Hdr{}, tcpFrame(t, 100+i))})
	}
	p.tap.FailWrite(nil, unix.ENOBUFS, nil, unix.EIO)
	if _, err := p.q.nicToTAP(); err != nil {
		t.Fatal(err)
	}
	if got := len(p.tap.Written()); got != 2 {
		t.Errorf("TAP took %d frames, want 2", got)
	}
	if d := p.q.Counters.NICToTAP.Drops[DropTAPWrite].Load(); d != 2 {
		t.Errorf("tap_write drops %d, want 2", d)
	}
	if !p.q.fw.tap.down.Load() {
		t.Error("EIO did not mark the TAP down")
	}
	balanced(t, "NIC->TAP", &p.q.Counters.NICToTAP, 0)
	// The next frame through marks it up again.
	p.nic.Push(forwardtest.Frame{Data: withHdr(vnethdr.Hdr{}, tcpFrame(t, 60))})
	p.q.nicToTAP()
	if p.q.fw.tap.down.Load() {
		t.Error("TAP still marked down after a write went through")
	}
}

// TestNICDownAndGone: a NIC that went down is waited for, one that is gone
// ends the worker.
func TestNICDownAndGone(t *testing.T) {
	p := newFakePair(t, true)
	p.nic.FailRead(unix.ENETDOWN)
	if _, err := p.q.nicToTAP(); err != nil || !p.q.fw.nic.down.Load() {
		t.Fatalf("ENETDOWN: err %v, down %v; want nil, true", err, p.q.fw.nic.down.Load())
	}
	p.nic.Push(forwardtest.Frame{Data: withHdr(vnethdr.Hdr{}, tcpFrame(t, 60))})
	p.q.nicToTAP()
	if p.q.fw.nic.down.Load() {
		t.Error("NIC still marked down after a frame arrived")
	}
	p.nic.FailRead(unix.ENODEV)
	if _, err := p.q.nicToTAP(); !errors.Is(err, ErrNICGone) {
		t.Fatalf("ENODEV: %v, want ErrNICGone", err)
	}
}

// TestNICWriteErrors: frames the NIC refuses are counted and the rest of
// the batch is sent.
func TestNICWriteErrors(t *testing.T) {
	p := newFakePair(t, false)
	for i := 0; i < 4; i++ {
		p.tap.Push(forwardtest.Frame{Data: tcpFrame(t, 100+i)})
	}
	p.nic.FailWrite(nil, unix.EINVAL, unix.ENOBUFS, nil)
	if n, err := p.q.tx.toNIC(); n != 4 || err != nil {
		t.Fatalf("tx.toNIC = %d, %v", n, err)
	}
	d := &p.q.Counters.TAPToNIC
	if len(p.nic.Written()) != 2 || d.Drops[DropNICRefused].Load() != 1 || d.Drops[DropNICBusy].Load() != 1 {
		t.Errorf("sent %d, refused %d, busy %d; want 2, 1, 1", len(p.nic.Written()), d.Drops[DropNICRefused].Load(), d.Drops[DropNICBusy].Load())
	}
	balanced(t, "TAP->NIC", d, 0)
}

// TestNICWriteGone: a NIC whose send says it is gone (ENXIO: an AF_XDP
// socket whose device was unregistered, which its reads never say) ends
// the worker, the rest of the batch dropped as refused.
func TestNICWriteGone(t *testing.T) {
	for _, e := range []unix.Errno{unix.ENXIO, unix.ENODEV} {
		p := newFakePair(t, false)
		for i := 0; i < 3; i++ {
			p.tap.Push(forwardtest.Frame{Data: tcpFrame(t, 100+i)})
		}
		p.nic.FailWrite(nil, e)
		if _, err := p.q.tx.toNIC(); !errors.Is(err, ErrNICGone) {
			t.Fatalf("%v on a send: %v, want ErrNICGone", e, err)
		}
		d := &p.q.Counters.TAPToNIC
		if len(p.nic.Written()) != 1 || d.Drops[DropNICRefused].Load() != 2 {
			t.Errorf("%v: sent %d, refused %d; want 1, 2", e, len(p.nic.Written()), d.Drops[DropNICRefused].Load())
		}
		balanced(t, "TAP->NIC", d, 0)
	}
}

// TestTAPReadGone: the frames read before the TAP vanished are sent, then
// the worker ends.
func TestTAPReadGone(t *testing.T) {
	p := newFakePair(t, false)
	p.tap.Push(forwardtest.Frame{Data: tcpFrame(t, 100)})
	p.tap.FailRead(unix.EBADFD)
	if n, err := p.q.tx.toNIC(); n != 1 || !errors.Is(err, ErrTAPGone) {
		t.Fatalf("tx.toNIC = %d, %v; want 1, ErrTAPGone", n, err)
	}
	if len(p.nic.Written()) != 1 {
		t.Error("the frame read before the TAP went away was not sent")
	}
	balanced(t, "TAP->NIC", &p.q.Counters.TAPToNIC, 0)
}

// TestOversizeFromTAP: a TAP read that fills its whole buffer was cut
// short (a TUN read does not say so) and is dropped as oversize.
func TestOversizeFromTAP(t *testing.T) {
	for _, vnet := range []bool{true, false} {
		p := newPair(t, vnet, 8)
		setNonblock(t, p.nicPeer)
		big := make([]byte, frameCap+200)
		copy(big, withHdr(vnethdr.Hdr{}, tcpFrame(t, 100)))
		mustWrite(t, p.tapPeer, big)
		ok := tcpFrame(t, 100)
		if vnet {
			ok = withHdr(vnethdr.Hdr{}, ok)
		}
		mustWrite(t, p.tapPeer, ok)
		if n, err := p.q.tx.toNIC(); n != 2 || err != nil {
			t.Fatalf("vnet %v: tx.toNIC = %d, %v", vnet, n, err)
		}
		d := &p.q.Counters.TAPToNIC
		if d.Drops[DropOversize].Load() != 1 || d.Tx.Packets.Load() != 1 {
			t.Errorf("vnet %v: oversize %d tx %d; want 1, 1", vnet, d.Drops[DropOversize].Load(), d.Tx.Packets.Load())
		}
		if got := readAll(t, p.nicPeer); len(got) != 1 {
			t.Errorf("vnet %v: NIC got %d frames, want 1", vnet, len(got))
		}
	}
}

// TestKernelStatsWhileReattaching: scrapes read the NIC's kernel counters
// while Reattach swaps the NIC (run with -race).
func TestKernelStatsWhileReattaching(t *testing.T) {
	p := newPair(t, true, 8)
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Go(func() {
		for !stop.Load() {
			p.q.KernelStats()
		}
	})
	for i := 0; i < 50; i++ {
		nic, _ := forwardtest.NIC(t, 8)
		if err := p.q.fw.Reattach([]NIC{nic}); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if p.q.w.pfd[1].Fd < 0 {
		t.Error("poll set lost the NIC")
	}
}

// TestErrorContract: one reading of every errno an endpoint returns, the
// table in endpoint.go, whichever the endpoint.
func TestErrorContract(t *testing.T) {
	for _, c := range []struct {
		err  error
		want action
	}{
		{unix.EAGAIN, wait}, {unix.EINTR, retry}, {unix.ENOBUFS, busy},
		{unix.ENETDOWN, down}, {unix.EIO, down},
		{unix.ENODEV, gone}, {unix.ENXIO, gone}, {unix.EBADFD, gone},
		{vhostuser.ErrBroken, breach}, {unix.EOPNOTSUPP, needsOffload},
		{unix.EINVAL, failed}, {unix.EMSGSIZE, failed}, {unix.EFAULT, failed}, {errors.New("other"), failed},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestSendContract: what send does with each answer of a Write, for a
// sink that drops what finds no room and for one that keeps it.
func TestSendContract(t *testing.T) {
	for _, c := range []struct {
		name     string
		errs     []error // the five frames' answers, one each
		keep     bool
		done     int
		sent     uint64
		refused  uint64
		busy     uint64
		softened int
		down     bool
		gone     bool
	}{
		{name: "taken", errs: []error{nil, unix.EINTR, nil, nil, nil}, done: 5, sent: 5},
		{name: "refused", errs: []error{nil, unix.EINVAL, nil, unix.EMSGSIZE, nil}, done: 5, sent: 3, refused: 2},
		{name: "busy", errs: []error{unix.ENOBUFS, nil, nil, nil, nil}, done: 5, sent: 4, busy: 1},
		// No room, once more after the wait for it: the rest is dropped.
		{name: "full, dropped", errs: []error{nil, unix.EAGAIN, unix.EAGAIN}, done: 5, sent: 1, busy: 4},
		{name: "full, kept", errs: []error{nil, unix.EAGAIN}, keep: true, done: 1, sent: 1},
		{name: "offload", errs: []error{nil, unix.EOPNOTSUPP, nil, nil, nil}, done: 5, sent: 4, softened: 1},
		{name: "down", errs: []error{nil, nil, unix.EIO}, done: 5, sent: 2, refused: 3, down: true},
		{name: "breach", errs: []error{nil, vhostuser.ErrBroken}, done: 5, sent: 1, refused: 4},
		{name: "gone", errs: []error{nil, unix.EBADFD}, done: 5, sent: 1, refused: 4, gone: true},
	} {
		p := newFakePair(t, true)
		ep := forwardtest.NewFake(t)
		ep.FailWrite(c.errs...)
		softened := 0
		var l link
		l.log = p.q.fw.nic.log
		s := &sink{ep: ep, hdr: vnethdr.Len, refused: DropNICRefused, busy: DropNICBusy, link: &l, gone: ErrNICGone,
			keep: c.keep, soft: func([]byte, *tally) { softened++ }}
		frames := make([][]byte, 5)
		for i := range frames {
			frames[i] = withHdr(vnethdr.Hdr{}, tcpFrame(t, 60))
		}
		var tl tally
		if done, err := p.q.w.send(s, frames, &tl); done != c.done || (err != nil) != c.gone {
			t.Errorf("%s: send = %d, %v; want %d, gone %v", c.name, done, err, c.done, c.gone)
		}
		if tl.txPkts != c.sent || tl.drops[DropNICRefused] != c.refused || tl.drops[DropNICBusy] != c.busy ||
			softened != c.softened || l.down.Load() != c.down {
			t.Errorf("%s: sent %d refused %d busy %d softened %d down %v; want %d, %d, %d, %d, %v", c.name,
				tl.txPkts, tl.drops[DropNICRefused], tl.drops[DropNICBusy], softened, l.down.Load(),
				c.sent, c.refused, c.busy, c.softened, c.down)
		}
	}
}
