package forward

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward/fabric"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// BenchmarkGuestToTAP: a batch of 32 MTU-sized frames a guest sends to
// the lab, through the guest's worker, the TAP queue's inbox and the
// queue worker's write, over socketpairs behind the real TAP code (the
// guest's end too); with two guests, each sends every other batch into
// the one inbox. ns/frame is per frame written to the TAP.
func BenchmarkGuestToTAP(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run([]string{"", "one-guest", "two-guests"}[n], func(b *testing.B) { benchGuestToTAP(b, n) })
	}
}

func benchGuestToTAP(b *testing.B, guests int) {
	const batch = 32
	nic, _ := forwardtest.NIC(b, batch)
	tq, lab := forwardtest.TAP(b)
	setNonblock(b, lab)
	var ports []GuestPort
	var ends []int
	for i := range guests {
		gq, end := forwardtest.TAP(b)
		gnic, _ := forwardtest.NIC(b, batch)
		ports = append(ports, GuestPort{Queues: []GuestQueue{{Guest: gq, NIC: gnic, CPU: -1}}, MAC: []byte{0x02, 0, 0, 0, 0x10, byte(i)}})
		ends = append(ends, end)
	}
	f, err := New([]Endpoint{tq}, []NIC{nic}, Config{Batch: batch, CPUs: []int{-1}, TAPVnetHdr: true, Guests: ports})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	q := f.queues[0]
	var frames [][][]byte
	for i, g := range f.GuestWorkers() {
		seg := mtuSegments(b, 1)[0]
		copy(seg[vnethdr.Len:], macB)
		copy(seg[vnethdr.Len+6:], ports[i].MAC)
		back := append([]byte(nil), seg...)
		copy(back[vnethdr.Len:], ports[i].MAC)
		copy(back[vnethdr.Len+6:], macB)
		g.where.Learn([][]byte{back}, []fabric.Tag{{From: fabric.TAP}}) // the lab is behind the TAP
		frames = append(frames, [][]byte{seg})
	}
	sink := make([]byte, 70000)
	b.SetBytes(int64(batch * (len(frames[0][0]) - vnethdr.Len)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % guests
		for range batch {
			unix.Write(ends[k], frames[k][0])
		}
		if n, _ := f.GuestWorkers()[k].fromGuestPort(); n != batch {
			b.Fatalf("guest %d: read %d of %d frames", k, n, batch)
		}
		q.guestsToTAP()
		drain(lab, sink)
	}
	var sent uint64
	for _, g := range f.GuestWorkers() {
		sent += g.Counters.From.Tx.Packets.Load()
	}
	if sent != uint64(b.N*batch) {
		b.Fatalf("%d of %d frames written to the TAP", sent, b.N*batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/frame")
}
