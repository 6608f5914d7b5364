package forward

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

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
	waitFor(t, func() bool { return len(queues[0].Written())+len(queues[1].Written()) == 2*flows })
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
	waitFor(t, func() bool { return len(senders[1].Written()) == 1 })
	if len(senders[0].Written()) != 0 {
		t.Errorf("a frame the guest sent on pair 1 left through pair 0's sender")
	}
	active.Store(1)
	for p := range flows {
		nic.Push(forwardtest.Frame{Data: flow(uint16(1000 + p))})
	}
	waitFor(t, func() bool { return len(queues[0].Written())+len(queues[1].Written()) == 3*flows })
	if got := len(queues[0].Written()) - countPair(pairOf, 0)*2; got != flows {
		t.Errorf("with one pair running the first got %d of %d frames", got, flows)
	}
	c := &f.GuestWorkers()[0].Counters
	waitFor(t, func() bool { return c.To.Tx.Packets.Load() >= 3*flows }) // published after the Write
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

// waitFor waits up to 5 s for ok.
func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
