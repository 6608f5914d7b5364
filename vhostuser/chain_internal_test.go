package vhostuser

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tapfwd/tapfwd/vhostuser/internal/shm"
)

// Test memory: regions A and B adjacent in guest physical addresses, C
// apart, all backed by one buffer with guard bytes around each.
const (
	gpaA, gpaB, gpaC = 0x10000, 0x11000, 0x100000
	regSize          = 4096
	guard            = 64
)

type testMem struct {
	backing []byte
	mem     memTable
}

func newTestMem() *testMem {
	tm := &testMem{backing: make([]byte, 3*(regSize+2*guard))}
	for i := range tm.backing {
		tm.backing[i] = 0xee
	}
	for i, gpa := range []uint64{gpaA, gpaB, gpaC} {
		off := guard + i*(regSize+2*guard)
		b := tm.backing[off : off+regSize : off+regSize]
		clear(b)
		tm.mem.regions[i] = region{gpa: gpa, uaddr: 0x7f0000000000 + gpa, size: regSize, mem: b}
	}
	tm.mem.n = 3
	return tm
}

// guardsIntact reports whether every byte outside the regions is as set.
func (tm *testMem) guardsIntact() bool {
	for i := range 3 {
		base := i * (regSize + 2*guard)
		if !bytes.Equal(tm.backing[base:base+guard], bytes.Repeat([]byte{0xee}, guard)) ||
			!bytes.Equal(tm.backing[base+guard+regSize:base+2*guard+regSize], bytes.Repeat([]byte{0xee}, guard)) {
			return false
		}
	}
	return true
}

// inRegion reports whether s lies inside one region's memory.
func (tm *testMem) inRegion(s []byte) bool {
	for i := range tm.mem.n {
		m := tm.mem.regions[i].mem
		if shm.Addr(s) >= shm.Addr(m) && shm.Addr(s)+uintptr(len(s)) <= shm.Addr(m)+uintptr(len(m)) {
			return true
		}
	}
	return false
}

func putDesc(table []byte, i int, addr uint64, n uint32, flags, next uint16) {
	d := table[16*i:]
	binary.LittleEndian.PutUint64(d, addr)
	binary.LittleEndian.PutUint32(d[8:], n)
	binary.LittleEndian.PutUint16(d[12:], flags)
	binary.LittleEndian.PutUint16(d[14:], next)
}

func TestWalk(t *testing.T) {
	type d struct {
		addr        uint64
		n           uint32
		flags, next uint16
	}
	cases := []struct {
		name     string
		descs    []d
		indirect []d // table at gpaC
		head     uint32
		write    bool
		noInd    bool
		segs     int
		total    uint64
		err      error
	}{
		{name: "one", descs: []d{{gpaA, 100, 0, 0}}, segs: 1, total: 100},
		{name: "whole region", descs: []d{{gpaA, regSize, 0, 0}}, segs: 1, total: regSize},
		{name: "across adjacent regions", descs: []d{{gpaA + 4000, 200, 0, 0}}, segs: 2, total: 200},
		{name: "chain", descs: []d{{gpaA, 10, 1, 2}, {}, {gpaB, 20, 1, 3}, {gpaC, 30, 0, 0}}, segs: 3, total: 60},
		{name: "zero lengths", descs: []d{{0, 0, 1, 1}, {gpaA, 0, 0, 0}}, segs: 0, total: 0},
		{name: "write", descs: []d{{gpaA, 10, descFlagWrite, 0}}, write: true, segs: 1, total: 10},
		{name: "head beyond", descs: []d{{gpaA, 10, 0, 0}}, head: 8, err: errHeadIndex},
		{name: "past the end", descs: []d{{gpaC + regSize, 1, 0, 0}}, err: errAddr},
		{name: "straddling the end", descs: []d{{gpaC + regSize - 1, 2, 0, 0}}, err: errAddr},
		{name: "into the gap", descs: []d{{gpaB + regSize - 10, 20, 0, 0}}, err: errAddr},
		{name: "below memory", descs: []d{{0, 1, 0, 0}}, err: errAddr},
		{name: "wraps", descs: []d{{^uint64(0) - 5, 10, 0, 0}}, err: errLenOverflow},
		{name: "self loop", descs: []d{{gpaA, 1, 1, 0}}, err: errLoop},
		{name: "loop", descs: []d{{gpaA, 1, 1, 1}, {gpaA, 1, 1, 2}, {gpaA, 1, 1, 0}}, err: errLoop},
		{name: "next beyond", descs: []d{{gpaA, 1, 1, 8}}, err: errNextIndex},
		{name: "write on transmit", descs: []d{{gpaA, 1, descFlagWrite, 0}}, err: errDirection},
		{name: "read on receive", descs: []d{{gpaA, 1, 0, 0}}, write: true, err: errDirection},
		{name: "indirect", descs: []d{{gpaC, 32, descFlagIndirect, 0}}, indirect: []d{{gpaA, 10, 1, 1}, {gpaB, 20, 0, 0}}, segs: 2, total: 30},
		{name: "direct then indirect", descs: []d{{gpaA, 5, 1, 1}, {gpaC, 16, descFlagIndirect, 0}}, indirect: []d{{gpaB, 20, 0, 0}}, segs: 2, total: 25},
		{name: "indirect write flag ignored", descs: []d{{gpaC, 16, descFlagIndirect | descFlagWrite, 0}}, indirect: []d{{gpaB, 20, 0, 0}}, segs: 1, total: 20},
		{name: "indirect not negotiated", descs: []d{{gpaC, 16, descFlagIndirect, 0}}, noInd: true, err: errIndirectFeat},
		{name: "indirect with next", descs: []d{{gpaC, 16, descFlagIndirect | 1, 1}, {gpaA, 1, 0, 0}}, err: errIndirectNext},
		{name: "indirect length 0", descs: []d{{gpaC, 0, descFlagIndirect, 0}}, err: errIndirectLen},
		{name: "indirect length 24", descs: []d{{gpaC, 24, descFlagIndirect, 0}}, err: errIndirectLen},
		{name: "indirect outside", descs: []d{{gpaC + regSize, 16, descFlagIndirect, 0}}, err: errIndirectMem},
		{name: "indirect across regions", descs: []d{{gpaB - 16, 32, descFlagIndirect, 0}}, err: errIndirectMem},
		{name: "indirect wraps", descs: []d{{^uint64(0) - 15, 32, descFlagIndirect, 0}}, err: errLenOverflow},
		{name: "nested indirect", descs: []d{{gpaC, 16, descFlagIndirect, 0}}, indirect: []d{{gpaC, 16, descFlagIndirect, 0}}, err: errIndirectNest},
		{name: "indirect loop", descs: []d{{gpaC, 32, descFlagIndirect, 0}}, indirect: []d{{gpaA, 1, 1, 1}, {gpaA, 1, 1, 0}}, err: errLoop},
		{name: "indirect next beyond", descs: []d{{gpaC, 32, descFlagIndirect, 0}}, indirect: []d{{gpaA, 1, 1, 2}}, err: errNextIndex},
		{name: "indirect write on transmit", descs: []d{{gpaC, 16, descFlagIndirect, 0}}, indirect: []d{{gpaA, 1, descFlagWrite, 0}}, err: errDirection},
		{name: "indirect buffer outside", descs: []d{{gpaC, 16, descFlagIndirect, 0}}, indirect: []d{{1, 1, 0, 0}}, err: errAddr},
	}
	for _, c := range cases {
		tm := newTestMem()
		table := make([]byte, 8*descSize)
		for i, x := range c.descs {
			putDesc(table, i, x.addr, x.n, x.flags, x.next)
		}
		for i, x := range c.indirect {
			putDesc(tm.mem.regions[2].mem, i, x.addr, x.n, x.flags, x.next)
		}
		w := newWalker()
		w.mem, w.table, w.num, w.indirect, w.budget = &tm.mem, table, 8, !c.noInd, turnDescs
		total, err := w.walk(c.head, c.write)
		if err != c.err || err == nil && (total != c.total || len(w.segs) != c.segs) {
			t.Errorf("%s: total %d, %d segments, %v; want %d, %d, %v", c.name, total, len(w.segs), err, c.total, c.segs, c.err)
		}
	}
}

// A chain longer than maxSegs is refused without being a rule break,
// after reading at most maxSegs descriptors.
func TestWalkTooLong(t *testing.T) {
	tm := newTestMem()
	const num = 2048
	table := make([]byte, num*descSize)
	for i := range num - 1 {
		putDesc(table, i, gpaA, 1, descFlagNext, uint16(i+1))
	}
	w := newWalker()
	w.mem, w.table, w.num = &tm.mem, table, num
	w.budget = turnDescs
	if _, err := w.walk(0, false); err != errTooLong {
		t.Fatalf("got %v", err)
	}
	// Zero-length descriptors count too: the work is bounded, not the bytes.
	for i := range num - 1 {
		putDesc(table, i, 0, 0, descFlagNext, uint16(i+1))
	}
	w.budget = turnDescs
	if _, err := w.walk(0, false); err != errTooLong {
		t.Fatalf("zero lengths: got %v", err)
	}
	// Up to maxSegs descriptors is fine.
	putDesc(table, maxSegs-1, gpaA, 1, 0, 0)
	w.budget = turnDescs
	if total, err := w.walk(0, false); err != nil || total != 1 || w.descs != maxSegs {
		t.Fatalf("%d descriptors: %d %v, %d read", maxSegs, total, err, w.descs)
	}
}

func TestGatherScatter(t *testing.T) {
	segs := [][]byte{make([]byte, 3), make([]byte, 0), make([]byte, 5), make([]byte, 4)}
	a, b := []byte("HEADER"), []byte("payload")
	if n := scatter(segs, a, b, 0); n != 12 {
		t.Fatalf("scatter wrote %d", n)
	}
	got := bytes.Join(segs, nil)
	if string(got) != "HEADERpayloa" {
		t.Fatalf("%q", got)
	}
	if n := scatter(segs, a, b, 12); n != 1 || segs[0][0] != 'd' {
		t.Fatalf("scatter from 12: %d %q", n, segs[0])
	}
	dst := make([]byte, 20)
	copy(segs[0], "HEA")
	if n := gather(segs, dst, 2); n != 10 || string(dst[:n]) != "ADERpayloa" {
		t.Fatalf("gather: %d %q", n, dst[:n])
	}
	if n := gather(segs, dst[:4], 0); n != 4 || string(dst[:4]) != "HEAD" {
		t.Fatalf("gather into 4: %d %q", n, dst[:4])
	}
	if n := gather(segs, dst, 100); n != 0 {
		t.Fatalf("gather past the end: %d", n)
	}
}

// FuzzWalk: whatever the descriptor table and guest memory hold, the walk
// ends after bounded work, never panics, and everything it returns lies
// inside guest memory and adds up. Every descriptor it reads, zero-length
// ones too, counts against the call's budget: it reads no more than the
// budget and no more than maxSegs, says errTurnDone exactly when the
// budget ran out, and a chain it returns is counted whole.
func FuzzWalk(f *testing.F) {
	seed := func(descs [][4]uint64, ind [][4]uint64) ([]byte, []byte) {
		t, m := make([]byte, 0, 16*len(descs)), make([]byte, 0, 16*len(ind))
		for _, x := range descs {
			t = binary.LittleEndian.AppendUint64(t, x[0])
			t = binary.LittleEndian.AppendUint32(t, uint32(x[1]))
			t = binary.LittleEndian.AppendUint16(t, uint16(x[2]))
			t = binary.LittleEndian.AppendUint16(t, uint16(x[3]))
		}
		for _, x := range ind {
			m = binary.LittleEndian.AppendUint64(m, x[0])
			m = binary.LittleEndian.AppendUint32(m, uint32(x[1]))
			m = binary.LittleEndian.AppendUint16(m, uint16(x[2]))
			m = binary.LittleEndian.AppendUint16(m, uint16(x[3]))
		}
		return t, m
	}
	t1, m1 := seed([][4]uint64{{gpaA, 100, 1, 1}, {gpaB + 4000, 200, 1, 2}, {gpaC, 48, 4, 0}},
		[][4]uint64{{gpaA, 10, 1, 1}, {gpaC + 100, 20, 1, 2}, {gpaB, 30, 0, 0}})
	f.Add(t1, m1, uint16(0), uint8(3), false, true, uint16(turnDescs))
	t2, m2 := seed([][4]uint64{{gpaA, 10, 3, 1}, {gpaA, 10, 3, 0}}, nil)
	f.Add(t2, m2, uint16(0), uint8(1), true, false, uint16(1))
	// An indirect table of zero-length descriptors, then one with bytes.
	var zeros [][4]uint64
	for i := range 255 {
		zeros = append(zeros, [4]uint64{0, 0, 1, uint64(i + 1)})
	}
	t3, m3 := seed([][4]uint64{{gpaC, 256 * 16, 4, 0}}, append(zeros, [4]uint64{gpaA, 64, 0, 0}))
	f.Add(t3, m3, uint16(0), uint8(0), false, true, uint16(200))
	f.Fuzz(func(t *testing.T, table, indirect []byte, head uint16, logNum uint8, write, ind bool, budget uint16) {
		num := uint32(1) << (logNum % 16)
		if len(table) < int(num)*descSize {
			table = append(table, make([]byte, int(num)*descSize-len(table))...)
		}
		tm := newTestMem()
		copy(tm.mem.regions[2].mem, indirect)
		w := newWalker()
		start := int(budget) % (turnDescs + 1)
		w.mem, w.table, w.num, w.indirect, w.budget = &tm.mem, table[:num*descSize], num, ind, start
		total, err := w.walk(uint32(head), write)
		if !tm.guardsIntact() {
			t.Fatal("guard bytes changed")
		}
		read := start - w.budget
		switch {
		case read < 0 || read > start || read > maxSegs:
			t.Fatalf("read %d descriptors on a budget of %d", read, start)
		case err == errTurnDone && (read != start || w.descs != read+1):
			t.Fatalf("out of budget after %d of %d descriptors, wanting descriptor %d", read, start, w.descs)
		case err != errTurnDone && err != errTooLong && w.descs != read:
			t.Fatalf("%d descriptors looked at (%v), %d counted", w.descs, err, read)
		}
		if err != nil {
			return
		}
		var sum uint64
		for _, s := range w.segs {
			if len(s) == 0 || !tm.inRegion(s) {
				t.Fatalf("segment of %d bytes outside guest memory", len(s))
			}
			sum += uint64(len(s))
		}
		if sum != total || len(w.segs) > maxSegs {
			t.Fatalf("total %d, segments add to %d, %d segments", total, sum, len(w.segs))
		}
	})
}
