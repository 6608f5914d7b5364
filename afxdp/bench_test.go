package afxdp

import (
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// turn is one batch each way through the in-memory UMEM: the fake kernel
// delivers batch frames, receive copies them out; put queues batch frames,
// the fake kernel completes them and reclaim takes the chunks back.
type turn struct {
	m     *MemKernel
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
	q := tr.m.q
	for range tr.bufs {
		tr.m.Deliver(tr.in)
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
	tr.m.Complete()
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

// BenchmarkSocket is a forward.NIC's work on the AF_XDP path as the
// worker calls it, with an in-memory UMEM: one op is a 32-frame batch
// read (Read: checks, copy out, vnet header, refill) and one written
// (Write: copy in, descriptors, reclaim), with the fake kernel's delivery
// and completion; no system call. ns/frame is per frame each way.
func BenchmarkSocket(b *testing.B) {
	const batch = 32
	for _, c := range []struct {
		name    string
		payload int
	}{{"64B", 18}, {"1514B", 1472}} {
		b.Run(c.name, func(b *testing.B) {
			s, m := NewMemSocket(256, 4096, true)
			f := buildFrame(b, frameSpec{payload: c.payload})
			bufs, sizes := testBufs(batch, 32+65536)
			out := make([][]byte, batch)
			for i := range out {
				out[i] = withHdr(vnethdr.Hdr{}, f)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for range batch {
					m.Deliver(f)
				}
				if n, err := s.Read(bufs, sizes, testOffset); n != batch || err != nil {
					b.Fatalf("Read = %d, %v", n, err)
				}
				if n, err := s.Write(out, 0); n != batch || err != nil {
					b.Fatalf("Write = %d, %v", n, err)
				}
				m.Complete()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/frame")
		})
	}
}

// TestSocketZeroAllocs: Read and Write of a batch allocate nothing.
func TestSocketZeroAllocs(t *testing.T) {
	s, m := NewMemSocket(256, 4096, true)
	f := buildFrame(t, frameSpec{payload: 18})
	bufs, sizes := testBufs(32, 2048)
	out := make([][]byte, 32)
	for i := range out {
		out[i] = withHdr(vnethdr.Hdr{}, f)
	}
	a := testing.AllocsPerRun(100, func() {
		for range 32 {
			m.Deliver(f)
		}
		if n, err := s.Read(bufs, sizes, testOffset); n != 32 || err != nil {
			t.Fatalf("Read = %d, %v", n, err)
		}
		if n, err := s.Write(out, 0); n != 32 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		m.Complete()
	})
	if a != 0 {
		t.Errorf("%v allocations per batch, want 0", a)
	}
}
