package rr

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// loopPair opens a connected client and server on 127.0.0.1 in this
// namespace: the tool without a test bed, and without privileges.
func loopPair(t *testing.T) (client, server int) {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	c, err := udpSocket(lo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(c) })
	s, err := udpSocket(lo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(s) })
	if err := connectPair(c, s); err != nil {
		t.Fatal(err)
	}
	return c, s
}

func TestRRLoopback(t *testing.T) {
	c, s := loopPair(t)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const rate = 5000
	res, err := runRR(context.Background(), c, s, Options{Rate: rate, Duration: 600 * time.Millisecond, Warmup: 50 * time.Millisecond, SenderFIFO: 50})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d received %d arrived %d missed %d reordered %d; rate %.0f/s; RTT min %v p50 %v p99 %v max %v; send lag p50 %v p99 %v; sender CPU %.1f%%; %d allocations",
		res.Sent, res.Received, res.Arrived, res.Missed, res.Reordered, res.Rate(), res.RTT.Min(), res.RTT.Quantile(0.5), res.RTT.Quantile(0.99), res.RTT.Max(),
		res.SendLag.Quantile(0.5), res.SendLag.Quantile(0.99), 100*res.SenderCPU, after.Mallocs-before.Mallocs)
	if res.SenderCPU <= 0 || res.SenderCPU > 1 {
		t.Errorf("sender CPU %v: want a share of one CPU above 0", res.SenderCPU)
	}
	// Loose bounds: the machine is shared and the race detector slows
	// everything; these catch a broken tool, not a slow one. Every slot of
	// the schedule is sent, or counted missed or refused; the sender keeps
	// the rate itself only under SCHED_FIFO (root), and without it, on a
	// busy machine, misses slots.
	if r := float64(res.Sent+res.Missed+res.SendErrors) / res.Duration.Seconds(); r < 0.8*rate || r > 1.01*rate {
		t.Errorf("%.0f slots/s sent, missed or refused, want about %d", r, rate)
	}
	if r := res.Rate(); res.SenderFIFO && (r < 0.8*rate || r > 1.01*rate) {
		t.Errorf("achieved %.0f requests/s under SCHED_FIFO, want about %d", r, rate)
	}
	if res.Received == 0 || res.Received > res.Sent || res.Arrived < res.Received {
		t.Errorf("sent %d, arrived %d, received %d", res.Sent, res.Arrived, res.Received)
	}
	if res.RTT.Count() != res.Received {
		t.Errorf("%d round-trip times for %d replies", res.RTT.Count(), res.Received)
	}
	if res.RTT.Min() <= 0 || res.RTT.Quantile(0.5) > 50*time.Millisecond {
		t.Errorf("RTT min %v p50 %v", res.RTT.Min(), res.RTT.Quantile(0.5))
	}
	// Nothing is allocated per request: a few hundred at most for the run.
	if n := after.Mallocs - before.Mallocs; n > res.Sent/4 {
		t.Errorf("%d allocations for %d requests", n, res.Sent)
	}
}

// TestRRDelayQueues checks the receiver on its own: with replies already
// waiting in its socket, each one waits for the delay spent on those before
// it, so the i-th reply's round-trip time is at least i delays, however the
// machine schedules the threads.
func TestRRDelayQueues(t *testing.T) {
	c, s := loopPair(t)
	const delay, n = 300 * time.Microsecond, 20
	r := &rrRun{o: Options{Delay: delay}, client: c, server: s, base: time.Now(), run: 2,
		res: &Result{RTT: new(stats.Histogram), SendLag: new(stats.Histogram)}}
	buf := make([]byte, DefaultPayload)
	binary.LittleEndian.PutUint32(buf, rrMagic)
	binary.LittleEndian.PutUint32(buf[4:], r.run|1)
	for i := range n {
		binary.LittleEndian.PutUint64(buf[8:], uint64(i))
		binary.LittleEndian.PutUint64(buf[16:], uint64(r.now()))
		if _, err := unix.Write(s, buf); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error)
	go func() { done <- r.receive() }()
	for deadline := time.Now().Add(5 * time.Second); r.received.Load() < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	r.stop.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rtt := r.res.RTT
	t.Logf("%d replies: RTT min %v p50 %v max %v", rtt.Count(), rtt.Min(), rtt.Quantile(0.5), rtt.Max())
	if rtt.Count() != n {
		t.Fatalf("%d replies recorded, want %d", rtt.Count(), n)
	}
	// Every datagram was written before the receiver started, so the i-th
	// reply waits out i delays. (1% for the histogram's bucket width.)
	if rtt.Max() < (n-1)*delay || rtt.Quantile(0.5) < (n/2-1)*delay*99/100 {
		t.Errorf("RTT p50 %v max %v: want the last of %d queued replies to wait about %v", rtt.Quantile(0.5), rtt.Max(), n, (n-1)*delay)
	}
}

// TestRRDelay runs the whole tool with a delay: at a low rate the reply is
// timed before the delay is spent, so round trips stay short; at a rate the
// receiver cannot keep up with, replies queue.
func TestRRDelay(t *testing.T) {
	c, s := loopPair(t)
	const delay = 300 * time.Microsecond
	// SCHED_FIFO, as the reference ran xsk_rr, where the privilege is
	// there: requests leave on time on a machine busy with other tests.
	slow, err := runRR(context.Background(), c, s, Options{Rate: 500, Delay: delay, Duration: 400 * time.Millisecond, SenderFIFO: 50})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := runRR(context.Background(), c, s, Options{Rate: 8000, Delay: delay, Duration: 400 * time.Millisecond, SenderFIFO: 50})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("500/s: p50 %v, %d/%d; 8000/s: p50 %v, %d/%d, %.0f/s sent, %d slots missed, send lag p50 %v max %v, FIFO %v",
		slow.RTT.Quantile(0.5), slow.Received, slow.Sent, fast.RTT.Quantile(0.5), fast.Received, fast.Sent,
		fast.Rate(), fast.Missed, fast.SendLag.Quantile(0.5), fast.SendLag.Max(), fast.SenderFIFO)
	// The receiver takes at most 1/delay replies a second. Whether the
	// sender outran it depends on the CPU it got: judge what it sent.
	if fast.Rate()*delay.Seconds() > 1.5 {
		if fast.RTT.Quantile(0.5) < 2*delay {
			t.Errorf("%.0f/s with a %v delay: p50 %v, want replies queued well past the delay", fast.Rate(), delay, fast.RTT.Quantile(0.5))
		}
		if fast.Received >= fast.Sent*9/10 && fast.RTT.Quantile(0.5) < 5*time.Millisecond {
			t.Errorf("%.0f/s with a %v delay cannot keep up, yet %d of %d replies came back with p50 %v", fast.Rate(), delay, fast.Received, fast.Sent, fast.RTT.Quantile(0.5))
		}
	}
	if slow.RTT.Quantile(0.5) >= delay && !raceEnabled {
		t.Errorf("500/s with a %v delay: p50 %v, want below the delay (it follows the reply)", delay, slow.RTT.Quantile(0.5))
	}
}

func TestRRStops(t *testing.T) {
	c, s := loopPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := runRR(ctx, c, s, Options{Rate: 1000, Duration: time.Minute})
	if err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("runRR after its context ended: %v after %v; want an error within 2 s", err, time.Since(start))
	}
}

func TestRROptions(t *testing.T) {
	for _, o := range []Options{{}, {Rate: -1}, {Rate: 1, Delay: -1}, {Rate: 1, Payload: 8}, {Rate: 1, Payload: 9000}} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	o, err := Options{Rate: 1}.withDefaults()
	if err != nil || o.Duration != 2*time.Second || o.Warmup != 200*time.Millisecond || o.Payload != DefaultPayload {
		t.Errorf("defaults: %+v %v", o, err)
	}
}

// TestRoundTripsBed runs the tool across a direct veth bed: sockets in
// the wire and lab namespaces.
func TestRoundTripsBed(t *testing.T) {
	bed := testbed.NewReachableForTest(t, testbed.Config{Mode: testbed.Direct})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := RoundTrips(ctx, bed, Options{Rate: 2000, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d received %d; RTT p50 %v p99 %v", res.Sent, res.Received, res.RTT.Quantile(0.5), res.RTT.Quantile(0.99))
	if res.Received == 0 || res.LossPercent() > 5 {
		t.Errorf("sent %d, received %d", res.Sent, res.Received)
	}
}

// TestRRThreads: Options.Thread hears of the sender, the receiver and the
// echo server once each, with the ids of three distinct threads of this
// process.
func TestRRThreads(t *testing.T) {
	c, s := loopPair(t)
	var mu sync.Mutex
	got := map[string]int{}
	o := Options{Rate: 2000, Duration: 200 * time.Millisecond, Thread: func(role string, tid int) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := got[role]; dup {
			t.Errorf("role %q told twice", role)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
			t.Errorf("%s: thread %d is not this process's: %v", role, tid, err)
		}
		got[role] = tid
	}}
	if _, err := runRR(context.Background(), c, s, o); err != nil {
		t.Fatal(err)
	}
	tids := map[int]bool{}
	for _, role := range []string{Sender, Receiver, Echo} {
		tid, ok := got[role]
		if !ok {
			t.Errorf("no thread told for %q (got %v)", role, got)
			continue
		}
		tids[tid] = true
	}
	if len(got) != 3 || len(tids) != 3 {
		t.Errorf("threads %v: want three roles on three threads", got)
	}
}
