// Package shm holds the memory primitives both sides of a virtqueue need on
// memory the guest shares with the port: the device side (the vhost-user
// port) and the driver side (the fake front-end its tests drive).
//
// The ring indices the two sides hand each other need ordered access: the
// driver publishes avail->idx with a release store after the entries it
// covers and the device reads it with an acquire load before them; the
// device publishes used->idx the same way and the driver reads it the same
// way; and a store-load fence separates publishing an index, or enabling
// notifications, from reading the other side's index or notification flags
// (virtio 1.x 2.7.7, 2.7.10, 2.7.13; drivers/vhost/vhost.c uses smp_mb() at
// the same places). Go's atomics are sequentially consistent, which gives
// all three.
package shm

import (
	"sync/atomic"
	"unsafe"
)

// Load32 atomically loads the native-endian u32 at b[off:], which the
// caller has aligned to 4 bytes in memory.
func Load32(b []byte, off int) uint32 {
	_ = b[off+3]
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
}

// Store32 atomically stores v at b[off:], aligned to 4 bytes in memory.
func Store32(b []byte, off int, v uint32) {
	_ = b[off+3]
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}

// Fence is a full memory barrier: a locked read-modify-write (LOCK XADD on
// amd64) on a word of the caller's own.
func Fence(w *uint32) { atomic.AddUint32(w, 0) }

// Addr is the address of b's first byte: for alignment checks, and the
// user address the front-end gives for its memory.
func Addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
