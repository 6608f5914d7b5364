package uring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	_                                                                      [3]uint32
	sqOff                                                                  ringOffsets
	cqOff                                                                  ringOffsets
}

// ringOffsets is struct io_sqring_offsets or struct io_cqring_offsets:
// head, tail, ring_mask, ring_entries, then flags, dropped, array (SQ) or
// overflow, cqes, flags (CQ).
type ringOffsets struct {
	head, tail, mask, entries, f4, f5, f6, _ uint32
	_                                        uint64
}

// newRing makes a ring whose submission queue holds at least entries SQEs,
// with the setup flags given, and checks that the kernel knows the opcodes
// ops. Errors the kernel gives for a missing or refused io_uring come with
// ErrUnavailable.
func newRing(entries, flags uint32, ops ...uint8) (*ring, error) {
	p := params{flags: flags}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, setupError(errno)
	}
	r, err := mapRing(int(fd), &p)
	if err != nil {
		unix.Close(int(fd))
		return nil, err
	}
	if err := probe(int(fd), ops); err != nil {
		r.close()
		return nil, err
	}
	if flags&setupDisabled != 0 {
		r.enable = func() error { return register(int(fd), registerEnable, nil, 0) }
	}
	return r, nil
}

// setupError says why io_uring_setup failed.
func setupError(errno unix.Errno) error {
	err := os.NewSyscallError("io_uring_setup", errno)
	why := ""
	switch errno {
	case unix.ENOSYS:
		why = " (this kernel has no io_uring, or a seccomp filter hides it)"
	case unix.EPERM, unix.EACCES:
		why = " (refused: the sysctl kernel.io_uring_disabled, or a seccomp filter)"
	case unix.EINVAL:
		why = " (the kernel is older than Linux 6.1)"
	default:
		return fmt.Errorf("make an io_uring: %w", err)
	}
	return fmt.Errorf("make an io_uring: %w: %w%s", ErrUnavailable, err, why)
}

// mapRing maps the SQ and CQ rings (one mapping: IORING_FEAT_SINGLE_MMAP)
// and the SQE array of the ring fd.
func mapRing(fd int, p *params) (*ring, error) {
	if p.features&featSingleMmap == 0 {
		return nil, fmt.Errorf("%w: no IORING_FEAT_SINGLE_MMAP (Linux 5.4)", ErrUnavailable)
	}
	const rw, shared = unix.PROT_READ | unix.PROT_WRITE, unix.MAP_SHARED | unix.MAP_POPULATE
	size := max(p.sqOff.f6+p.sqEntries*4, p.cqOff.f5+p.cqEntries*uint32(unsafe.Sizeof(cqe{})))
	rings, err := unix.Mmap(fd, offSQRing, int(size), rw, shared)
	if err != nil {
		return nil, fmt.Errorf("map the io_uring rings: %w", os.NewSyscallError("mmap", err))
	}
	sqes, err := unix.Mmap(fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), rw, shared)
	if err != nil {
		unix.Munmap(rings)
		return nil, fmt.Errorf("map the io_uring SQEs: %w", os.NewSyscallError("mmap", err))
	}
	u32 := func(off uint32) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&rings[off])) }
	r := &ring{
		fd:       fd,
		features: p.features,
		sq:       queue{head: u32(p.sqOff.head), tail: u32(p.sqOff.tail), mask: u32(p.sqOff.mask).Load()},
		cq:       queue{head: u32(p.cqOff.head), tail: u32(p.cqOff.tail), mask: u32(p.cqOff.mask).Load()},
		sqes:     unsafe.Slice((*sqe)(unsafe.Pointer(&sqes[0])), p.sqEntries),
		cqes:     unsafe.Slice((*cqe)(unsafe.Pointer(&rings[p.cqOff.f5])), p.cqEntries),
	}
	// SQE i always sits in slot i: the indirection array is set once.
	// The tail's store publishes it with the first SQEs.
	array := unsafe.Slice((*uint32)(unsafe.Pointer(&rings[p.sqOff.f6])), p.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.next, r.head = r.sq.tail.Load(), r.cq.head.Load()
	r.enter = func(toSubmit, minComplete, flags uint32, ts *unix.Timespec) (int, error) {
		var arg getEventsArg
		var argp, argsz uintptr
		if ts != nil {
			// IORING_ENTER_EXT_ARG (5.11): no sigmask, a timeout.
			arg.ts = uint64(uintptr(unsafe.Pointer(ts)))
			argp, argsz, flags = uintptr(unsafe.Pointer(&arg)), unsafe.Sizeof(arg), flags|enterExtArg
		}
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), argp, argsz)
		runtime.KeepAlive(ts)
		if errno != 0 {
			return 0, errno // bare: this is the hot path
		}
		return int(n), nil
	}
	r.close = func() error {
		r.sqes, r.cqes = nil, nil
		return errors.Join(unix.Munmap(sqes), unix.Munmap(rings), unix.Close(fd))
	}
	return r, nil
}

// getEventsArg is struct io_uring_getevents_arg: sigmask, sigmask_sz,
// min_wait_usec (6.12; 0: none), ts (a struct __kernel_timespec).
type getEventsArg struct {
	sigmask            uint64
	sigmaskSz, minWait uint32
	ts                 uint64
}

// register is io_uring_register(2) with one argument of size n at p.
func register(fd int, op uint32, p unsafe.Pointer, n uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), uintptr(op), uintptr(p), n, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// registerNAPI sends one struct io_uring_napi (IORING_REGISTER_NAPI).
func registerNAPI(fd int, a *napiArg) error {
	return register(fd, registerNAPIOp, unsafe.Pointer(a), 1)
}

// probeOps is struct io_uring_probe with room for every opcode.
type probeOps struct {
	lastOp, opsLen uint8
	_              uint16
	_              [3]uint32
	ops            [256]struct {
		op, _ uint8
		flags uint16
		_     uint32
	}
}

// probe checks that the kernel knows the opcodes ops
// (IORING_REGISTER_PROBE, Linux 5.6).
func probe(fd int, ops []uint8) error {
	var p probeOps
	if err := register(fd, registerProbe, unsafe.Pointer(&p), uintptr(len(p.ops))); err != nil {
		return fmt.Errorf("probe the io_uring opcodes: %w", os.NewSyscallError("io_uring_register", err))
	}
	for _, op := range ops {
		if op >= p.opsLen || p.ops[op].flags&opSupported == 0 {
			return fmt.Errorf("%w: the kernel lacks opcode %d", ErrUnavailable, op)
		}
	}
	return nil
}

// setBuf points s at b. The caller keeps b reachable until the SQE's
// completion is read.
func (s *sqe) setBuf(b []byte) {
	s.addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	s.len = uint32(len(b))
}
