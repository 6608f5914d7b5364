package forward

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/offload"
	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// The worker over an AF_XDP NIC (forwardtest.XDP: afxdp's socket code over
// an in-memory UMEM, the test playing the kernel).

// TestXDPNICToTAP: a frame the wire delivers to the AF_XDP socket, which has
// no vnet header, reaches a vnet TAP unchanged behind a zero header.
func TestXDPNICToTAP(t *testing.T) {
	p := newXDPPair(t, true, 8)
	f := tcpFrame(t, 100)
	got := p.toTAP(t, withHdr(vnethdr.Hdr{}, f))
	if len(got) != 1 {
		t.Fatalf("TAP got %d frames, want 1", len(got))
	}
	if !bytes.Equal(got[0][:vnethdr.Len], make([]byte, vnethdr.Len)) || !bytes.Equal(got[0][vnethdr.Len:], f) {
		t.Errorf("TAP got %x, want a zero vnet header and %x", got[0], f)
	}
	if d := &p.q.Counters.NICToTAP; d.Rx.Packets.Load() != 1 || d.Tx.Packets.Load() != 1 {
		t.Errorf("received %d, transmitted %d; want 1 and 1", d.Rx.Packets.Load(), d.Tx.Packets.Load())
	}
}

// TestXDPTAPToNICSegments: a GSO frame from a vnet TAP leaves the AF_XDP
// socket as its segments, each with finished checksums, on the TX ring.
func TestXDPTAPToNICSegments(t *testing.T) {
	p := newXDPPair(t, true, 8)
	h, f := gsoFrame(t, 10000, 1448)
	mustWrite(t, p.tapPeer, withHdr(h, f))
	if n, err := p.q.tx.toNIC(); err != nil || n != 1 {
		t.Fatalf("tx.toNIC = %d, %v; want 1, nil", n, err)
	}
	vnethdrtest.CheckTCPSegments(t, p.wire.Transmit(), f, 1448) // 7 segments
	if tx := p.q.Counters.TAPToNIC.Tx.Packets.Load(); tx != 1 {
		t.Errorf("transmitted %d, want 1", tx)
	}
}

// TestZeroAllocsXDP: a batch through the worker with an AF_XDP NIC
// allocates nothing: 32 MTU segments NIC -> TAP, the same merged by GRO,
// and a GSO frame TAP -> NIC segmented into the UMEM.
func TestZeroAllocsXDP(t *testing.T) {
	const batch = 32
	segs := mtuSegments(t, batch)
	for _, gro := range []bool{false, true} {
		p := newXDPPair(t, true, batch)
		if gro {
			p.q.gro = offload.NewGRO(batch)
		}
		if a := nicToTAPAllocs(t, p, segs...); a != 0 {
			t.Errorf("GRO %v: %v allocations per batch, want 0", gro, a)
		}
		if tx := p.q.Counters.NICToTAP.Tx.Packets.Load(); tx == 0 {
			t.Errorf("GRO %v: nothing reached the TAP", gro)
		}
		if m := p.q.Counters.Merged.Load(); gro != (m > 0) {
			t.Errorf("GRO %v: merged %d", gro, m)
		}
	}
	p := newXDPPair(t, true, batch)
	h, f := gsoFrame(t, 20000, 1448)
	in := withHdr(h, f)
	a := testing.AllocsPerRun(100, func() {
		unix.Write(p.tapPeer, in)
		p.q.tx.toNIC()
		p.wire.Complete()
	})
	if a != 0 {
		t.Errorf("TAP -> NIC with segmentation: %v allocations per batch, want 0", a)
	}
	if tx := p.q.Counters.TAPToNIC.Tx.Packets.Load(); tx < 100 {
		t.Errorf("transmitted %d frames toward the NIC, want at least 100", tx)
	}
}
