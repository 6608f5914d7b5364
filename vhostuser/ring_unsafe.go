package vhostuser

import (
	"sync/atomic"
	"unsafe"
)

// The ring indices the guest and the port hand each other need ordered
// access: the guest's avail->idx is read with acquire semantics before the
// entries it covers, the port's used->idx is written with release semantics
// after the entries it covers, and a store-load fence separates enabling
// notifications from re-reading an index (the virtio 1.x 2.7.7/2.7.10
// protocol; drivers/vhost/vhost.c uses smp_mb() at the same places). Go's
// atomics are sequentially consistent, which gives all three.

// load32 atomically loads the native-endian u32 at b[off:], which the
// caller has aligned to 4 bytes in memory.
func load32(b []byte, off int) uint32 {
	_ = b[off+3]
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
}

// store32 atomically stores v at b[off:], aligned to 4 bytes in memory.
func store32(b []byte, off int, v uint32) {
	_ = b[off+3]
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}

// fence is a full memory barrier: a locked read-modify-write (LOCK XADD on
// amd64) on a word of the ring's own.
func fence(w *uint32) { atomic.AddUint32(w, 0) }

// hostAddr is the address of b's first byte, for alignment checks.
func hostAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
