package vhostuser

import "github.com/tapfwd/tapfwd/vhostuser/internal/shm"

// A ring is three pieces of guest memory: its descriptor table, its
// available ring and its used ring. Two rings sharing any of it would both
// take every entry the guest posts (a front-end pointing pair 1's transmit
// ring at pair 0's memory had both workers send each frame), so a ring
// whose memory overlaps another started ring's is refused: stopped, logged
// and counted once per connection like a ring beyond the port's, the
// connection kept. Memory is compared where it lives, file and offset, so
// two regions mapping one file range are seen as the same memory.

// memPlace is where a byte of guest memory lives: a file and an offset in
// it, or, for memory the port did not map (tests), its host address.
type memPlace struct{ dev, ino, pos uint64 }

// place is where the first byte of b, a view of the table's memory, lives.
func (m *memTable) place(b []byte) memPlace {
	a := uint64(shm.Addr(b))
	for i := range m.n {
		r := &m.regions[i]
		if off := a - uint64(shm.Addr(r.mem)); off < r.size && r.mapping != nil {
			return memPlace{dev: r.dev, ino: r.ino, pos: r.off + off}
		}
	}
	return memPlace{pos: a}
}

// overlap reports whether views a and b of the table's memory share a byte.
func (m *memTable) overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := m.place(a), m.place(b)
	return pa.dev == pb.dev && pa.ino == pb.ino &&
		pa.pos < pb.pos+uint64(len(b)) && pb.pos < pa.pos+uint64(len(a))
}

// ringsOverlap is the started ring other than i whose memory ring i's
// (set up) overlaps, or -1. Under the write lock.
func (p *Port) ringsOverlap(i int) int {
	r := &p.rings[i]
	for j := range p.rings {
		o := &p.rings[j]
		if j == i || !o.started {
			continue
		}
		for _, a := range [...][]byte{r.desc, r.avail, r.used} {
			for _, b := range [...][]byte{o.desc, o.avail, o.used} {
				if p.mem.overlap(a, b) {
					return j
				}
			}
		}
	}
	return -1
}

// refuseShared stops ring i if its memory overlaps another started ring's
// and reports whether it did; the first time on a connection it is logged
// and counted as a protocol error. Under the write lock.
func (p *Port) refuseShared(i int) bool {
	j := p.ringsOverlap(i)
	if j < 0 {
		return false
	}
	p.stopRing(i)
	bit := uint64(1) << (i % 64)
	if p.refused[i/64]&bit == 0 {
		p.refused[i/64] |= bit
		p.stats.protocolErrors.Add(1)
		p.log.Warn("vhost-user front-end put a ring on memory another ring uses: refused, the connection kept",
			"ring", i, "queue", p.rings[i].name(), "other_ring", j, "other_queue", p.rings[j].name())
	}
	return true
}
