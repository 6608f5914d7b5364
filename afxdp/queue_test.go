package afxdp

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

const testOffset = 22 // forward reads at headroom-hdrLen

func testBufs(n, size int) ([][]byte, []int) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs, make([]int, n)
}

// TestQueueReceive: frames of every size class come out whole behind a
// zero vnet header (a partial checksum behind a NEEDS_CSUM one), chained
// frames with multi-buffer; the chunks go back to the fill ring.
func TestQueueReceive(t *testing.T) {
	m := newModel(64, 4096, true)
	full := buildFrame(t, frameSpec{payload: 100})
	part := bytes.Clone(full)
	l4 := 34
	ps := partialSum(part, 14, l4, 17)
	part[l4+6], part[l4+7] = byte(ps>>8), byte(ps)
	in := [][]byte{
		buildFrame(t, frameSpec{payload: 18})[:60], // minimum: 60 bytes
		buildFrame(t, frameSpec{payload: 1472}),    // 1514
		make([]byte, int(m.frame)),                 // exactly one chunk
		buildFrame(t, frameSpec{payload: 8972}),    // 9014: three chunks
		buildFrame(t, frameSpec{tags: []uint16{100, 200}, payload: 3000}),
		part,
	}
	in[2][12], in[2][13] = 0x88, 0xb5 // an experimental EtherType
	for _, f := range in {
		if !m.Deliver(f) {
			t.Fatalf("the fake kernel could not deliver %d bytes", len(f))
		}
	}
	bufs, sizes := testBufs(8, 32+65536)
	n, more := m.q.receive(bufs, sizes, testOffset)
	if n != len(in) || more {
		t.Fatalf("receive = %d, %v; want %d, false", n, more, len(in))
	}
	for i, f := range in {
		b := bufs[i][testOffset:]
		if sizes[i] != vnethdr.Len+len(f) || !bytes.Equal(b[vnethdr.Len:sizes[i]], f) {
			t.Errorf("frame %d (%d bytes) came out as %d bytes, or changed", i, len(f), sizes[i]-vnethdr.Len)
		}
		var h vnethdr.Hdr
		h.Decode(b)
		want := vnethdr.Hdr{}
		if i == len(in)-1 {
			want = vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, CsumStart: 34, CsumOffset: 6}
		}
		if h != want {
			t.Errorf("frame %d: vnet header %+v, want %+v", i, h, want)
		}
	}
	if got := m.q.fill.prod.Load() - m.q.fill.cons.Load(); got != 64 {
		t.Errorf("fill ring holds %d chunks after the read, want all 64 back", got)
	}
	if m.q.refused != (Refused{}) {
		t.Errorf("refused %+v", m.q.refused)
	}
}

// TestQueueReceiveBatchAndOversize: a read stops at len(bufs) frames and
// never splits a chain; a frame larger than its buffer is reported by size.
func TestQueueReceiveBatchAndOversize(t *testing.T) {
	m := newModel(16, 2048, true)
	big := buildFrame(t, frameSpec{payload: 5000})
	for i := 0; i < 3; i++ {
		m.Deliver(big)
	}
	bufs, sizes := testBufs(2, testOffset+vnethdr.Len+len(big))
	n, more := m.q.receive(bufs, sizes, testOffset)
	if n != 2 || !more {
		t.Fatalf("receive = %d, %v; want 2, true", n, more)
	}
	small, sizes := testBufs(1, testOffset+100)
	if n, more = m.q.receive(small, sizes, testOffset); n != 1 || more || sizes[0] != vnethdr.Len+len(big) {
		t.Fatalf("receive into a short buffer = %d, %v, size %d", n, more, sizes[0])
	}
	if m.q.refused.Oversize != 1 {
		t.Errorf("oversize counted %d times, want 1", m.q.refused.Oversize)
	}
}

// TestQueueRefusesBadRX: descriptors the kernel must never hand out are
// counted and skipped, and the chunks they name go back to the fill ring
// only when they are RX chunks the kernel held.
func TestQueueRefusesBadRX(t *testing.T) {
	const chunk = 2048
	for _, c := range []struct {
		name  string
		descs []unix.XDPDesc
		want  uint64 // refused descriptors
		fill  uint32 // chunks back in the fill ring
	}{
		{"past the UMEM", []unix.XDPDesc{{Addr: 1 << 40, Len: 60}}, 1, 0},
		{"a TX chunk", []unix.XDPDesc{{Addr: 8*chunk + 256, Len: 60}}, 1, 0},
		{"longer than its chunk", []unix.XDPDesc{{Addr: 3*chunk + 256, Len: chunk}}, 1, 1},
		{"the same chunk twice", []unix.XDPDesc{{Addr: 2 * chunk, Len: 60}, {Addr: 2*chunk + 100, Len: 60}}, 1, 1},
		{"unknown options", []unix.XDPDesc{{Addr: 5 * chunk, Len: 60, Options: 0x80}}, 1, 1},
		{"an open chain", []unix.XDPDesc{{Addr: 4 * chunk, Len: 60, Options: unix.XDP_PKT_CONTD}}, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newModel(8, chunk, true)
			q := m.q
			// The kernel took every fill entry.
			q.fill.cons.Store(q.fill.prod.Load())
			copy(q.rx.descs, c.descs)
			q.rx.prod.Store(uint32(len(c.descs)))
			bufs, sizes := testBufs(4, 4096)
			n, _ := q.receive(bufs, sizes, testOffset)
			good := uint64(len(c.descs)) - c.want
			if uint64(n) != good || q.refused.RXDescs != c.want {
				t.Errorf("receive = %d frames, %d refused; want %d, %d", n, q.refused.RXDescs, good, c.want)
			}
			if got := q.fill.prod.Load() - q.fill.cons.Load(); got != c.fill {
				t.Errorf("%d chunks back in the fill ring, want %d", got, c.fill)
			}
		})
	}
}

// TestQueuePartialOnlyWhenTaken: a UDP datagram whose check field holds
// the bare pseudo-header sum is marked NEEDS_CSUM only where partial
// checksums are taken (a veth's peer's stack sent it). From any other NIC
// it is a wrong checksum off a wire: it comes out as it came, behind a
// zero header, for the lab's stack to check and drop as the packet
// backend's frames are; marked, the lab completed it and accepted it.
func TestQueuePartialOnlyWhenTaken(t *testing.T) {
	f := buildFrame(t, frameSpec{payload: 100})
	ps := partialSum(f, 14, 34, 17)
	f[34+6], f[34+7] = byte(ps>>8), byte(ps)
	for _, c := range []struct {
		partial bool
		want    vnethdr.Hdr
	}{
		{true, vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, CsumStart: 34, CsumOffset: 6}},
		{false, vnethdr.Hdr{}},
	} {
		m := newModel(8, 2048, false)
		m.q.partial = c.partial
		if !m.Deliver(f) {
			t.Fatal("the fake kernel could not deliver the frame")
		}
		bufs, sizes := testBufs(1, 4096)
		if n, _ := m.q.receive(bufs, sizes, testOffset); n != 1 {
			t.Fatalf("partial %v: receive = %d frames", c.partial, n)
		}
		b := bufs[0][testOffset : testOffset+sizes[0]]
		var h vnethdr.Hdr
		h.Decode(b)
		if h != c.want || !bytes.Equal(b[vnethdr.Len:], f) {
			t.Errorf("partial checksums taken %v: header %+v, want %+v (frame unchanged)", c.partial, h, c.want)
		}
	}
}

// TestQueueReadsDescOnce: the RX ring is memory the kernel shares, so a
// descriptor may change after it was checked. Each one is read once: a
// descriptor rewritten between its check and the copy (here to an address
// past the UMEM) changes nothing, where reading it again for the copy
// panicked on the slice bounds.
func TestQueueReadsDescOnce(t *testing.T) {
	m := newModel(8, 2048, true)
	q := m.q
	in := buildFrame(t, frameSpec{payload: 5000}) // three chunks
	if !m.Deliver(in) {
		t.Fatal("the fake kernel could not deliver the frame")
	}
	taken := uint32(0)
	q.rxTaken = func() {
		q.rx.descs[(q.rx.cached+taken)&q.rx.mask].Addr = 1 << 40
		taken++
	}
	bufs, sizes := testBufs(1, testOffset+vnethdr.Len+len(in))
	var n int
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("receive panicked on a descriptor rewritten after its check: %v", r)
			}
		}()
		n, _ = q.receive(bufs, sizes, testOffset)
	}()
	if taken != 3 {
		t.Errorf("%d descriptors taken, want 3", taken)
	}
	if n != 1 || sizes[0] != vnethdr.Len+len(in) || !bytes.Equal(bufs[0][testOffset+vnethdr.Len:testOffset+sizes[0]], in) {
		t.Errorf("receive = %d frames of %d bytes; want the %d bytes delivered, unchanged", n, sizes[0]-vnethdr.Len, len(in))
	}
	if q.refused != (Refused{}) {
		t.Errorf("refused %+v: the descriptors checked were good", q.refused)
	}
}

// TestQueueCorruptIndex: a producer index claiming more than the ring
// holds is counted and read as a full ring of checked descriptors.
func TestQueueCorruptIndex(t *testing.T) {
	m := newModel(8, 2048, false)
	for i := range m.q.rx.descs {
		m.q.rx.descs[i] = unix.XDPDesc{Addr: 1 << 40, Len: 60}
	}
	m.q.rx.prod.Store(1000)
	bufs, sizes := testBufs(16, 4096)
	if n, _ := m.q.receive(bufs, sizes, testOffset); n != 0 || m.q.refused.RingIndex == 0 || m.q.refused.RXDescs != 8 {
		t.Errorf("%d frames, refused %+v; want none, the index and 8 descriptors", n, m.q.refused)
	}
}

// TestQueueTransmit: plain frames, a partial checksum (completed), GSO
// super-frames (segmented, also with jumbo segments spanning chunks) and a
// 9014-byte frame (a chain) reach the fake kernel intact.
func TestQueueTransmit(t *testing.T) {
	m := newModel(128, 4096, true)
	plain := buildFrame(t, frameSpec{tags: []uint16{5}, payload: 1000})
	part := buildFrame(t, frameSpec{tcp: true, payload: 300})
	l4 := 34
	ps := partialSum(part, 14, l4, 6)
	part[l4+16], part[l4+17] = byte(ps>>8), byte(ps)
	jumbo := buildFrame(t, frameSpec{payload: 8972})
	in := [][]byte{
		withHdr(vnethdr.Hdr{}, plain),
		withHdr(vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, CsumStart: 34, CsumOffset: 16}, part),
		withHdr(vnethdr.Hdr{}, jumbo),
	}
	m.q.beginTX()
	for i, b := range in {
		if err := m.q.put(b); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	m.q.submitTX()
	out := m.Transmit()
	if len(out) != 3 || !bytes.Equal(out[0], plain) || !csumOK(out[1]) || !bytes.Equal(out[2], jumbo) {
		t.Fatalf("sent %d frames; plain intact %v, checksum completed %v, jumbo intact %v",
			len(out), len(out) > 0 && bytes.Equal(out[0], plain), len(out) > 1 && csumOK(out[1]), len(out) > 2 && bytes.Equal(out[2], jumbo))
	}
	for _, c := range []struct{ payload, mss int }{{60000, 1448}, {30000, 8948}, {100, 1448}} {
		m.q.reclaim()
		m.q.beginTX()
		if err := m.q.put(gsoFrame(t, c.payload, c.mss)); err != nil {
			t.Fatalf("GSO %d/%d: %v", c.payload, c.mss, err)
		}
		m.q.submitTX()
		checkSegments(t, m.Transmit(), c.payload, c.mss)
	}
	m.q.reclaim()
	if len(m.q.free) != 128 || m.q.refused != (Refused{}) {
		t.Errorf("after all completions %d free TX chunks (want 128), refused %+v", len(m.q.free), m.q.refused)
	}
}

// TestQueueTransmitRefusals: no room is EAGAIN and queues nothing; what
// can never fit is EMSGSIZE; a header without a frame is EINVAL.
func TestQueueTransmitRefusals(t *testing.T) {
	m := newModel(8, 2048, false)
	m.q.beginTX()
	f := withHdr(vnethdr.Hdr{}, buildFrame(t, frameSpec{payload: 100}))
	for i := 0; i < 8; i++ {
		if err := m.q.put(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.q.put(f); err != unix.EAGAIN {
		t.Errorf("ninth frame on 8 chunks: %v, want EAGAIN", err)
	}
	if err := m.q.put(gsoFrame(t, 3000, 1448)); err != unix.EAGAIN || m.q.txQueued != 8 {
		t.Errorf("GSO frame without room: %v with %d queued, want EAGAIN with 8", err, m.q.txQueued)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"longer than a chunk without multi-buffer", withHdr(vnethdr.Hdr{}, make([]byte, 3000)), unix.EMSGSIZE},
		{"more segments than TX chunks", gsoFrame(t, 20000, 1448), unix.EMSGSIZE},
		{"no frame", make([]byte, vnethdr.Len), unix.EINVAL},
		{"short header", make([]byte, 4), unix.EINVAL},
	} {
		if err := m.q.put(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestQueueRefusesBadCompletions: completion addresses that are not TX
// chunks in the kernel's hands are counted and change nothing.
func TestQueueRefusesBadCompletions(t *testing.T) {
	m := newModel(8, 2048, false)
	q := m.q
	q.beginTX()
	q.put(withHdr(vnethdr.Hdr{}, buildFrame(t, frameSpec{payload: 100})))
	q.submitTX()
	sent := q.tx.descs[0].Addr
	q.tx.cons.Store(1)
	copy(q.comp.addrs, []uint64{0, 1 << 40, 9 * 2048, sent, sent})
	q.comp.prod.Store(5)
	q.reclaim()
	if q.refused.CompAddrs != 4 || len(q.free) != 8 {
		t.Errorf("refused %d completions with %d chunks free; want 4 and 8", q.refused.CompAddrs, len(q.free))
	}
}

// TestQueueLazyFillConsumer: the kernel publishes the fill ring's consumer
// index only when its cached view runs out, so RX descriptors arrive for
// chunks the published index has not passed. They are the kernel's (it
// consumes the ring in order): none is refused, across many rounds and
// wraps, and the fill ring never holds a chunk twice.
func TestQueueLazyFillConsumer(t *testing.T) {
	m := newModel(16, 4096, false)
	m.lazy = true
	frame := buildFrame(t, frameSpec{payload: 100})
	bufs, sizes := testBufs(16, 2048)
	got := 0
	for round := range 200 {
		for range 1 + round%5 {
			if !m.Deliver(frame) {
				break
			}
		}
		if round%7 == 0 {
			m.publishFill()
		}
		n, _ := m.q.receive(bufs, sizes, testOffset)
		got += n
		seen := map[uint64]bool{}
		for i := m.fillCons; i != m.q.fill.prod.Load(); i++ {
			a := m.q.fill.addrs[i&m.q.fill.mask]
			if seen[a] {
				t.Fatalf("round %d: chunk %#x twice on the fill ring", round, a)
			}
			seen[a] = true
		}
	}
	if r := m.q.refused; r != (Refused{}) || got < 200 {
		t.Errorf("received %d frames, refused %+v; want none refused", got, r)
	}
}
