package forward

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"

	"github.com/tapfwd/tapfwd/forward/fabric"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// TestGuestQueues: a guest port of two queue pairs has a worker per pair
// (run under Run, with -race): frames for it spread over the pairs it
// runs by flow, each flow on one pair; what it sends on a pair leaves
// through that pair's NIC sender; with one pair running, all go to the
// first. Both pairs count on the port's counters.
func TestGuestQueues(t *testing.T) {
	nic, tap := forwardtest.NewFake(t), forwardtest.NewFake(t)
	queues := []*forwardtest.Fake{forwardtest.NewFake(t), forwardtest.NewFake(t)}
	senders := []*forwardtest.Fake{forwardtest.NewFake(t), forwardtest.NewFake(t)}
	var active atomic.Int32
	active.Store(2)
	gp := GuestPort{MAC: guestMAC0, Active: func() int { return int(active.Load()) }}
	for k := range queues {
		gp.Queues = append(gp.Queues, GuestQueue{Guest: queues[k], NIC: senders[k], CPU: -1})
	}
	f, err := New([]Endpoint{tap}, []NIC{nic}, Config{Batch: 16, CPUs: []int{-1}, TAPVnetHdr: true, Guests: []GuestPort{gp}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.GuestWorkers()) != 1 || len(f.workers) != 3 {
		t.Fatalf("%d guest ports, %d workers; want 1 and 3 (the TAP queue's, one per pair)", len(f.GuestWorkers()), len(f.workers))
	}
	stop := running(f)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	<-f.Started()
	flow := func(port uint16) []byte {
		b := ether(t, wireMAC, guestMAC0, 60)
		binary.BigEndian.PutUint16(b[vnethdr.Len+14+20:], port)
		return b
	}
	const flows = 64
	for p := range flows {
		nic.Push(forwardtest.Frame{Data: flow(uint16(1000 + p))}, forwardtest.Frame{Data: flow(uint16(1000 + p))})
	}
	forwardtest.WaitFor(t, func() bool { return len(queues[0].Written())+len(queues[1].Written()) == 2*flows })
	pairOf := map[uint16]int{}
	for k, q := range queues {
		if len(q.Written()) == 0 {
			t.Errorf("pair %d got no frames of %d flows", k, flows)
		}
		for _, b := range q.Written() {
			p := binary.BigEndian.Uint16(b[vnethdr.Len+14+20:])
			if was, ok := pairOf[p]; ok && was != k {
				t.Errorf("flow %d on both pairs", p)
			}
			pairOf[p] = k
		}
	}
	queues[1].Push(forwardtest.Frame{Data: ether(t, guestMAC0, wireMAC, 70)})
	forwardtest.WaitFor(t, func() bool { return len(senders[1].Written()) == 1 })
	if len(senders[0].Written()) != 0 {
		t.Errorf("a frame the guest sent on pair 1 left through pair 0's sender")
	}
	active.Store(1)
	for p := range flows {
		nic.Push(forwardtest.Frame{Data: flow(uint16(1000 + p))})
	}
	forwardtest.WaitFor(t, func() bool { return len(queues[0].Written())+len(queues[1].Written()) == 3*flows })
	if got := len(queues[0].Written()) - countPair(pairOf, 0)*2; got != flows {
		t.Errorf("with one pair running the first got %d of %d frames", got, flows)
	}
	c := &f.GuestWorkers()[0].Counters
	forwardtest.WaitFor(t, func() bool { return c.To.Tx.Packets.Load() >= 3*flows }) // published after the Write
	if c.To.Tx.Packets.Load() != 3*flows || c.From.Rx.Packets.Load() != 1 {
		t.Errorf("port counters: to tx %d, from rx %d; want %d, 1", c.To.Tx.Packets.Load(), c.From.Rx.Packets.Load(), 3*flows)
	}
}

func countPair(pairOf map[uint16]int, k int) (n int) {
	for _, q := range pairOf {
		if q == k {
			n++
		}
	}
	return n
}

// TestGuestFloodOnAllPairs: a guest flooding the TAP on four queue pairs
// reaches every TAP queue's inbox, one of which another guest's frames
// for the TAP share; with the TAP the bottleneck (each queue worker takes
// a batch of 16 a round, the flooder offers 32 on each pair) the other
// guest's steady stream loses no frame (no tap_write), all of it written
// to the TAP, while the flooder loses what the TAP cannot take. The
// flooder sends half its round before the steady guest and half after,
// so it always finds the room the TAP's worker freed first.
func TestGuestFloodOnAllPairs(t *testing.T) {
	const pairs, rounds, flood, steady = 4, 100, 32, 2
	var taps []Endpoint
	var nics []NIC
	var tapFakes []*forwardtest.Fake
	for range pairs {
		tapFakes = append(tapFakes, forwardtest.NewFake(t))
		taps, nics = append(taps, tapFakes[len(tapFakes)-1]), append(nics, forwardtest.NewFake(t))
	}
	ports := []GuestPort{{MAC: guestMAC0}, {MAC: guestMAC1}}
	var guests [2][]*forwardtest.Fake
	for i, n := range []int{pairs, 1} {
		for range n {
			g := forwardtest.NewFake(t)
			guests[i] = append(guests[i], g)
			ports[i].Queues = append(ports[i].Queues, GuestQueue{Guest: g, NIC: forwardtest.NewFake(t), CPU: -1})
		}
	}
	lab := net.HardwareAddr{0x02, 0, 0, 0, 0x30, 1}
	f, err := New(taps, nics, Config{Batch: 16, CPUs: []int{-1, -1, -1, -1}, TAPVnetHdr: true, TAPMACs: []net.HardwareAddr{lab}, Guests: ports})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var flooder []*GuestWorker
	var calm *GuestWorker
	for _, w := range f.workers[pairs:] {
		g := w.kind.(*GuestWorker)
		g.where.Learn([][]byte{ether(t, lab, g.MAC, 60)}, []fabric.Tag{{From: fabric.TAP}}) // the lab is behind the TAP
		if g.ID == 0 {
			flooder = append(flooder, g)
		} else {
			calm = g
		}
	}
	flood0, steady1 := ether(t, guestMAC0, lab, 1000), ether(t, guestMAC1, lab, 100)
	sendOn := func(g *GuestWorker, fake *forwardtest.Fake, b []byte, n int) {
		for range n {
			fake.Push(forwardtest.Frame{Data: b})
		}
		for sent := 0; sent < n; {
			k, err := g.fromGuestPort()
			if err != nil || k == 0 {
				t.Fatalf("guest %d pair %d: read %d frames: %v", g.ID, g.Queue, k, err)
			}
			sent += k
		}
	}
	for range rounds {
		for k, g := range flooder {
			sendOn(g, guests[0][k], flood0, flood/2)
		}
		sendOn(calm, guests[1][0], steady1, steady)
		for k, g := range flooder {
			sendOn(g, guests[0][k], flood0, flood/2)
		}
		for _, q := range f.queues {
			if _, err := q.guestsToTAP(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range f.queues { // what still waits behind the flood
		for more := true; more; {
			if more, err = q.guestsToTAP(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c0, c1 := &f.GuestWorkers()[0].Counters.From, &f.GuestWorkers()[1].Counters.From
	if d := c1.Drops[DropTAPWrite].Load(); d != 0 || c1.Tx.Packets.Load() != rounds*steady {
		t.Errorf("the steady guest: tap_write %d, sent %d of %d", d, c1.Tx.Packets.Load(), rounds*steady)
	}
	got := 0
	for _, b := range tapFakes[1].Written() {
		if bytes.Equal(b[vnethdr.Len+6:vnethdr.Len+12], guestMAC1) {
			got++
		}
	}
	if got != rounds*steady {
		t.Errorf("TAP queue 1 got %d of the steady guest's %d frames", got, rounds*steady)
	}
	if c0.Drops[DropTAPWrite].Load() == 0 {
		t.Error("the flooder lost nothing: the TAP was no bottleneck")
	}
}
