package traffic

import (
	"context"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
)

// CheckTCPUDP runs 2 s of TCP and then 2 s of UDP at 20 Mbit/s wire->lab
// and lab->wire through fw on bed. TCP must move at least minTCP bytes
// (a stalled forwarder, with broken partial checksums or GSO handling,
// moves almost nothing); every datagram sent must reach the receiving
// stack or be counted as dropped: a busy machine may overflow the TAP's
// queue or the packet socket's while tapfwd waits for a CPU, and the
// kernel counts that. A datagram the receiving iperf3's full socket buffer
// refuses still arrived (RcvbufErrors there, after tapfwd delivered it).
func CheckTCPUDP(t testing.TB, bed *testbed.Bed, fw *testbed.Process, minTCP int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, rev := range []bool{false, true} {
		dir := map[bool]string{false: "wire->lab", true: "lab->wire"}[rev]
		r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev})
		if err != nil {
			t.Fatalf("TCP %s: %v\n%s", dir, err, fw.Output())
		}
		if r.Bytes < minTCP {
			t.Errorf("TCP %s: only %d bytes in 2 s", dir, r.Bytes)
		}
		t.Logf("TCP %s: %.2f Gbit/s, %d retransmits", dir, r.BitsPerSecond/1e9, r.Retransmits)
		rxNS := map[bool]string{false: bed.LabNS, true: bed.WireNS}[rev]
		before, dropsBefore := kernel.UDPArrived(t, bed, rxNS), prom.CountedDrops(t, bed)
		u, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev, UDP: true, Bitrate: "20M", Len: 1200})
		if err != nil {
			t.Fatalf("UDP %s: %v", dir, err)
		}
		arrived, dropped := kernel.UDPArrived(t, bed, rxNS)-before, prom.CountedDrops(t, bed)-dropsBefore
		if dropped > 0 {
			t.Logf("UDP %s: %d datagrams arrived, %d counted as dropped", dir, arrived, dropped)
		}
		if u.Packets < 1000 || float64(arrived+dropped) < 0.99*float64(u.Packets) {
			t.Errorf("UDP %s: %d datagrams sent, %d reached the receiver's stack, %d counted as dropped (iperf3: %.1f%% lost)",
				dir, u.Packets, arrived, dropped, u.LostPercent)
		}
	}
}

// CheckQueues runs 16 TCP flows wire->lab and then lab->wire through fw
// (started with queues queues), stops it, and checks that each queue
// carried traffic both ways: 16 flows hash onto every queue.
func CheckQueues(t testing.TB, bed *testbed.Bed, fw *testbed.Process, queues int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, rev := range []bool{false, true} {
		if _, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Streams: 16, Reverse: rev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("tapfwd exit: %v\n%s", err, fw.Output())
	}
	tot := testkit.Totals(t, fw.Output())
	for q := range queues {
		if tot[q].NICRx == 0 || tot[q].TAPRx == 0 {
			t.Errorf("queue %d carried no traffic in one direction: %+v (16 flows hash onto every queue)", q, tot[q])
		}
	}
}

// StartIperf starts an iperf3 run of o on bed, after which it waits 1.5 s
// for the run to get going; wait waits for the run's end (within a minute,
// or when t ends) and returns its error.
func StartIperf(t testing.TB, bed *testbed.Bed, o iperf.Options) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := iperf.Run(ctx, bed, o)
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	return func() error { return <-done }
}

// FlapLink sets dev in ns down, runs whileDown, sets it up again, and
// checks that fw is still running and the lab is reachable within 2 s.
func FlapLink(t testing.TB, bed *testbed.Bed, fw *testbed.Process, ns, dev string, whileDown func()) {
	t.Helper()
	testkit.BedRun(t, bed, ns, "ip", "link", "set", dev, "down")
	whileDown()
	testkit.BedRun(t, bed, ns, "ip", "link", "set", dev, "up")
	took := testkit.ReachableWithin(t, bed, 2*time.Second)
	t.Logf("%s: lab reachable %v after the link came back", dev, took.Round(time.Millisecond))
	if fw.Exited() {
		t.Fatalf("tapfwd exited on a link flap:\n%s", fw.Output())
	}
}
