package vhostusertest

import (
	"sync/atomic"
	"unsafe"
)

// The guest side of the ring protocol: avail->idx is published with a
// release store after the entries, used->idx read with an acquire load
// before them, and a full fence separates publishing from reading the
// device's notification flags (virtio 1.x 2.7.13).

func load32(b []byte, off int) uint32 {
	_ = b[off+3]
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
}

func store32(b []byte, off int, v uint32) {
	_ = b[off+3]
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}

func fence(w *uint32) { atomic.AddUint32(w, 0) }

// addrOf is the address of the mapping: QEMU's user address of the region.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
