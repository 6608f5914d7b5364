package forward

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// TestSplitBothWays: a split queue over a real packet socket and TAP
// queue (each on a socketpair) moves frames both ways at once, every one
// of them, and counts them, with its two workers on two threads, whether
// they sleep in ppoll, spin before they sleep or spin without end (run it
// with -race: they share the counters and nothing else).
func TestSplitBothWays(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"block", Config{}},
		{"spin", Config{SpinMax: 50 * time.Microsecond}},
		{"busy", Config{Busy: true}},
	} {
		t.Run(c.name, func(t *testing.T) { splitBothWays(t, c.cfg) })
	}
}

func splitBothWays(t *testing.T, c Config) {
	sock, wire := forwardtest.NIC(t, 8)
	tq, lab := forwardtest.TAP(t)
	c.Batch, c.CPUs, c.Split = 8, []int{-1}, []int{-1}
	f, err := New([]Endpoint{tq}, []NIC{sock}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop := running(f)
	<-f.Started()
	const n = 200
	var wg sync.WaitGroup
	wg.Go(func() {
		for range n {
			mustWrite(t, wire, withHdr(vnethdr.Hdr{}, tcpFrame(t, 100)))
		}
	})
	wg.Go(func() {
		for range n {
			mustWrite(t, lab, tcpFrame(t, 100))
		}
	})
	got := map[int]int{}
	count := func(fd, side int) {
		buf := make([]byte, 2000)
		for {
			if _, err := unix.Read(fd, buf); err != nil {
				return
			}
			got[side]++
		}
	}
	for deadline := time.Now().Add(5 * time.Second); (got[0] < n || got[1] < n) && time.Now().Before(deadline); {
		count(lab, 0)
		count(wire, 1)
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	q := f.QueueWorkers()[0]
	if got[0] != n || got[1] != n || q.Counters.NICToTAP.Tx.Packets.Load() != n || q.Counters.TAPToNIC.Tx.Packets.Load() != n {
		t.Errorf("split queue: %d frames reached the lab and %d the wire (counted %d and %d), want %d each",
			got[0], got[1], q.Counters.NICToTAP.Tx.Packets.Load(), q.Counters.TAPToNIC.Tx.Packets.Load(), n)
	}
}

// TestSplitTAPWedged: the two directions of a split queue do not wait for
// each other. With the TAP's reader wedged in a read, frames from the NIC
// still reach the TAP, and Stalled names that worker alone.
func TestSplitTAPWedged(t *testing.T) {
	nic, tp := forwardtest.NewFake(t), forwardtest.NewFake(t)
	f, err := New([]Endpoint{tp}, []NIC{nic}, Config{Batch: 8, CPUs: []int{-1}, Split: []int{-1}, TAPVnetHdr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop := running(f)
	defer stop()
	defer tp.Release()
	<-f.Started()
	tp.Hold()
	time.Sleep(100 * time.Millisecond) // the TAP's reader is in its read
	f.Stalled()
	nic.Push(forwardtest.Frame{Data: withHdr(vnethdr.Hdr{}, tcpFrame(t, 60))})
	forwardtest.WaitFor(t, func() bool { return len(tp.Written()) == 1 })
	time.Sleep(100 * time.Millisecond)
	if s := f.Stalled(); !slices.Equal(s, []string{"queue 0 from the TAP"}) {
		t.Errorf("TAP reader wedged: Stalled = %v, want [queue 0 from the TAP]", s)
	}
}

// TestSplitRefused: New refuses to split a queue whose endpoints cannot
// be read and written at once (a TAP queue on io_uring shares one ring),
// or a Split that does not give each queue a CPU.
func TestSplitRefused(t *testing.T) {
	sock, _ := forwardtest.NIC(t, 8)
	uq, _ := forwardtest.URingTAP(t, 8)
	tq, _ := forwardtest.TAP(t)
	for _, c := range []struct {
		tap   Endpoint
		split []int
		want  string
	}{
		{uq, []int{-1}, "*tap.URingQueue cannot be read and written at once"},
		{tq, []int{}, "0 CPUs for 1 queues"},
	} {
		_, err := New([]Endpoint{c.tap}, []NIC{sock}, Config{CPUs: []int{-1}, Split: c.split})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Split %v with a %T: New = %v, want %q", c.split, c.tap, err, c.want)
		}
	}
}
