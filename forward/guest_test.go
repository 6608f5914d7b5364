package forward

import (
	"bytes"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward/fabric"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

var (
	guestMAC0 = net.HardwareAddr{0x02, 0, 0, 0, 0x10, 0}
	guestMAC1 = net.HardwareAddr{0x02, 0, 0, 0, 0x10, 1}
	wireMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0x20, 1}
	bcastMAC  = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

// segment is a queue (TAP and NIC fakes) and two guest ports, with a
// sender of their own on the NIC each.
type segment struct {
	f         *Forwarder
	q         *QueueWorker
	nic, tap  *forwardtest.Fake
	guests    []*forwardtest.Fake
	guestNICs []*forwardtest.Fake
	g0, g1    *GuestWorker
}

func newSegment(t *testing.T, c Config) *segment {
	t.Helper()
	c.TAPVnetHdr = true
	return newSegmentOn(t, c)
}

// newSegmentOn is a segment whose TAP has a vnet header if c says so.
func newSegmentOn(t testing.TB, c Config) *segment {
	t.Helper()
	s := &segment{nic: forwardtest.NewFake(t), tap: forwardtest.NewFake(t)}
	c.TAPMACs = append(c.TAPMACs, s.tapMAC())
	for i, mac := range []net.HardwareAddr{guestMAC0, guestMAC1} {
		s.guests = append(s.guests, forwardtest.NewFake(t))
		s.guestNICs = append(s.guestNICs, forwardtest.NewFake(t))
		c.Guests = append(c.Guests, GuestPort{Queues: []GuestQueue{{Guest: s.guests[i], NIC: s.guestNICs[i], CPU: -1}}, MAC: mac})
	}
	c.Batch, c.CPUs = 16, []int{-1}
	f, err := New([]Endpoint{s.tap}, []NIC{s.nic}, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s.f, s.q, s.g0, s.g1 = f, f.queues[0], f.GuestWorkers()[0], f.GuestWorkers()[1]
	return s
}

// ether is a frame from src to dst with an IPv4/TCP packet (payload n).
func ether(t *testing.T, src, dst net.HardwareAddr, n int) []byte {
	f := tcpFrame(t, n)
	copy(f, dst)
	copy(f[6:], src)
	return withHdr(vnethdr.Hdr{}, f)
}

// seen reports whether fake got a frame whose Ethernet header is hdr's.
func seen(fake *forwardtest.Fake, frame []byte) bool {
	for _, w := range fake.Written() {
		if bytes.Equal(w[vnethdr.Len:vnethdr.Len+12], frame[vnethdr.Len:vnethdr.Len+12]) {
			return true
		}
	}
	return false
}

// A sighting is whether a frame should reach an endpoint.
type sighting struct {
	what  string
	frame []byte
	at    *forwardtest.Fake
	want  bool
}

func checkSeen(t *testing.T, sightings []sighting) {
	t.Helper()
	for _, c := range sightings {
		if seen(c.at, c.frame) != c.want {
			t.Errorf("%s: seen %v, want %v", c.what, !c.want, c.want)
		}
	}
}

// reset makes s as newSegmentOn left it: its fakes and inboxes empty, its
// counters zero, its guests' workers having learned nothing.
func (s *segment) reset() {
	taken, tags := make([][]byte, guestInboxFrames), make([]fabric.Tag, guestInboxFrames)
	for _, in := range []*fabric.Inbox{s.q.in, s.g0.in, s.g1.in} {
		for {
			k, _ := in.Take(taken, tags)
			if !in.Release(k) || k == 0 {
				break
			}
		}
		in.Settle()
	}
	for _, fk := range append(append([]*forwardtest.Fake{s.nic, s.tap}, s.guests...), s.guestNICs...) {
		fk.Reset()
	}
	s.q.Counters = Counters{}
	for _, g := range s.f.guests {
		g.Counters = GuestCounters{}
		g.where = fabric.NewTable()
	}
}

// step runs every worker's loop once, in the order the frames travel.
func (s *segment) step(t *testing.T) {
	t.Helper()
	for _, g := range []*GuestWorker{s.g0, s.g1} {
		if _, err := g.fromGuestPort(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.q.nicToTAP(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.q.tx.toNIC(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.q.guestsToTAP(); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*GuestWorker{s.g0, s.g1} {
		if _, err := g.toGuestPort(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGuestUnicast: frames to a guest's MAC reach that guest alone, from
// the NIC, the TAP or another guest; a guest's frame to an address not
// seen yet goes to the NIC and the TAP, and once the answer came from the
// wire, to the NIC alone.
func TestGuestUnicast(t *testing.T) {
	s := newSegment(t, Config{})
	fromWire := ether(t, wireMAC, guestMAC0, 100)
	fromLab := ether(t, s.tapMAC(), guestMAC1, 101)
	g0toG1 := ether(t, guestMAC0, guestMAC1, 102)
	g1toWire := ether(t, guestMAC1, wireMAC, 103)
	s.nic.Push(forwardtest.Frame{Data: fromWire})
	s.tap.Push(forwardtest.Frame{Data: fromLab})
	s.guests[0].Push(forwardtest.Frame{Data: g0toG1})
	s.guests[1].Push(forwardtest.Frame{Data: g1toWire})
	s.step(t)
	checkSeen(t, []sighting{
		{"wire -> guest 0", fromWire, s.guests[0], true},
		{"wire -> guest 0 not on the TAP", fromWire, s.tap, false},
		{"lab -> guest 1", fromLab, s.guests[1], true},
		{"lab -> guest 1 not on the NIC", fromLab, s.nic, false},
		{"guest 0 -> guest 1", g0toG1, s.guests[1], true},
		{"guest 0 -> guest 1 not to the wire", g0toG1, s.guestNICs[0], false},
		{"guest 1 -> unknown: the wire", g1toWire, s.guestNICs[1], true},
		{"guest 1 -> unknown: the TAP", g1toWire, s.tap, true},
	})
	// Guest 0 heard from wireMAC: its answer goes to the wire alone.
	answer := ether(t, guestMAC0, wireMAC, 104)
	s.guests[0].Push(forwardtest.Frame{Data: answer})
	s.step(t)
	if !seen(s.guestNICs[0], answer) || seen(s.tap, answer) {
		t.Errorf("an answer to a wire host: wire %v, TAP %v; want the wire alone", seen(s.guestNICs[0], answer), seen(s.tap, answer))
	}
	n := &s.q.Counters.NICToTAP
	if n.Rx.Packets.Load() != 1 || n.ToGuests.Load() != 1 || n.Tx.Packets.Load() != 0 {
		t.Errorf("NIC->TAP: rx %d to guests %d tx %d; want 1, 1, 0", n.Rx.Packets.Load(), n.ToGuests.Load(), n.Tx.Packets.Load())
	}
	if g := &s.g1.Counters; g.To.Rx.Packets.Load() != 2 || g.To.Tx.Packets.Load() != 2 || g.From.Tx.Packets.Load() != 1 {
		t.Errorf("guest 1: to rx %d tx %d, from tx %d; want 2, 2, 1", g.To.Rx.Packets.Load(), g.To.Tx.Packets.Load(), g.From.Tx.Packets.Load())
	}
}

func (s *segment) tapMAC() net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 0x30, 1} }

// TestGuestBroadcast: a broadcast reaches every port but the one it came
// from.
func TestGuestBroadcast(t *testing.T) {
	s := newSegment(t, Config{})
	fromWire := ether(t, wireMAC, bcastMAC, 100)
	fromG0 := ether(t, guestMAC0, bcastMAC, 101)
	s.nic.Push(forwardtest.Frame{Data: fromWire})
	s.guests[0].Push(forwardtest.Frame{Data: fromG0})
	s.step(t)
	checkSeen(t, []sighting{
		{"wire bcast: TAP", fromWire, s.tap, true},
		{"wire bcast: guest 0", fromWire, s.guests[0], true},
		{"wire bcast: guest 1", fromWire, s.guests[1], true},
		{"guest 0 bcast: wire", fromG0, s.guestNICs[0], true},
		{"guest 0 bcast: TAP", fromG0, s.tap, true},
		{"guest 0 bcast: guest 1", fromG0, s.guests[1], true},
		{"guest 0 bcast: not back to guest 0", fromG0, s.guests[0], false},
	})
	balanced(t, "NIC->TAP", &s.q.Counters.NICToTAP, 0)
}

// TestGuestSlow: a guest with no room fills its inbox (the wire, its one
// sender, its share: fabric.SoleShare of guestInboxFrames); what does not
// fit is dropped and counted, and the other guest and the TAP get
// everything.
func TestGuestSlow(t *testing.T) {
	s := newSegment(t, Config{})
	s.guests[1].Full(true)
	const n = guestInboxFrames + 100
	for i := 0; i < n; i++ {
		s.nic.Push(forwardtest.Frame{Data: ether(t, wireMAC, bcastMAC, 60+i%100)})
		if i%16 == 15 {
			s.step(t)
		}
	}
	s.step(t)
	s.step(t)
	g1, held := &s.g1.Counters.To, fabric.SoleShare(guestInboxFrames)
	if got := g1.Drops[DropGuestBusy].Load(); got != uint64(n-held) || g1.Tx.Packets.Load() != 0 {
		t.Errorf("slow guest: guest_busy %d, written %d; want %d, 0", got, g1.Tx.Packets.Load(), n-held)
	}
	if len(s.guests[0].Written()) != n || len(s.tap.Written()) != n {
		t.Errorf("the others: guest 0 got %d, the TAP %d; want %d each", len(s.guests[0].Written()), len(s.tap.Written()), n)
	}
	s.guests[1].Full(false)
	s.step(t)
	if got := len(s.guests[1].Written()); got != held {
		t.Errorf("once it had room the slow guest got %d, want the %d that waited", got, held)
	}
}

// TestGuestBurst: a burst toward a guest goes in one Write, as many frames
// as the guest has buffers for (no cap of a batch); the rest wait in the
// inbox, uncounted as drops, until it posts more.
func TestGuestBurst(t *testing.T) {
	s := newSegment(t, Config{})
	s.guests[0].Room(300)
	for i := 0; i < 500; i++ {
		s.nic.Push(forwardtest.Frame{Data: ether(t, wireMAC, guestMAC0, 60)})
	}
	for range 500/16 + 1 {
		if _, err := s.q.nicToTAP(); err != nil {
			t.Fatal(err)
		}
	}
	more, err := s.g0.toGuestPort()
	d := &s.g0.Counters.To
	if err != nil || more || s.guests[0].Writes() != 1 || len(s.guests[0].Written()) != 300 {
		t.Fatalf("one turn: err %v more %v, %d Writes, %d frames taken; want 1 Write of 300", err, more, s.guests[0].Writes(), len(s.guests[0].Written()))
	}
	if d.Rx.Packets.Load() != 500 || d.Tx.Packets.Load() != 300 || d.Drops[DropGuestBusy].Load() != 0 {
		t.Errorf("counted rx %d tx %d guest_busy %d; want 500, 300, 0", d.Rx.Packets.Load(), d.Tx.Packets.Load(), d.Drops[DropGuestBusy].Load())
	}
	s.guests[0].Room(1000)
	if _, err := s.g0.toGuestPort(); err != nil || len(s.guests[0].Written()) != 500 || d.Tx.Packets.Load() != 500 {
		t.Errorf("once it posted buffers: err %v, %d frames in all, tx %d; want 500", err, len(s.guests[0].Written()), d.Tx.Packets.Load())
	}
}

// TestGuestChecks: the guest is not trusted: bad headers, oversize frames
// and forged sources are dropped and counted.
func TestGuestChecks(t *testing.T) {
	s := newSegment(t, Config{})
	h, f := gsoFrame(t, 3000, 1448)
	copy(f, wireMAC)
	copy(f[6:], guestMAC0)
	h.CsumStart = 14 // the kernel refuses a transport offset below 20
	forged := ether(t, wireMAC, bcastMAC, 60)
	s.guests[0].Push(forwardtest.Frame{Data: withHdr(h, f)}, forwardtest.Frame{Data: forged},
		forwardtest.Frame{Data: make([]byte, vnethdr.Len+8)})
	s.step(t)
	d := &s.g0.Counters.From
	if d.Drops[DropBadHdr].Load() != 2 || d.Drops[DropSpoofed].Load() != 1 || d.Tx.Packets.Load() != 0 {
		t.Errorf("bad_vnet_hdr %d spoofed %d sent %d; want 2, 1, 0", d.Drops[DropBadHdr].Load(), d.Drops[DropSpoofed].Load(), d.Tx.Packets.Load())
	}
	balanced(t, "from guest 0", d, 0)
}

// TestGuestSoftOffload: a GSO frame for a guest that did not take TSO is
// segmented for it.
func TestGuestSoftOffload(t *testing.T) {
	s := newSegment(t, Config{})
	s.guests[0].Refuse(func(b []byte) error {
		var h vnethdr.Hdr
		if h.Decode(b) == nil && h.IsGSO() {
			return unix.EOPNOTSUPP
		}
		return nil
	})
	h, f := gsoFrame(t, 10000, 1448)
	copy(f, guestMAC0)
	copy(f[6:], wireMAC)
	s.nic.Push(forwardtest.Frame{Data: withHdr(h, f)})
	s.step(t)
	if got := len(s.guests[0].Written()); got != 7 { // ceil(10000/1448)
		t.Errorf("guest got %d frames, want the 7 segments", got)
	}
	if d := &s.g0.Counters.To; d.Tx.Packets.Load() != 7 || d.Drops[DropGuestRefused].Load() != 0 {
		t.Errorf("to guest: tx %d refused %d; want the 7 segments, 0", d.Tx.Packets.Load(), d.Drops[DropGuestRefused].Load())
	}
	s.guests[0].Room(4) // 4 of the next 7 segments fit: the rest are guest_busy
	s.nic.Push(forwardtest.Frame{Data: withHdr(h, f)})
	s.step(t)
	if d := &s.g0.Counters.To; d.Tx.Packets.Load() != 11 || d.Drops[DropGuestBusy].Load() != 3 || d.Drops[DropGuestRefused].Load() != 0 {
		t.Errorf("to a guest with room for 4 segments: tx %d guest_busy %d refused %d; want 11, 3, 0",
			d.Tx.Packets.Load(), d.Drops[DropGuestBusy].Load(), d.Drops[DropGuestRefused].Load())
	}
}

// TestGuestRun: with Run's goroutines, a worker per queue or one per
// direction (split), a frame from the wire reaches a guest and its answer
// the wire, and one from the TAP reaches a guest; Run stops with every
// worker.
func TestGuestRun(t *testing.T) {
	for _, split := range [][]int{nil, {-1}} {
		s := newSegment(t, Config{Split: split})
		goroutines := runtime.NumGoroutine()
		stop := running(s.f)
		<-s.f.Started()
		s.nic.Push(forwardtest.Frame{Data: ether(t, wireMAC, guestMAC1, 80)})
		s.guests[1].Push(forwardtest.Frame{Data: ether(t, guestMAC1, wireMAC, 81)})
		s.tap.Push(forwardtest.Frame{Data: ether(t, s.tapMAC(), guestMAC0, 82)})
		for deadline := time.Now().Add(2 * time.Second); len(s.guests[1].Written()) == 0 || len(s.guestNICs[1].Written()) == 0 || len(s.guests[0].Written()) == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("split %v: guest 1 got %d, its NIC sent %d; guest 0 got %d from the TAP", split,
					len(s.guests[1].Written()), len(s.guestNICs[1].Written()), len(s.guests[0].Written()))
			}
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		for i := 0; runtime.NumGoroutine() > goroutines; i++ {
			if i == 100 {
				t.Fatalf("split %v: %d goroutines after Run, %d before", split, runtime.NumGoroutine(), goroutines)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestZeroAllocsGuests: frames between the wire and a guest, both ways,
// and from the guest to the TAP through the queue worker, over socketpairs
// behind the real endpoint code, allocate nothing.
func TestZeroAllocsGuests(t *testing.T) {
	nic, wire := forwardtest.NIC(t, 16)
	tq, lab := forwardtest.TAP(t)
	gq, guest := forwardtest.TAP(t) // the guest's end speaks frames with a vnet header
	gnic, gwire := forwardtest.NIC(t, 16)
	f, err := New([]Endpoint{tq}, []NIC{nic}, Config{Batch: 16, CPUs: []int{-1}, TAPVnetHdr: true,
		Guests: []GuestPort{{Queues: []GuestQueue{{Guest: gq, NIC: gnic, CPU: -1}}, MAC: guestMAC0}}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q, g := f.queues[0], f.GuestWorkers()[0]
	in, out := ether(t, wireMAC, guestMAC0, 1400), ether(t, guestMAC0, wireMAC, 1400)
	toLab := ether(t, guestMAC0, macB, 1400) // not seen yet: the NIC, and a copy to the TAP
	sink := make([]byte, 70000)
	copies := 0
	allocs := testing.AllocsPerRun(200, func() {
		unix.Write(wire, in)
		q.nicToTAP()
		g.toGuestPort()
		unix.Read(guest, sink)
		unix.Write(guest, out)
		unix.Write(guest, toLab)
		g.fromGuestPort()
		unix.Read(gwire, sink)
		unix.Read(gwire, sink)
		q.guestsToTAP()
		if _, err := unix.Read(lab, sink); err == nil {
			copies++
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per frame each way, want 0", allocs)
	}
	if g.Counters.To.Tx.Packets.Load() == 0 || g.Counters.From.Tx.Packets.Load() == 0 {
		t.Errorf("nothing moved: to guest %d, from guest %d", g.Counters.To.Tx.Packets.Load(), g.Counters.From.Tx.Packets.Load())
	}
	if copies != 201 { // AllocsPerRun runs it once more first
		t.Errorf("the TAP got %d copies of the guest's frames, want 201", copies)
	}
}

// GuestDropReasons lists what a guest's frames can be dropped for: the L2
// policy's reasons only when it is on, the inbox's and the guest's own
// refusals toward it.
func TestGuestDropReasons(t *testing.T) {
	has := func(rs []DropReason, r DropReason) bool {
		for _, x := range rs {
			if x == r {
				return true
			}
		}
		return false
	}
	from, to := newSegment(t, Config{}).f.GuestDropReasons()
	if has(from, DropGuestVLAN) || has(from, DropL2Control) || !has(from, DropNICBusy) || !has(to, DropGuestBusy) || !has(to, DropGuestRefused) {
		t.Errorf("default: from the guest %v, to it %v", from, to)
	}
	from, _ = newSegment(t, Config{L2: L2Policy{DenyVLANs: true, DropControl: true}}).f.GuestDropReasons()
	if !has(from, DropGuestVLAN) || !has(from, DropL2Control) {
		t.Errorf("with the L2 policy: from the guest %v", from)
	}
}

// learnLab has guest 0 hear from the lab host behind the TAP (labMAC), so
// that its frames to that host go to the TAP alone.
func (s *segment) learnLab(t *testing.T) {
	t.Helper()
	frame := ether(t, s.tapMAC(), guestMAC0, 60)
	if s.q.tapHdr == 0 {
		frame = frame[vnethdr.Len:]
	}
	s.tap.Push(forwardtest.Frame{Data: frame})
	s.step(t)
	if len(s.guests[0].Written()) != 1 {
		t.Fatal("guest 0 did not get the lab's frame")
	}
}

// TestGuestToPlainTAP: without a vnet header on the TAP, a guest's GSO
// frame reaches the TAP as its segments, and a frame with a partial
// checksum (NEEDS_CSUM) with the checksum completed, each with no header
// in front, as frames from the wire do; a flood's copy that does not fit
// the TAP's inbox (over the guest's share of it) is an error, not a drop.
func TestGuestToPlainTAP(t *testing.T) {
	s := newSegmentOn(t, Config{})
	s.learnLab(t)
	h, f := gsoFrame(t, 10000, 1448)
	copy(f, s.tapMAC())
	copy(f[6:], guestMAC0)
	s.guests[0].Push(forwardtest.Frame{Data: withHdr(h, f)})
	s.step(t)
	vnethdrtest.CheckTCPSegments(t, s.tap.Written(), f, 1448)
	if d := &s.g0.Counters.From; d.Rx.Packets.Load() != 1 || d.Tx.Packets.Load() != 7 || s.q.Counters.Segments.Load() != 7 {
		t.Errorf("from guest 0: rx %d tx %d, queue segments %d; want 1, 7, 7", d.Rx.Packets.Load(), d.Tx.Packets.Load(), s.q.Counters.Segments.Load())
	}
	whole := tcpFrame(t, 300)
	copy(whole, s.tapMAC())
	copy(whole[6:], guestMAC0)
	h, partial := gsoFrame(t, 300, 1448) // the pseudo-header sum where the checksum goes
	copy(partial, whole[:12])
	h.GSOType, h.GSOSize, h.HdrLen = vnethdr.GSONone, 0, 0
	s.guests[0].Push(forwardtest.Frame{Data: withHdr(h, partial)})
	s.step(t)
	if out := s.tap.Written(); len(out) != 8 || !bytes.Equal(out[7], whole) {
		t.Errorf("a NEEDS_CSUM frame reached the TAP as\n% x\nwant\n% x", out[len(out)-1], whole)
	}
	for i := 0; i < tapInboxFrames+3; i++ {
		s.guests[1].Push(forwardtest.Frame{Data: ether(t, guestMAC1, bcastMAC, 60)})
	}
	for i := 0; i < tapInboxFrames/16+1; i++ {
		if _, err := s.g1.fromGuestPort(); err != nil {
			t.Fatal(err)
		}
	}
	over := uint64(tapInboxFrames + 3 - fabric.SoleShare(tapInboxFrames)) // over guest 1's share of the inbox
	if d := &s.g1.Counters.From; d.Errors.Load() != over || d.Drops[DropTAPWrite].Load() != 0 {
		t.Errorf("copies over the inbox's room: errors %d, tap_write %d; want %d, 0", d.Errors.Load(), d.Drops[DropTAPWrite].Load(), over)
	}
}

// TestOneWriterToTAP: with Run's goroutines, a guest and the wire send
// toward the TAP at once, faster than it takes them; every frame is
// written or counted, and the TAP queue is written from one goroutine
// only, its queue worker's (run with -race).
func TestOneWriterToTAP(t *testing.T) {
	s := newSegment(t, Config{})
	s.learnLab(t)
	stop := running(s.f)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	<-s.f.Started()
	const n = 2000
	var wg sync.WaitGroup
	for _, src := range []struct {
		ep   *forwardtest.Fake
		from net.HardwareAddr
	}{{s.nic, wireMAC}, {s.guests[0], guestMAC0}} {
		frame := ether(t, src.from, s.tapMAC(), 200)
		wg.Go(func() {
			for i := 0; i < n; i++ {
				src.ep.Push(forwardtest.Frame{Data: frame})
				if i%97 == 0 {
					s.tap.FailWrite(unix.ENOBUFS) // a full TAP now and then
				}
			}
		})
	}
	wg.Wait()
	wire, guest := &s.q.Counters.NICToTAP, &s.g0.Counters.From
	accounted := func(d *Dir) bool {
		var drops uint64
		for i := range d.Drops {
			drops += d.Drops[i].Load()
		}
		return d.Rx.Packets.Load() == n && d.Tx.Packets.Load()+drops == n
	}
	for deadline := time.Now().Add(10 * time.Second); !accounted(wire) || !accounted(guest); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not every frame accounted for: wire rx %d tx %d, guest rx %d tx %d",
				wire.Rx.Packets.Load(), wire.Tx.Packets.Load(), guest.Rx.Packets.Load(), guest.Tx.Packets.Load())
		}
	}
	// The lab's frame to guest 0 went through the TAP's reader, not its
	// writer; the TAP took every frame counted as transmitted.
	if got, want := uint64(len(s.tap.Written())), wire.Tx.Packets.Load()+guest.Tx.Packets.Load(); got != want {
		t.Errorf("TAP took %d frames, the counters say %d", got, want)
	}
	if guest.Tx.Packets.Load() == 0 || wire.Tx.Packets.Load() == 0 {
		t.Errorf("nothing went through: wire tx %d, guest tx %d", wire.Tx.Packets.Load(), guest.Tx.Packets.Load())
	}
	if w := s.tap.Writers(); w != 1 {
		t.Errorf("the TAP was written from %d goroutines, want 1 (its queue worker's)", w)
	}
}

// TestGuestOwnMAC: a guest sends with its port's address only, StrictMAC
// or not: a frame from guest 0 with guest 1's address, the lab's or a wire
// host's as its source reaches no one and counts as spoofed_mac.
func TestGuestOwnMAC(t *testing.T) {
	s := newSegment(t, Config{})
	var forged [][]byte
	for _, src := range []net.HardwareAddr{guestMAC1, s.tapMAC(), wireMAC} {
		for _, dst := range []net.HardwareAddr{bcastMAC, guestMAC1, wireMAC} {
			f := ether(t, src, dst, 60)
			forged = append(forged, f)
			s.guests[0].Push(forwardtest.Frame{Data: f})
		}
	}
	own := ether(t, guestMAC0, guestMAC1, 61)
	s.guests[0].Push(forwardtest.Frame{Data: own})
	s.step(t)
	d := &s.g0.Counters.From
	if d.Drops[DropSpoofed].Load() != uint64(len(forged)) || d.Tx.Packets.Load() != 1 {
		t.Errorf("spoofed_mac %d, transmitted %d; want %d, 1", d.Drops[DropSpoofed].Load(), d.Tx.Packets.Load(), len(forged))
	}
	for _, at := range []*forwardtest.Fake{s.guests[1], s.guestNICs[0], s.tap} {
		for _, w := range at.Written() {
			if !bytes.Equal(w[vnethdr.Len+6:vnethdr.Len+12], guestMAC0) {
				t.Errorf("a frame from guest 0 left with source %s", net.HardwareAddr(w[vnethdr.Len+6:vnethdr.Len+12]))
			}
		}
	}
	if !seen(s.guests[1], own) {
		t.Error("guest 0's frame with its own address did not reach guest 1")
	}
	balanced(t, "from guest 0", d, 0)
}

// TestWireCannotPoisonLearning: frames from the wire whose source is an
// address of the TAP's side (the lab's, a macvtap guest's) or a guest's
// teach the guests nothing and reach no one: they are dropped and counted
// as spoofed_mac, and guest 0's frames to the lab still go to the TAP.
func TestWireCannotPoisonLearning(t *testing.T) {
	macvtapGuest := net.HardwareAddr{0x02, 0, 0, 0, 0x40, 1}
	s := newSegment(t, Config{TAPMACs: []net.HardwareAddr{macvtapGuest}})
	toLab := ether(t, guestMAC0, s.tapMAC(), 70)
	toMacvtap := ether(t, guestMAC0, macvtapGuest, 71)
	for round, learned := range []bool{false, true} {
		if learned {
			s.learnLab(t)
		}
		ends := []*forwardtest.Fake{s.tap, s.guests[0], s.guests[1]}
		before := make([]int, len(ends))
		for i, at := range ends {
			before[i] = len(at.Written())
		}
		for _, src := range []net.HardwareAddr{s.tapMAC(), macvtapGuest, guestMAC1} {
			for _, dst := range []net.HardwareAddr{bcastMAC, guestMAC0} {
				s.nic.Push(forwardtest.Frame{Data: ether(t, src, dst, 80)})
			}
		}
		s.step(t)
		for i, at := range ends {
			if n := len(at.Written()) - before[i]; n != 0 {
				t.Errorf("round %d: %d of the wire's forged frames reached endpoint %d (the TAP, guest 0, guest 1)", round, n, i)
			}
		}
		tapBefore, nicBefore := len(s.tap.Written()), len(s.guestNICs[0].Written())
		s.guests[0].Push(forwardtest.Frame{Data: toLab}, forwardtest.Frame{Data: toMacvtap})
		s.step(t)
		if len(s.tap.Written()) != tapBefore+2 {
			t.Errorf("round %d (lab learned %v): guest 0's frames to the lab and the macvtap guest: the TAP got %d, want 2",
				round, learned, len(s.tap.Written())-tapBefore)
		}
		if learned && len(s.guestNICs[0].Written()) != nicBefore+1 { // the macvtap guest was never heard from
			t.Errorf("round %d: guest 0's frames went to the wire %d times, want 1 (the unknown macvtap guest's)", round, len(s.guestNICs[0].Written())-nicBefore)
		}
	}
	d := &s.q.Counters.NICToTAP
	if d.Drops[DropSpoofed].Load() != 12 || d.Tx.Packets.Load() != 0 || d.ToGuests.Load() != 0 {
		t.Errorf("NIC->TAP: spoofed_mac %d, to the TAP %d, to guests %d; want 12, 0, 0", d.Drops[DropSpoofed].Load(), d.Tx.Packets.Load(), d.ToGuests.Load())
	}
	balanced(t, "NIC->TAP", d, 0)
	if fromNIC, _ := s.f.DropReasons(); !slices.Contains(fromNIC, DropSpoofed) {
		t.Errorf("the NIC's drop reasons %v lack spoofed_mac", fromNIC)
	}
}
