package forwarding

import (
	"context"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
)

// TestIdleAfterLoad: with the adaptive spin and the roaming worker on,
// tapfwd forwards TCP both ways and small UDP, and once the load stops it
// uses at most 0.02 CPU-seconds per second: the spin falls to none and the
// roamer leaves an idle queue alone.
func TestIdleAfterLoad(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	bed, fw := testkit.Start(t, testkit.PlainTapfwd(t), "--spin", "50us", "--follow-load")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tcpBothWays(t, ctx, bed)
	u, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, UDP: true, Bitrate: "50M", Len: 64})
	if err != nil || u.Packets < 1000 {
		t.Fatalf("UDP 64 B: %v, %d packets", err, u.Packets)
	}
	time.Sleep(500 * time.Millisecond) // iperf3's last frames, the spin's first long sleeps
	const window = 2 * time.Second
	before := kernel.CPUTime(t, fw.Pid())
	time.Sleep(window)
	used := kernel.CPUTime(t, fw.Pid()) - before
	t.Logf("idle after load with --spin 50us --follow-load: %v of CPU in %v", used, window)
	if perSecond := used.Seconds() / window.Seconds(); perSecond > 0.02 {
		t.Errorf("idle tapfwd used %.3f CPU-s/s, want at most 0.02", perSecond)
	}
}

// tcpBothWays runs 2 s of iperf3 TCP from the wire to the lab and 2 s
// back through bed's tapfwd, and fails t unless each carries 20 MiB.
func tcpBothWays(t *testing.T, ctx context.Context, bed *testbed.Bed) {
	t.Helper()
	for _, rev := range []bool{false, true} {
		r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev})
		if err != nil || r.Bytes < 20<<20 {
			t.Fatalf("TCP (reverse %v): %v, %d bytes", rev, err, r.Bytes)
		}
	}
}
