package metrics

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/tap"
)

// fakeForwarder is a Forwarder over socketpairs: no root needed. It
// returns the wire's and the lab's ends.
func fakeForwarder(t *testing.T) (*forward.Forwarder, int, int) {
	return fakeForwarderWith(t, forward.Config{})
}

// fakeForwarderWith is fakeForwarder configured by c (Batch and CPUs are
// set here).
func fakeForwarderWith(t *testing.T, c forward.Config) (*forward.Forwarder, int, int) {
	nic, wire := forwardtest.NIC(t, 16)
	tq, lab := forwardtest.TAP(t)
	c.Batch, c.CPUs = 16, []int{-1}
	fw, err := forward.New([]forward.Endpoint{tq}, []forward.NIC{nic}, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	return fw, wire, lab
}

func TestCollectorLint(t *testing.T) {
	fw, _, _ := fakeForwarder(t)
	c := NewCollector(Source{TAP: "tap0", NIC: "eth1", Features: tap.Features{NAPI: true, VnetHdr: true, MultiQueue: true, Offloads: unix.TUN_F_CSUM}, Forwarder: fw})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// Only the reasons that can happen: kernel_ring, and what this
	// configuration can drop.
	n := testutil.CollectAndCount(c, "tapfwd_drops_total")
	fromNIC, fromTAP := fw.DropReasons()
	if want := 1 + len(fromNIC) + len(fromTAP); n != want || want != 11 {
		t.Errorf("%d drop series, want %d (kernel_ring, %v from the NIC, %v from the TAP), and that 11", n, want, fromNIC, fromTAP)
	}
	if n := testutil.CollectAndCount(c, "tapfwd_to_guests_frames_total"); n != 0 {
		t.Errorf("%d tapfwd_to_guests_frames_total series without a vhost-user port, want none", n)
	}
	want := `
# HELP tapfwd_tap_info What was negotiated with the kernel for the TAP.
# TYPE tapfwd_tap_info gauge
tapfwd_tap_info{device="tap0",multi_queue="true",napi="true",offloads="csum",vnet_hdr="true"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "tapfwd_tap_info"); err != nil {
		t.Error(err)
	}
}

// TestScrapeWhileForwarding scrapes continuously while a worker forwards:
// the race detector checks that the two share no unsynchronised state, and
// the counters a scrape sees only grow and end at what was sent.
func TestScrapeWhileForwarding(t *testing.T) {
	fw, nicPeer, tapPeer := fakeForwarder(t)
	reg := NewRegistry(NewCollector(Source{TAP: "tap0", NIC: "eth1", Forwarder: fw}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- fw.Run(ctx) }()

	frame := make([]byte, 10+60)
	copy(frame[10:], []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5}) // local experimental ethertype
	const frames = 2000
	q := fw.QueueWorkers()[0]
	// A socketpair, unlike a TAP, refuses writes when full: frames the
	// worker could not write are counted as tap_write drops.
	delivered := func(got int) bool {
		return uint64(got)+q.Counters.NICToTAP.Drops[forward.DropTAPWrite].Load() >= frames
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 2048)
		deadline := time.Now().Add(30 * time.Second) // a guard against hanging, not a speed target
		for got := 0; !delivered(got) && time.Now().Before(deadline); {
			if _, err := unix.Read(tapPeer, buf); err == nil {
				got++
			} else {
				var p [1]unix.PollFd
				p[0] = unix.PollFd{Fd: int32(tapPeer), Events: unix.POLLIN}
				unix.Poll(p[:], 100)
			}
		}
	}()
	var last float64
	for i := 0; i < frames; i++ {
		for {
			if _, err := unix.Write(nicPeer, frame); err == nil {
				break
			}
			var p [1]unix.PollFd
			p[0] = unix.PollFd{Fd: int32(nicPeer), Events: unix.POLLOUT}
			unix.Poll(p[:], 100)
		}
		if i%100 == 0 {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			v := value(mfs, "tapfwd_packets_total", "eth1", "rx")
			if v < last {
				t.Fatalf("receive counter went back: %v after %v", v, last)
			}
			last = v
		}
	}
	wg.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mfs, _ := reg.Gather()
	if v := value(mfs, "tapfwd_packets_total", "eth1", "rx"); v != frames {
		t.Errorf("NIC receive packets = %v, want %d", v, frames)
	}
	drops := float64(q.Counters.NICToTAP.Drops[forward.DropTAPWrite].Load())
	if v := value(mfs, "tapfwd_packets_total", "tap0", "tx"); v+drops != frames {
		t.Errorf("TAP transmit packets %v + drops %v, want %d", v, drops, frames)
	}
}

// value sums the series of name with these device and direction labels.
func value(mfs []*dto.MetricFamily, name, device, direction string) float64 {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["device"] == device && labels["direction"] == direction {
				sum += m.GetCounter().GetValue()
			}
		}
		return sum
	}
	return -1
}

// TestZeroAllocsWithMetrics forwards frames through a running worker while
// its collector is registered (and scraped before and after): the whole
// process allocates nothing per frame, so metrics add nothing to the hot
// path.
func TestZeroAllocsWithMetrics(t *testing.T) {
	fw, nicPeer, tapPeer := fakeForwarder(t)
	reg := NewRegistry(NewCollector(Source{TAP: "tap0", NIC: "eth1", Forwarder: fw}))
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- fw.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	unix.SetNonblock(tapPeer, false) // the test blocks on the forwarded frame
	frame := make([]byte, 10+1500)
	copy(frame[10:], []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5})
	buf := make([]byte, 2048)
	step := func() {
		unix.Write(nicPeer, frame)
		unix.Read(tapPeer, buf)
	}
	step()
	if allocs := testing.AllocsPerRun(2000, step); allocs != 0 {
		t.Errorf("%v allocations per forwarded frame with metrics enabled, want 0", allocs)
	}
	mfs, _ := reg.Gather()
	if v := value(mfs, "tapfwd_packets_total", "tap0", "tx"); v < 2000 {
		t.Errorf("TAP transmit packets = %v, want >= 2000", v)
	}
}
