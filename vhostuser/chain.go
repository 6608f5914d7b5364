package vhostuser

import (
	"encoding/binary"
	"errors"
)

// Split virtqueue descriptors (virtio 1.x 2.7.5; include/uapi/linux/virtio_ring.h).
const (
	descSize         = 16
	descFlagNext     = 1
	descFlagWrite    = 2
	descFlagIndirect = 4
	// maxSegs bounds the descriptors one frame may use and the pieces of
	// guest memory it may span, as drivers/vhost/vhost.c bounds a chain's
	// iovecs by UIO_MAXIOV (1024). Linux guests use at most
	// MAX_SKB_FRAGS+2 descriptors per frame.
	maxSegs = 1024
	// turnDescs bounds the descriptors one Read or Write walks, zero-length
	// ones and chains walked again included: a guest whose every available
	// entry names one long chain costs a call this much and no more. It
	// holds a full batch of frames from any Linux guest, and more than one
	// chain of maxSegs, so every call makes progress.
	turnDescs = 4 * maxSegs
)

// What a guest can do wrong with a descriptor chain. All but errTooLong
// break the virtio rules and stop the port.
var (
	errHeadIndex    = errors.New("descriptor head index beyond the ring")
	errNextIndex    = errors.New("descriptor next index beyond its table")
	errLoop         = errors.New("descriptor chain longer than its table: a loop")
	errAddr         = errors.New("descriptor buffer outside guest memory")
	errLenOverflow  = errors.New("descriptor address plus length wraps around")
	errDirection    = errors.New("descriptor direction wrong for the queue")
	errIndirectFeat = errors.New("indirect descriptor without VIRTIO_RING_F_INDIRECT_DESC")
	errIndirectNest = errors.New("indirect descriptor inside an indirect table")
	errIndirectNext = errors.New("indirect descriptor with NEXT set")
	errIndirectLen  = errors.New("indirect table length not a non-zero multiple of 16")
	errIndirectMem  = errors.New("indirect table not inside one guest memory region")
	// errTooLong: the chain may be legal but has more than maxSegs
	// descriptors or spans more than maxSegs pieces of memory.
	errTooLong = errors.New("descriptor chain longer than 1024 descriptors or pieces of memory")
	// errTurnDone: the call walked its turnDescs descriptors; the chain is
	// walked again by the next call. Not a rule break.
	errTurnDone = errors.New("descriptors of this call walked")
)

// walker follows descriptor chains of one ring. Nothing it reads from
// guest memory is trusted: each descriptor is read once into locals and
// checked before use.
type walker struct {
	mem      *memTable
	table    []byte // the ring's descriptor table, num entries
	num      uint32
	indirect bool // VIRTIO_RING_F_INDIRECT_DESC negotiated
	// segs is the walked chain: host slices of guest memory in chain
	// order, capacity maxSegs.
	segs [][]byte
	// descs is how many descriptors the last walk read; budget how many
	// the current call may still read (set to turnDescs as a call starts).
	descs, budget int
}

func newWalker() walker { return walker{segs: make([][]byte, 0, maxSegs)} }

// walk follows the chain starting at descriptor head and collects its
// buffers in w.segs. write says the queue's buffers are device-writable
// (a receive queue) rather than device-readable (a transmit queue); a
// descriptor of the other direction breaks the rules. It returns the
// chain's total length.
//
// Loops end because a chain may visit each entry of a table at most once:
// more visits than entries is a loop (drivers/vhost/vhost.c:
// vhost_get_vq_desc does the same count). An indirect table (its own
// entries, its own count) may only be the last descriptor of the direct
// chain (virtio 1.x 2.7.5.3.1: not with NEXT, not nested). However large
// the tables, a walk reads at most maxSegs descriptors: a longer chain is
// legal but not taken (errTooLong), so one frame costs bounded work. Every
// descriptor read counts against the call's budget, zero-length and
// indirect ones too; when it runs out the walk ends with errTurnDone.
func (w *walker) walk(head uint32, write bool) (uint64, error) {
	w.segs, w.descs = w.segs[:0], 0
	if head >= w.num {
		return 0, errHeadIndex
	}
	table, entries, i := w.table, w.num, head
	var total uint64
	visited, indirect := uint32(0), false
	for {
		if visited++; visited > entries {
			return 0, errLoop
		}
		if w.descs++; w.descs > maxSegs {
			return 0, errTooLong
		}
		if w.budget--; w.budget < 0 {
			w.budget = 0
			return 0, errTurnDone
		}
		d := table[i*descSize : i*descSize+descSize]
		addr, n := binary.LittleEndian.Uint64(d), binary.LittleEndian.Uint32(d[8:])
		flags, next := binary.LittleEndian.Uint16(d[12:]), binary.LittleEndian.Uint16(d[14:])
		if flags&descFlagIndirect != 0 {
			t, err := w.indirectTable(addr, n, flags, indirect)
			if err != nil {
				return 0, err
			}
			table, entries, i, visited, indirect = t, n/descSize, 0, 0, true
			continue
		}
		if (flags&descFlagWrite != 0) != write {
			return 0, errDirection
		}
		if err := w.add(addr, n); err != nil {
			return 0, err
		}
		total += uint64(n)
		if flags&descFlagNext == 0 {
			return total, nil
		}
		if uint32(next) >= entries {
			return 0, errNextIndex
		}
		i = uint32(next)
	}
}

// indirectTable checks an indirect descriptor and returns its table.
func (w *walker) indirectTable(addr uint64, n uint32, flags uint16, nested bool) ([]byte, error) {
	switch {
	case !w.indirect:
		return nil, errIndirectFeat
	case nested:
		return nil, errIndirectNest
	case flags&descFlagNext != 0:
		return nil, errIndirectNext
	case n == 0 || n%descSize != 0:
		return nil, errIndirectLen
	case addr+uint64(n) < addr:
		return nil, errLenOverflow
	}
	t := w.mem.gpaWhole(addr, uint64(n))
	if t == nil {
		return nil, errIndirectMem
	}
	return t, nil
}

// add appends the host pieces of guest range [addr, addr+n) to w.segs.
func (w *walker) add(addr uint64, n uint32) error {
	if n == 0 {
		return nil
	}
	if addr+uint64(n) < addr {
		return errLenOverflow
	}
	for rem := uint64(n); rem > 0; {
		p := w.mem.gpa(addr, rem)
		if p == nil {
			return errAddr
		}
		if len(w.segs) == maxSegs {
			return errTooLong
		}
		w.segs = append(w.segs, p)
		addr += uint64(len(p))
		rem -= uint64(len(p))
	}
	return nil
}

// gather copies the chain's bytes from offset skip on into dst and returns
// how many it copied.
func gather(segs [][]byte, dst []byte, skip int) int {
	n := 0
	for _, s := range segs {
		if len(dst) == n {
			break
		}
		if skip >= len(s) {
			skip -= len(s)
			continue
		}
		n += copy(dst[n:], s[skip:])
		skip = 0
	}
	return n
}

// scatter writes the concatenation a||b, from its byte pos on, into the
// chain's buffers in order and returns how many bytes it wrote.
func scatter(segs [][]byte, a, b []byte, pos int) int {
	n := 0
	for _, s := range segs {
		for len(s) > 0 {
			var src []byte
			switch {
			case pos < len(a):
				src = a[pos:]
			case pos-len(a) < len(b):
				src = b[pos-len(a):]
			default:
				return n
			}
			c := copy(s, src)
			s, pos, n = s[c:], pos+c, n+c
		}
	}
	return n
}
