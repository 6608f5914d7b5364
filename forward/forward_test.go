package forward

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/offload"
	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// pair is a queue whose TAP and NIC endpoints are the real tap and ring
// code over socketpairs; the test holds the other ends (gVisor's fdbased
// tests do the same). With wire set the NIC is instead an AF_XDP socket
// over an in-memory UMEM (forwardtest.XDP) and wire plays its kernel.
type pair struct {
	q       *QueueWorker
	nicPeer int // what the wire writes to / reads from, vnet header first (-1 with wire)
	tapPeer int // what the lab side sees
	wire    *afxdp.MemKernel
}

// toTAP puts frames on the wire side, runs one NIC -> TAP batch, which
// must take them all, and returns what the lab side got.
func (p *pair) toTAP(t testing.TB, frames ...[]byte) [][]byte {
	t.Helper()
	if !p.fromWire(frames...) {
		t.Fatal("the wire side did not take every frame")
	}
	if n, err := p.q.nicToTAP(); err != nil || n != len(frames) {
		t.Fatalf("nicToTAP = %d, %v; want %d, nil", n, err, len(frames))
	}
	return readAll(t, p.tapPeer)
}

// fromWire puts frames (each a vnet header and an Ethernet frame) where
// the NIC reads them: written to the packet socket's peer, or delivered
// to the AF_XDP socket's RX ring without their header, as the wire has
// none. It reports whether every frame was taken.
func (p *pair) fromWire(frames ...[]byte) bool {
	ok := true
	for _, f := range frames {
		if p.wire != nil {
			ok = p.wire.Deliver(f[vnethdr.Len:]) && ok
		} else if _, err := unix.Write(p.nicPeer, f); err != nil {
			ok = false
		}
	}
	return ok
}

// drainWire takes everything the NIC sent: reads the packet socket's peer
// (non-blocking) into sink, or completes the AF_XDP socket's TX ring.
func (p *pair) drainWire(sink []byte) {
	if p.wire != nil {
		p.wire.Complete()
		return
	}
	drain(p.nicPeer, sink)
}

func newPair(t testing.TB, tapVnet bool, batch int) *pair {
	t.Helper()
	tq, tapPeer := forwardtest.TAP(t)
	return newPairOn(t, tq, tapPeer, tapVnet, batch)
}

// newPairOn is newPair with the TAP endpoint tq, whose peer is tapPeer.
func newPairOn(t testing.TB, tq Endpoint, tapPeer int, tapVnet bool, batch int) *pair {
	t.Helper()
	nic, nicPeer := forwardtest.NIC(t, batch)
	p := newPairOver(t, tq, nic, tapVnet, batch)
	p.nicPeer, p.tapPeer = nicPeer, tapPeer
	return p
}

// newXDPPair is newPair with an AF_XDP NIC over an in-memory UMEM.
func newXDPPair(t testing.TB, tapVnet bool, batch int) *pair {
	t.Helper()
	tq, tapPeer := forwardtest.TAP(t)
	nic, wire := forwardtest.XDP()
	p := newPairOver(t, tq, nic, tapVnet, batch)
	p.nicPeer, p.tapPeer, p.wire = -1, tapPeer, wire
	return p
}

// newPairOver is a forwarder of one queue over tq and nic.
func newPairOver(t testing.TB, tq Endpoint, nic NIC, tapVnet bool, batch int) *pair {
	t.Helper()
	f, err := New([]Endpoint{tq}, []NIC{nic}, Config{Batch: batch, TAPVnetHdr: tapVnet, MTU: 1500, CPUs: []int{-1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &pair{q: f.queues[0]}
}

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
	ipA  = net.IP{198, 18, 0, 1}
	ipB  = net.IP{198, 18, 0, 2}
)

// tcpFrame builds an Ethernet/IPv4/TCP frame with payload of n bytes and
// valid checksums.
func tcpFrame(t testing.TB, n int) []byte {
	t.Helper()
	payload := bytes.Repeat([]byte{0xab}, n)
	eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: ipA, DstIP: ipB, Id: 7, Flags: layers.IPv4DontFragment}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: 1000, Ack: 1, ACK: true, PSH: true, Window: 512}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, tcp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gsoFrame turns a TCPv4 frame into what the kernel hands a packet socket
// for a TSO super-frame: NEEDS_CSUM with the pseudo-header sum in place.
func gsoFrame(t testing.TB, n, mss int) (vnethdr.Hdr, []byte) {
	f := tcpFrame(t, n)
	const l4 = 14 + 20
	// Pseudo-header sum (not complemented) over addresses, proto, TCP length.
	var sum uint32
	for i := 14 + 12; i < 14+20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(f[i:]))
	}
	sum += uint32(unix.IPPROTO_TCP) + uint32(len(f)-l4)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(f[l4+16:], uint16(sum))
	h := vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, GSOType: vnethdr.GSOTCPv4, HdrLen: l4 + 20, GSOSize: uint16(mss), CsumStart: l4, CsumOffset: 16}
	return h, f
}

func withHdr(h vnethdr.Hdr, frame []byte) []byte {
	b := make([]byte, vnethdr.Len+len(frame))
	h.Encode(b)
	copy(b[vnethdr.Len:], frame)
	return b
}

func mustWrite(t testing.TB, fd int, b []byte) {
	if _, err := unix.Write(fd, b); err != nil {
		t.Fatal(err)
	}
}

func readAll(t testing.TB, fd int) [][]byte {
	var out [][]byte
	buf := make([]byte, 70000)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]byte(nil), buf[:n]...))
	}
}

// drain reads fd until it has nothing more, into sink.
func drain(fd int, sink []byte) {
	for {
		if _, err := unix.Read(fd, sink); err != nil {
			return
		}
	}
}

// nicToTAPAllocs is the allocations of a nicToTAP batch of frames, put on
// p's wire side, the TAP peer (made non-blocking) drained after it.
func nicToTAPAllocs(t *testing.T, p *pair, frames ...[]byte) float64 {
	setNonblock(t, p.tapPeer)
	sink := make([]byte, 70000)
	return testing.AllocsPerRun(100, func() {
		p.fromWire(frames...)
		p.q.nicToTAP()
		drain(p.tapPeer, sink)
	})
}

func setNonblock(t testing.TB, fd int) {
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
}

func TestNICToTAPPassThrough(t *testing.T) {
	p := newPair(t, true, 8)
	h, f := gsoFrame(t, 30000, 1448)
	got := p.toTAP(t, withHdr(h, f), withHdr(vnethdr.Hdr{}, tcpFrame(t, 100)))
	if len(got) != 2 {
		t.Fatalf("TAP got %d frames, want 2", len(got))
	}
	var gh vnethdr.Hdr
	gh.Decode(got[0])
	if gh.GSOType != vnethdr.GSOTCPv4 || gh.GSOSize != 1448 || gh.HdrLen != 14+20+20 {
		t.Errorf("GSO header not passed through: %+v", gh)
	}
	if !bytes.Equal(got[0][vnethdr.Len:], f) {
		t.Error("GSO frame body changed")
	}
	c := &p.q.Counters
	d := &c.NICToTAP
	if d.Rx.Packets.Load() != 2 || d.Tx.Packets.Load() != 2 || d.GSO.Load() != 1 || d.Batch.Sum.Load() != 2 || d.Batch.Buckets[1].Load() != 1 {
		t.Errorf("counters: nic rx %d tap tx %d gso %d batch sum %d", d.Rx.Packets.Load(), d.Tx.Packets.Load(), d.GSO.Load(), d.Batch.Sum.Load())
	}
}

func TestNICToTAPSegments(t *testing.T) {
	p := newPair(t, false, 8)
	h, f := gsoFrame(t, 10000, 1448)
	vnethdrtest.CheckTCPSegments(t, p.toTAP(t, withHdr(h, f)), f, 1448) // 7 segments
	if s := p.q.Counters.Segments.Load(); s != 7 {
		t.Errorf("Segments = %d, want 7", s)
	}
}

func TestTAPToNICAddsHeader(t *testing.T) {
	p := newPair(t, false, 8)
	setNonblock(t, p.nicPeer)
	f := tcpFrame(t, 200)
	mustWrite(t, p.tapPeer, f)
	mustWrite(t, p.tapPeer, f[:10]) // runt: dropped and counted
	if n, err := p.q.tx.toNIC(); err != nil || n != 2 {
		t.Fatalf("tx.toNIC = %d, %v", n, err)
	}
	got := readAll(t, p.nicPeer)
	if len(got) != 1 {
		t.Fatalf("NIC got %d frames, want 1", len(got))
	}
	if !bytes.Equal(got[0][:vnethdr.Len], make([]byte, vnethdr.Len)) || !bytes.Equal(got[0][vnethdr.Len:], f) {
		t.Error("frame toward the NIC is not a zero vnet header plus the frame")
	}
	if d := p.q.Counters.TAPToNIC.Drops[DropBadHdr].Load(); d != 1 {
		t.Errorf("bad header drops = %d, want 1", d)
	}
	// Every frame read counts as received: received = transmitted + drops.
	if rx, tx := p.q.Counters.TAPToNIC.Rx.Packets.Load(), p.q.Counters.TAPToNIC.Tx.Packets.Load(); rx != 2 || tx != 1 {
		t.Errorf("received %d, transmitted %d; want 2 and 1", rx, tx)
	}
}

// TestNICToTAPAccounting: a frame too large for its buffer and a runt are
// received and dropped; received = transmitted + drops.
func TestNICToTAPAccounting(t *testing.T) {
	p := newPair(t, true, 8)
	setNonblock(t, p.tapPeer)
	mustWrite(t, p.nicPeer, withHdr(vnethdr.Hdr{}, make([]byte, headroom+frameCap+100)))
	mustWrite(t, p.nicPeer, make([]byte, vnethdr.Len+10))
	mustWrite(t, p.nicPeer, withHdr(vnethdr.Hdr{}, tcpFrame(t, 100)))
	if n, err := p.q.nicToTAP(); err != nil || n != 3 {
		t.Fatalf("nicToTAP = %d, %v", n, err)
	}
	d := &p.q.Counters.NICToTAP
	var drops uint64
	for i := range d.Drops {
		drops += d.Drops[i].Load()
	}
	if d.Rx.Packets.Load() != 3 || d.Tx.Packets.Load() != 1 || drops != 2 || d.Drops[DropOversize].Load() != 1 {
		t.Errorf("received %d, transmitted %d, drops %d (oversize %d); want 3, 1, 2 (1)",
			d.Rx.Packets.Load(), d.Tx.Packets.Load(), drops, d.Drops[DropOversize].Load())
	}
}

func TestBadVnetHdrFromTAPDropped(t *testing.T) {
	p := newPair(t, true, 8)
	setNonblock(t, p.nicPeer)
	h, f := gsoFrame(t, 3000, 1448)
	h.CsumStart = uint16(len(f)) // out of bounds
	mustWrite(t, p.tapPeer, withHdr(h, f))
	p.q.tx.toNIC()
	if got := readAll(t, p.nicPeer); len(got) != 0 {
		t.Fatalf("a frame with a bad vnet header reached the NIC")
	}
	if d := p.q.Counters.TAPToNIC.Drops[DropBadHdr].Load(); d != 1 {
		t.Errorf("bad header drops = %d, want 1", d)
	}
}

func TestZeroAllocs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tapVnet bool
		gso     bool
	}{{"vnet", true, true}, {"segment", false, true}, {"plain", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.tapVnet, 16)
			setNonblock(t, p.tapPeer)
			setNonblock(t, p.nicPeer)
			var in []byte
			if tc.gso {
				h, f := gsoFrame(t, 20000, 1448)
				in = withHdr(h, f)
			} else {
				in = withHdr(vnethdr.Hdr{}, tcpFrame(t, 1400))
			}
			out := tcpFrame(t, 1400)
			sink := make([]byte, 70000)
			allocs := testing.AllocsPerRun(200, func() {
				unix.Write(p.nicPeer, in)
				p.q.nicToTAP()
				drain(p.tapPeer, sink)
				unix.Write(p.tapPeer, out)
				p.q.tx.toNIC()
				unix.Read(p.nicPeer, sink)
			})
			if allocs != 0 {
				t.Errorf("%v allocations per frame, want 0", allocs)
			}
			if p.q.Counters.NICToTAP.Tx.Packets.Load() == 0 || p.q.Counters.TAPToNIC.Tx.Packets.Load() == 0 {
				t.Error("nothing was forwarded")
			}
		})
	}
}

func TestRunStops(t *testing.T) {
	sock, wire := forwardtest.NIC(t, 8)
	tq, lab := forwardtest.TAP(t)
	goroutines := runtime.NumGoroutine()
	f, err := New([]Endpoint{tq}, []NIC{sock}, Config{Batch: 8, CPUs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	// A frame written on the wire side comes out of the TAP side.
	mustWrite(t, wire, withHdr(vnethdr.Hdr{}, tcpFrame(t, 64)))
	buf := make([]byte, 2000)
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, err := unix.Read(lab, buf); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("frame not forwarded by the running worker")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("Run did not return within 1 s of cancel")
	}
	// Every worker is gone once Run has returned.
	for i := 0; runtime.NumGoroutine() > goroutines; i++ {
		if i == 100 {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Run, %d before:\n%s", runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fwdBench is one row of BenchmarkForward.
type fwdBench struct {
	name              string
	tapVnet, gso, gro bool
	uring             bool          // TAP writes batched through io_uring (--tap-io uring)
	window            time.Duration // --gro-window (full batches: it never waits)
	xdp               bool          // the NIC is an AF_XDP socket over an in-memory UMEM (--nic-backend xdp)
	tx                bool          // TAP to wire (tx.toNIC) instead of wire to TAP
}

// BenchmarkForward measures one worker moving frames a batch per
// iteration: MTU-sized segments of one flow (32, the batch) or 64 KiB GSO
// frames (2, within the socketpair's buffer), from the wire side to the
// TAP side, or with tx from the TAP to the wire. The TAP is tap's code
// over a socketpair; the NIC a packet socket's code over a socketpair
// (the wire side writes each frame and reads what is sent: system calls
// inside the timing), or with xdp an AF_XDP socket's over an in-memory
// UMEM (the fake kernel copies each frame into a chunk and completes the
// TX ring: no system call on the NIC side). ns/frame is per frame read.
func BenchmarkForward(b *testing.B) {
	for _, tc := range []fwdBench{
		{name: "mtu-vnet", tapVnet: true}, {name: "mtu-vnet-gro", tapVnet: true, gro: true},
		{name: "gso64k-vnet", tapVnet: true, gso: true}, {name: "gso64k-segment", gso: true},
		{name: "mtu-vnet-uring", tapVnet: true, uring: true}, {name: "gso64k-segment-uring", gso: true, uring: true},
		{name: "mtu-vnet-gro-window", tapVnet: true, gro: true, window: 50 * time.Microsecond},
		{name: "tx-mtu-vnet", tapVnet: true, tx: true}, {name: "tx-gso64k-vnet", tapVnet: true, gso: true, tx: true},
		{name: "xdp-mtu", tapVnet: true, xdp: true}, {name: "xdp-mtu-gro", tapVnet: true, gro: true, xdp: true},
		{name: "xdp-tx-mtu", tapVnet: true, xdp: true, tx: true},
		{name: "xdp-tx-gso64k-segment", tapVnet: true, gso: true, xdp: true, tx: true},
	} {
		b.Run(tc.name, func(b *testing.B) { benchForward(b, tc) })
	}
}

func benchForward(b *testing.B, tc fwdBench) {
	const batch = 32
	p := tc.pair(b, batch)
	setNonblock(b, p.tapPeer)
	if p.wire == nil {
		setNonblock(b, p.nicPeer)
	}
	in := mtuSegments(b, batch) // one flow, in sequence
	if tc.gso {
		h, f := gsoFrame(b, 65000, 1448)
		in = [][]byte{withHdr(h, f), withHdr(h, f)}
	}
	payload := len(in[0]) - vnethdr.Len
	if tc.tx && !tc.tapVnet {
		for i := range in {
			in[i] = in[i][vnethdr.Len:]
		}
	}
	per := len(in)
	sink := make([]byte, 70000)
	b.SetBytes(int64(payload * per))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var n int
		if tc.tx {
			for _, f := range in {
				unix.Write(p.tapPeer, f)
			}
			n, _ = p.q.tx.toNIC()
			p.drainWire(sink)
		} else {
			p.fromWire(in...)
			n, _ = p.q.nicToTAP()
			drain(p.tapPeer, sink)
		}
		if n != per {
			b.Fatalf("a batch of %d frames took %d", per, n)
		}
	}
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "pps")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per), "ns/frame")
}

// pair makes the row's queue: its NIC, its TAP (io_uring's on a locked
// thread, unlocked when b ends) and GRO.
func (tc fwdBench) pair(b *testing.B, batch int) *pair {
	var p *pair
	switch {
	case tc.uring:
		runtime.LockOSThread()
		b.Cleanup(runtime.UnlockOSThread)
		tq, peer := forwardtest.URingTAP(b, batch)
		p = newPairOn(b, tq, peer, tc.tapVnet, batch)
	case tc.xdp:
		p = newXDPPair(b, tc.tapVnet, batch)
	default:
		p = newPair(b, tc.tapVnet, batch)
	}
	if tc.gro {
		p.q.gro = offload.NewGRO(batch)
		p.q.groWindow = tc.window
	}
	return p
}

// mtuSegments builds n consecutive MTU-sized TCPv4 segments of one flow,
// as a wire without TSO sends them (checksums complete, DATA_VALID).
func mtuSegments(t testing.TB, n int) [][]byte {
	var out [][]byte
	for i := 0; i < n; i++ {
		payload := bytes.Repeat([]byte{byte(i)}, 1448)
		eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: ipA, DstIP: ipB, Id: uint16(100 + i), Flags: layers.IPv4DontFragment}
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: uint32(1000 + i*1448), Ack: 1, ACK: true, Window: 512}
		tcp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			eth, ip, tcp, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		out = append(out, withHdr(vnethdr.Hdr{Flags: vnethdr.FlagDataValid}, buf.Bytes()))
	}
	return out
}

func newGROPair(t testing.TB, batch int) *pair {
	p := newPair(t, true, batch)
	p.q.gro = offload.NewGRO(batch)
	return p
}

// TestNICToTAPUDPGRO: 32 datagrams of one flow reach the TAP as one USO
// frame; with UDP merging off, as 32 frames.
func TestNICToTAPUDPGRO(t *testing.T) {
	for _, on := range []bool{true, false} {
		p := newGROPair(t, 64)
		p.q.gro.SetUDP(on)
		setNonblock(t, p.tapPeer)
		for i := 0; i < 32; i++ {
			eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeIPv4}
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: ipA, DstIP: ipB, Id: uint16(7 + i)}
			udp := &layers.UDP{SrcPort: 5000, DstPort: 5201}
			udp.SetNetworkLayerForChecksum(ip)
			buf := gopacket.NewSerializeBuffer()
			gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
				eth, ip, udp, gopacket.Payload(bytes.Repeat([]byte{byte(i)}, 64)))
			mustWrite(t, p.nicPeer, withHdr(vnethdr.Hdr{}, buf.Bytes()))
		}
		p.q.nicToTAP()
		got := readAll(t, p.tapPeer)
		want := 1
		if !on {
			want = 32
		}
		if len(got) != want {
			t.Fatalf("UDP GRO %v: TAP got %d frames, want %d", on, len(got), want)
		}
		if on {
			var h vnethdr.Hdr
			h.Decode(got[0])
			if h.GSOType != vnethdr.GSOUDPL4 || h.GSOSize != 64 {
				t.Errorf("USO header %+v", h)
			}
		}
	}
}

// TestNICToTAPGRO: eight MTU segments in one batch reach the TAP as one
// GSO frame that segments back into the same eight, from a packet socket
// (DATA_VALID) and from an AF_XDP socket (no vnet header from the wire:
// GRO verifies the checksums).
func TestNICToTAPGRO(t *testing.T) {
	for _, xdp := range []bool{false, true} {
		p := newGROPair(t, 16)
		if xdp {
			p = newXDPPair(t, true, 16)
			p.q.gro = offload.NewGRO(16)
		}
		segs := mtuSegments(t, 8)
		got := p.toTAP(t, segs...)
		if len(got) != 1 {
			t.Fatalf("xdp %v: TAP got %d frames, want 1 merged GSO frame", xdp, len(got))
		}
		var h vnethdr.Hdr
		h.Decode(got[0])
		if h.GSOType != vnethdr.GSOTCPv4 || h.GSOSize != 1448 {
			t.Fatalf("xdp %v: merged frame header %+v", xdp, h)
		}
		out := makeBufs(16, 1600)
		sizes := make([]int, 16)
		k, err := offload.Segment(h, got[0][vnethdr.Len:], out, sizes)
		if err != nil || k != 8 {
			t.Fatalf("xdp %v: Segment = %d, %v", xdp, k, err)
		}
		for i := 0; i < k; i++ {
			if !bytes.Equal(out[i][:sizes[i]], segs[i][vnethdr.Len:]) {
				t.Errorf("xdp %v: segment %d differs from the original", xdp, i)
			}
		}
		c := &p.q.Counters
		if c.Merged.Load() != 7 || c.NICToTAP.Rx.Packets.Load() != 8 || c.NICToTAP.Tx.Packets.Load() != 1 {
			t.Errorf("xdp %v: merged %d rx %d tx %d", xdp, c.Merged.Load(), c.NICToTAP.Rx.Packets.Load(), c.NICToTAP.Tx.Packets.Load())
		}
	}
}

// TestZeroAllocsGRO: a batch merged by GRO allocates nothing, also when it
// waits out a GRO window (a ppoll with a timeout, more reads).
func TestZeroAllocsGRO(t *testing.T) {
	for _, window := range []time.Duration{0, 500 * time.Microsecond} {
		p := newGROPair(t, 16)
		p.q.groWindow = window
		allocs := nicToTAPAllocs(t, p, mtuSegments(t, 8)...)
		if allocs != 0 {
			t.Errorf("%v allocations per batch with GRO (window %v), want 0", allocs, window)
		}
		if p.q.Counters.Merged.Load() == 0 {
			t.Error("nothing was merged")
		}
	}
}
