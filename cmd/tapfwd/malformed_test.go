package main

// Faults from the wire (issue 7): malformed frames here, overload in
// overload_test.go, a soak in soak_test.go. Every frame is accounted for by
// the counters tapfwd exports plus the kernel's own counters of the devices
// on the path, read hop by hop:
//
//	wire ns: sender -> w0 (veth) ==> w1 (veth, fwd ns) -> packet socket
//	  -> tapfwd -> TAP (moved into the lab ns) -> lab stack (UDP socket)

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/metrics"
)

// TestMalformedFromWire sends malformed frames at tapfwd from a raw socket
// in the wire namespace, interleaved with a ping that must keep answering,
// and accounts for every frame: tapfwd stays up, exits 0 on SIGTERM, and
// frames received from the NIC = frames transmitted to the TAP + drops.
//
// A quarter of the frames go out through a second socket with
// PACKET_VNET_HDR and a random partial-checksum header (csum_start and
// csum_offset anywhere the sending kernel accepts): veth passes
// CHECKSUM_PARTIAL through, so tapfwd reads them with NEEDS_CSUM set and
// must validate the offsets against a garbled frame.
func TestMalformedFromWire(t *testing.T) {
	testkit.NeedRoot(t)
	for _, vnet := range []string{"on", "off"} {
		t.Run("vnet-"+vnet, func(t *testing.T) { testMalformed(t, vnet) })
	}
}

func testMalformed(t *testing.T, vnet string) {
	const (
		frames = 100_000
		rounds = 100 // a ping per round
	)
	bed, fw := startForwarder(t, "--vnet-hdr", vnet)
	tapHW := testkit.LinkMAC(t, bed.LabNS, bed.LabIf)
	plain := testkit.WireSocket(t, bed, false)
	withHdr := testkit.WireSocket(t, bed, true)
	p := testkit.NewPinger(t, bed)
	if p.Ping(3, time.Second) == 0 {
		t.Fatal("no ping reply before the test")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	g := testkit.NewGarbler(seed, bed, tapHW)

	w0Before := testkit.Netdev(t, bed.WireNS, bed.WireIf)
	w1Before := testkit.Netdev(t, bed.FwdNS, bed.NIC)
	before := testkit.ParseCounts(testkit.Scrape(t, bed), bed)
	buf := make([]byte, 16+bed.MTU+64)
	var sent, refused, retries int
	refusedBy := map[string]int{}
	start := time.Now()
	for r := 0; r < rounds; r++ {
		for i := 0; sent < (r+1)*frames/rounds; i++ {
			if i == frames/rounds/2 {
				p.Send() // mid-burst; awaited below
			}
			f := g.Frame(buf[10:])
			fd := plain
			if g.IntN(4) == 0 {
				// A virtio_net_hdr with NEEDS_CSUM in front; the
				// kernel wants csum_start+csum_offset+2 within the
				// frame (net/core/skbuff.c: skb_partial_csum_set).
				h := buf[:10]
				clear(h)
				h[0] = 1
				start := g.IntN(len(f) - 1)
				off := g.IntN(len(f) - start - 1)
				binary.LittleEndian.PutUint16(h[6:], uint16(start))
				binary.LittleEndian.PutUint16(h[8:], uint16(off))
				f = buf[:10+len(f)]
				fd = withHdr
			}
			if _, err := unix.Write(fd, f); err != nil {
				refused++
				refusedBy[err.Error()]++
				continue
			}
			sent++
		}
		// The ping must keep answering: a request sent in the middle of
		// the burst may be lost with it, so allow two more.
		if _, ok := p.Await(time.Second); !ok {
			n := p.Ping(2, time.Second)
			if n == 0 {
				t.Fatalf("round %d: no ping reply (3 requests, 1 s each); tapfwd exited: %v\n%s", r, fw.Exited(), fw.Output())
			}
			retries += n
		}
		if fw.Exited() {
			t.Fatalf("tapfwd exited after round %d:\n%s", r, fw.Output())
		}
	}
	took := time.Since(start)
	after := testkit.SettledCounts(t, bed, 5*time.Second)
	w0 := testkit.NetdevDelta(testkit.Netdev(t, bed.WireNS, bed.WireIf), w0Before)
	w1 := testkit.NetdevDelta(testkit.Netdev(t, bed.FwdNS, bed.NIC), w1Before)
	d := after.Sub(before)
	t.Logf("%d frames sent in %v (and %d refused by the sending kernel: %v), %d pings answered (%d retries); kinds %v",
		sent, took.Round(time.Millisecond), refused, refusedBy, rounds, retries, g.Kinds())
	t.Logf("w0 tx %d (dropped %d); w1 rx %d (dropped %d); tapfwd: NIC rx %.0f, TAP tx %.0f, NIC drops %s, errors %.0f; TAP rx %.0f, NIC tx %.0f, TAP drops %s; netdev drops: NIC rx %.0f tx %.0f, TAP rx %.0f tx %.0f",
		w0.TxPackets, w0.TxDropped, w1.RxPackets, w1.RxDropped, d.NICRx, d.TAPTx, testkit.NonZero(d.NICDrops), d.NICErrors,
		d.TAPRx, d.NICTx, testkit.NonZero(d.TAPDrops), d.NICNetdevRxDrop, d.NICNetdevTxDrop, d.TAPNetdevRxDrop, d.TAPNetdevTxDrop)

	// Every frame tapfwd took from the NIC went to the TAP or is a drop
	// under a reason. kernel_ring frames never reached tapfwd (the
	// socket's queue was full), so they are not among those received.
	kr := d.NICDrops[metrics.KernelRing]
	if got := d.TAPTx + testkit.DropSum(d.NICDrops, metrics.KernelRing); d.NICRx != got {
		t.Errorf("NIC -> TAP: received %.0f != transmitted %.0f + drops %.0f (%s)", d.NICRx, d.TAPTx, got-d.TAPTx, testkit.NonZero(d.NICDrops))
	}
	if got := d.NICTx + testkit.DropSum(d.TAPDrops); d.TAPRx != got {
		t.Errorf("TAP -> NIC: received %.0f != transmitted %.0f + drops %.0f (%s)", d.TAPRx, d.NICTx, got-d.NICTx, testkit.NonZero(d.TAPDrops))
	}
	// What reached the NIC's packet socket covers what was sent: the
	// rest is the ping, ARP and neighbour discovery.
	chatter := d.NICRx + kr - float64(sent)
	if chatter < 0 || chatter > float64(4*(rounds+retries)+100) {
		t.Errorf("tapfwd received %.0f frames (+%.0f kernel_ring drops) from the NIC, the raw sockets sent %d", d.NICRx, kr, sent)
	}
	// Every frame w1 took reached the packet socket (a chatter frame may
	// slip between the reads: allow 2).
	if diff := float64(w1.RxPackets) - (d.NICRx + kr); diff < -2 || diff > 2 {
		t.Errorf("w1 received %d frames, tapfwd read %.0f and its socket dropped %.0f", w1.RxPackets, d.NICRx, kr)
	}
	if d.Segments != 0 {
		t.Errorf("%.0f segments from frames that were never GSO", d.Segments)
	}
	if fw.Exited() {
		t.Fatalf("tapfwd exited:\n%s", fw.Output())
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("tapfwd did not exit 0 on SIGTERM: %v\n%s", err, fw.Output())
	}
	if strings.Contains(fw.Output(), "panic") || strings.Contains(fw.Output(), "DATA RACE") {
		t.Errorf("tapfwd's log:\n%s", fw.Output())
	}
}
