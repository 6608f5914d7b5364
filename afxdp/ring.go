package afxdp

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ring is the index part of one AF_XDP ring (net/xdp/xsk_queue.h: struct
// xdp_ring): a producer and a consumer index that only grow and wrap at
// 2^32, and a flags word (XDP_RING_NEED_WAKEUP). The words live in memory
// the kernel shares (mmap of the socket) or, in tests, in Go memory.
//
// Ordering: the producer writes descriptors and then stores its index; the
// consumer loads that index and then reads descriptors, and stores its own
// index only once it is done with them. sync/atomic's Load and Store are at
// least acquire and release (XCHG and MOV on amd64, STLR and LDAR on arm64),
// which is what the kernel's smp_load_acquire/smp_store_release pair with.
type ring struct {
	prod, cons, flags *atomic.Uint32
	size, mask        uint32
	// cached is this side's own index (producer's prod, consumer's cons),
	// ahead of the shared word until submit or release.
	cached uint32
}

func (r *ring) needWakeup() bool { return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0 }

// peek is how many entries the kernel produced that this consumer has not
// taken, at most max. An index that claims more than the ring holds is the
// kernel's bug or a corrupt mapping: corrupt is set and the ring's size is
// assumed, every descriptor being checked anyway.
func (r *ring) peek(max uint32) (n uint32, corrupt bool) {
	n = r.prod.Load() - r.cached
	if n > r.size {
		n, corrupt = r.size, true
	}
	return min(n, max), corrupt
}

// release hands n consumed entries back to the kernel.
func (r *ring) release(n uint32) {
	r.cached += n
	r.cons.Store(r.cached)
}

// room is how many entries this producer may still write. A consumer index
// ahead of what was produced is corrupt: no room is assumed.
func (r *ring) room() (n uint32, corrupt bool) {
	used := r.cached - r.cons.Load()
	if used > r.size {
		return 0, true
	}
	return r.size - used, false
}

// submit publishes the n entries written after the cached index.
func (r *ring) submit(n uint32) {
	r.cached += n
	r.prod.Store(r.cached)
}

// addrRing is a fill or completion ring: UMEM addresses.
type addrRing struct {
	ring
	addrs []uint64
}

func (r *addrRing) at(i uint32) *uint64 { return &r.addrs[(r.cached+i)&r.mask] }

// descRing is an RX or TX ring: descriptors.
type descRing struct {
	ring
	descs []unix.XDPDesc
}

func (r *descRing) at(i uint32) *unix.XDPDesc { return &r.descs[(r.cached+i)&r.mask] }
