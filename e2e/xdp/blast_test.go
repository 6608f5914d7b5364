package xdp

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/metrics"
)

// TestMalformedBlast sends 100,000 malformed frames (the Garbler's, as
// e2e/forwarding's TestMalformedFromWire does for packet sockets) at
// tapfwd's AF_XDP sockets, with a ping every 1,000 that must keep being
// answered, and accounts for every frame: frames received from the NIC =
// frames written to the TAP + drops by reason, each way, and what tapfwd
// received covers what was sent. kernel_ring here is XDP_STATISTICS'
// rx_dropped + rx_ring_full: frames the kernel dropped before the socket.
func TestMalformedBlast(t *testing.T) {
	const (
		frames = 100_000
		rounds = 100
	)
	bed, fw := start(t)
	raw := traffic.WireSocket(t, bed, false)
	p := traffic.Answering(t, bed)
	g := traffic.NewGarbler(t, bed)
	w1Before := kernel.Netdev(t, bed.FwdNS, bed.NIC)
	before := prom.ParseCounts(prom.Scrape(t, bed), bed)
	buf := make([]byte, bed.MTU+64)
	sent, refused, retries := traffic.Blast(t, p, fw, frames, rounds, func() error {
		_, err := unix.Write(raw, g.Frame(buf))
		return err
	})
	d := prom.SettledCounts(t, bed, 5*time.Second).Sub(before)
	w1 := kernel.NetdevDelta(kernel.Netdev(t, bed.FwdNS, bed.NIC), w1Before)
	kr := d.NICDrops[metrics.KernelRing]
	t.Logf("%d sent (%v refused by the sender's kernel), kinds %v; w1 rx %d; tapfwd: NIC rx %.0f, TAP tx %.0f, NIC drops %s, TAP rx %.0f, NIC tx %.0f, TAP drops %s",
		sent, refused, g.Kinds(), w1.RxPackets, d.NICRx, d.TAPTx, prom.NonZero(d.NICDrops), d.TAPRx, d.NICTx, prom.NonZero(d.TAPDrops))
	d.CheckBalance(t, sent, rounds+retries)
	// Every frame w1 took reached the socket, none refused by afxdp's
	// ring checks (a chatter frame may slip between the reads: allow 2).
	if diff := float64(w1.RxPackets) - (d.NICRx + kr); diff < -2 || diff > 2 {
		t.Errorf("w1 received %d frames, tapfwd read %.0f and the kernel dropped %.0f", w1.RxPackets, d.NICRx, kr)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("tapfwd did not exit 0 on SIGTERM: %v\n%s", err, fw.Output())
	}
	if strings.Contains(fw.Output(), "panic") || strings.Contains(fw.Output(), "DATA RACE") {
		t.Errorf("tapfwd's log:\n%s", fw.Output())
	}
}
