package bench

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/testbed"
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
	res, err := runRR(context.Background(), c, s, RROptions{Rate: rate, Duration: 600 * time.Millisecond, Warmup: 50 * time.Millisecond})
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
	// everything; these catch a broken tool, not a slow one.
	if r := res.Rate(); r < 0.8*rate || r > 1.01*rate {
		t.Errorf("achieved %.0f requests/s, want about %d", r, rate)
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

// TestRRDelay checks that the application delay holds the receiver: at a
// rate the delay cannot keep up with, replies queue and their round-trip
// times grow well past the delay; at a low rate they do not include it.
func TestRRDelay(t *testing.T) {
	c, s := loopPair(t)
	const delay = 300 * time.Microsecond
	slow, err := runRR(context.Background(), c, s, RROptions{Rate: 500, Delay: delay, Duration: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := runRR(context.Background(), c, s, RROptions{Rate: 8000, Delay: delay, Duration: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("500/s: p50 %v, %d/%d; 8000/s: p50 %v, %d/%d", slow.RTT.Quantile(0.5), slow.Received, slow.Sent,
		fast.RTT.Quantile(0.5), fast.Received, fast.Sent)
	if fast.RTT.Quantile(0.5) < 2*delay {
		t.Errorf("8000/s with a %v delay: p50 %v, want replies queued well past the delay", delay, fast.RTT.Quantile(0.5))
	}
	if fast.Received >= fast.Sent*9/10 && fast.RTT.Quantile(0.5) < 5*time.Millisecond {
		t.Errorf("8000/s with a %v delay cannot keep up, yet %d of %d replies came back with p50 %v", delay, fast.Received, fast.Sent, fast.RTT.Quantile(0.5))
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
	_, err := runRR(ctx, c, s, RROptions{Rate: 1000, Duration: time.Minute})
	if err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("runRR after its context ended: %v after %v; want an error within 2 s", err, time.Since(start))
	}
}

func TestRROptions(t *testing.T) {
	for _, o := range []RROptions{{}, {Rate: -1}, {Rate: 1, Delay: -1}, {Rate: 1, Payload: 8}, {Rate: 1, Payload: 9000}} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	o, err := RROptions{Rate: 1}.withDefaults()
	if err != nil || o.Duration != 2*time.Second || o.Warmup != 200*time.Millisecond || o.Payload != DefaultRRPayload {
		t.Errorf("defaults: %+v %v", o, err)
	}
}

// TestRoundTripsBed runs the tool across a direct veth bed: sockets in
// the wire and lab namespaces.
func TestRoundTripsBed(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Direct})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bed.WaitLabReachable(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	res, err := RoundTrips(ctx, bed, RROptions{Rate: 2000, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d received %d; RTT p50 %v p99 %v", res.Sent, res.Received, res.RTT.Quantile(0.5), res.RTT.Quantile(0.99))
	if res.Received == 0 || res.LossPercent() > 5 {
		t.Errorf("sent %d, received %d", res.Sent, res.Received)
	}
}

// needBeds skips t when test beds cannot be built here.
func needBeds(t *testing.T) {
	t.Helper()
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
}
