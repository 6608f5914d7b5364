package afxdp

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// checkFill: every entry the fill ring holds for the kernel is a distinct
// RX chunk's base address, marked as the kernel's: the queue never gives
// the kernel a chunk twice or one it does not own. The kernel holds the
// entries from what it is known to have consumed: its published consumer
// index, or further where an RX descriptor proved more (fillSeen).
func checkFill(t *testing.T, q *queue) {
	t.Helper()
	seen := map[uint64]bool{}
	from, prod := q.fillSeen, q.fill.prod.Load()
	if c := q.fill.cons.Load(); c-from <= prod-from {
		from = c
	}
	for i := from; i != prod; i++ {
		a := q.fill.addrs[i&q.fill.mask]
		if a%q.chunk != 0 || a >= uint64(q.rxChunks)*q.chunk || seen[a] || q.state[a/q.chunk] == chunkUser {
			t.Fatalf("fill entry %d: address %#x (duplicate %v)", i, a, seen[a])
		}
		seen[a] = true
	}
}

// FuzzReceive feeds the RX ring descriptors as a broken kernel might write
// them (any address, length and options; producer indexes that jump) over
// several rounds, and checks that Read's frames lie in their buffers and
// that the fill ring stays sound.
func FuzzReceive(f *testing.F) {
	rec := func(addr uint64, l, opts uint32) []byte {
		b := binary.LittleEndian.AppendUint64(nil, addr)
		b = binary.LittleEndian.AppendUint32(b, l)
		return binary.LittleEndian.AppendUint32(b, opts)
	}
	f.Add(byte(1), byte(3), append(rec(256, 60, 0), rec(2048+256, 1000, unix.XDP_PKT_CONTD)...))
	f.Add(byte(0), byte(200), rec(1<<40, 60, 0))
	f.Add(byte(1), byte(2), append(rec(256, 1792, unix.XDP_PKT_CONTD), append(rec(2048+256, 1792, unix.XDP_PKT_CONTD), rec(4096+256, 10, 0)...)...))
	f.Fuzz(func(t *testing.T, flags, delta byte, data []byte) {
		m := newModel(16, 2048, flags&1 != 0)
		q := m.q
		bufs, sizes := testBufs(4, testOffset+vnethdr.Len+1+int(flags>>1)*64)
		for round := 0; round < 3 && len(data) > 0; round++ {
			// The kernel takes what the fill ring offers, then writes
			// descriptors and moves its producer index by delta.
			q.fill.cons.Store(q.fill.prod.Load())
			prod := q.rx.prod.Load()
			for i := uint32(0); len(data) >= 16 && i < uint32(delta)%32; i++ {
				q.rx.descs[(prod+i)&q.rx.mask] = unix.XDPDesc{
					Addr: binary.LittleEndian.Uint64(data), Len: binary.LittleEndian.Uint32(data[8:]),
					Options: binary.LittleEndian.Uint32(data[12:]),
				}
				data = data[16:]
			}
			q.rx.prod.Store(prod + uint32(delta))
			for i := 0; i < 8; i++ {
				n, _ := q.receive(bufs, sizes, testOffset)
				for j := 0; j < n; j++ {
					if sizes[j] < vnethdr.Len {
						t.Fatalf("frame %d: size %d", j, sizes[j])
					}
				}
				if n == 0 {
					break
				}
			}
			checkFill(t, q)
		}
	})
}

// checkTX: descriptors the kernel has not consumed are distinct TX chunks
// marked as the kernel's, with a length within the chunk; the free list
// holds distinct TX chunks that are not; and together they account for
// every TX chunk the kernel has not completed.
func checkTX(t *testing.T, q *queue) {
	t.Helper()
	seen := map[uint32]bool{}
	for i := q.tx.cons.Load(); i != q.tx.prod.Load(); i++ {
		d := q.tx.descs[i&q.tx.mask]
		c := uint32(d.Addr / q.chunk)
		if d.Addr%q.chunk != 0 || c < q.rxChunks || int(c) >= len(q.state) || seen[c] || q.state[c] == chunkUser ||
			d.Len == 0 || uint64(d.Len) > q.chunk || d.Options&^unix.XDP_PKT_CONTD != 0 {
			t.Fatalf("TX descriptor %d: %+v", i, d)
		}
		seen[c] = true
	}
	for _, c := range q.free {
		if c < q.rxChunks || seen[c] || q.state[c] != chunkUser {
			t.Fatalf("free chunk %d (listed twice or the kernel's)", c)
		}
		seen[c] = true
	}
}

// FuzzTransmit writes frames with untrusted vnet headers and contents and
// lets a broken kernel complete any address, checking that the TX ring and
// the free list stay sound and that nothing panics.
func FuzzTransmit(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xee}, []byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(gsoFrame(f, 5000, 1448), []byte{0, 0x90, 0, 0, 0, 0, 0, 0})
	f.Add(withHdr(vnethdr.Hdr{Flags: 1, CsumStart: 34, CsumOffset: 6}, buildFrame(f, frameSpec{payload: 40})), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b, comps []byte) {
		m := newModel(32, 2048, len(comps)%2 == 0)
		q := m.q
		for round := 0; round < 4; round++ {
			q.reclaim()
			q.beginTX()
			for i := 0; i < 3; i++ {
				if q.put(b) != nil {
					break
				}
			}
			q.submitTX()
			checkTX(t, q)
			if round%2 == 0 {
				m.Transmit()
			}
			// A broken kernel completes addresses of its choosing.
			cp := q.comp.prod.Load()
			for len(comps) >= 8 && cp-q.comp.cons.Load() < q.comp.size {
				q.comp.addrs[cp&q.comp.mask] = binary.LittleEndian.Uint64(comps)
				comps = comps[8:]
				cp++
			}
			q.comp.prod.Store(cp)
			q.reclaim()
			checkTX(t, q)
		}
	})
}
