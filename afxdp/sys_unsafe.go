package afxdp

import (
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The XDP socket options that take or give structs; x/sys/unix has the
// structs (include/uapi/linux/if_xdp.h) but no helpers for them.

func setsockoptUmemReg(fd int, r *unix.XDPUmemReg) error {
	return setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(r), unsafe.Sizeof(*r))
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return os.NewSyscallError("setsockopt", e)
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	l := uint32(n)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return os.NewSyscallError("getsockopt", e)
	}
	return nil
}

func mmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var o unix.XDPMmapOffsets
	return o, getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&o), unsafe.Sizeof(o))
}

func statistics(fd int) (unix.XDPStatistics, error) {
	var s unix.XDPStatistics
	return s, getsockopt(fd, unix.XDP_STATISTICS, unsafe.Pointer(&s), unsafe.Sizeof(s))
}

// options reads XDP_OPTIONS (struct xdp_options: one u32 of flags).
func options(fd int) (uint32, error) {
	var flags uint32
	return flags, getsockopt(fd, unix.XDP_OPTIONS, unsafe.Pointer(&flags), unsafe.Sizeof(flags))
}

// umemAddr is the address XDP_UMEM_REG is given for mem.
func umemAddr(mem []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&mem[0]))) }

// mapRing maps one ring of a socket: its producer, consumer and flags words
// and entries descriptors of size descSize from off.Desc on.
func mapRing(fd int, pgoff int64, off *unix.XDPRingOffset, entries uint32, descSize uintptr) (ring, []byte, unsafe.Pointer, error) {
	n := int(off.Desc) + int(entries)*int(descSize)
	b, err := unix.Mmap(fd, pgoff, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, nil, nil, os.NewSyscallError("mmap", err)
	}
	r := ring{
		prod:  (*atomic.Uint32)(unsafe.Pointer(&b[off.Producer])),
		cons:  (*atomic.Uint32)(unsafe.Pointer(&b[off.Consumer])),
		flags: (*atomic.Uint32)(unsafe.Pointer(&b[off.Flags])),
		size:  entries,
		mask:  entries - 1,
	}
	return r, b, unsafe.Pointer(&b[off.Desc]), nil
}

func mapAddrRing(fd int, pgoff int64, off *unix.XDPRingOffset, entries uint32) (addrRing, []byte, error) {
	r, b, d, err := mapRing(fd, pgoff, off, entries, unsafe.Sizeof(uint64(0)))
	if err != nil {
		return addrRing{}, nil, err
	}
	return addrRing{ring: r, addrs: unsafe.Slice((*uint64)(d), entries)}, b, nil
}

func mapDescRing(fd int, pgoff int64, off *unix.XDPRingOffset, entries uint32) (descRing, []byte, error) {
	r, b, d, err := mapRing(fd, pgoff, off, entries, unsafe.Sizeof(unix.XDPDesc{}))
	if err != nil {
		return descRing{}, nil, err
	}
	return descRing{ring: r, descs: unsafe.Slice((*unix.XDPDesc)(d), entries)}, b, nil
}
