package afxdp

import (
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// turn is one batch each way through the in-memory UMEM: the fake kernel
// delivers batch frames, receive copies them out; put queues batch frames,
// the fake kernel completes them and reclaim takes the chunks back.
type turn struct {
	m     *model
	in    []byte
	out   [][]byte
	bufs  [][]byte
	sizes []int
}

func newTurn(tb testing.TB, batch, payload int) *turn {
	f := buildFrame(tb, frameSpec{payload: payload})
	tr := &turn{m: newModel(256, 4096, true), in: f}
	tr.bufs, tr.sizes = testBufs(batch, 32+65536)
	for i := 0; i < batch; i++ {
		tr.out = append(tr.out, withHdr(vnethdr.Hdr{}, f))
	}
	return tr
}

func (tr *turn) run(tb testing.TB) {
	q := &tr.m.q
	for range tr.bufs {
		tr.m.deliver(tr.in)
	}
	if n, _ := q.receive(tr.bufs, tr.sizes, testOffset); n != len(tr.bufs) {
		tb.Fatalf("received %d of %d", n, len(tr.bufs))
	}
	q.reclaim()
	q.beginTX()
	for _, b := range tr.out {
		if err := q.put(b); err != nil {
			tb.Fatal(err)
		}
	}
	q.submitTX()
	tr.m.consumeTX()
}

// consumeTX is transmit without building frames: the fake kernel takes
// the TX ring and completes every descriptor.
func (m *model) consumeTX() {
	q := &m.q
	cons, prod, cp := q.tx.cons.Load(), q.tx.prod.Load(), q.comp.prod.Load()
	for ; cons != prod; cons++ {
		q.comp.addrs[cp&q.comp.mask] = q.tx.descs[cons&q.tx.mask].Addr
		cp++
	}
	q.tx.cons.Store(cons)
	q.comp.prod.Store(cp)
}

// TestZeroAllocs: a batch each way through the rings allocates nothing.
func TestZeroAllocs(t *testing.T) {
	tr := newTurn(t, 64, 18)
	tr.run(t)
	if a := testing.AllocsPerRun(100, func() { tr.run(t) }); a != 0 {
		t.Errorf("%v allocations per batch, want 0", a)
	}
}

// BenchmarkQueue is the userspace cost per frame of the AF_XDP path with
// an in-memory UMEM: RX (descriptor checks, copy out, vnet header,
// partial-checksum check, refill) and TX (copy in, descriptor, reclaim);
// the fake kernel's own work (its copy in) is included, no system call is.
// One op is one frame each way.
func BenchmarkQueue(b *testing.B) {
	for _, c := range []struct {
		name    string
		payload int
	}{{"64B", 18}, {"1514B", 1472}} {
		b.Run(c.name, func(b *testing.B) {
			const batch = 64
			tr := newTurn(b, batch, c.payload)
			b.SetBytes(int64(2 * len(tr.in)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				tr.run(b)
			}
		})
	}
}
