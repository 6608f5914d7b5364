package eventfd

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func (s *Signaller) setup() error {
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, events, uintptr(unsafe.Pointer(&s.ctx)), 0); e != 0 {
		return e
	}
	return nil
}

// submit hands the kernel one request.
func (s *Signaller) submit(cb *iocb) error {
	cbs := [1]*iocb{cb}
	if _, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, uintptr(s.ctx), 1, uintptr(unsafe.Pointer(&cbs[0]))); e != 0 {
		return e
	}
	return nil
}

// reap empties the completion ring without waiting.
func (s *Signaller) reap() {
	var evs [events]ioEvent
	var zero unix.Timespec
	_, _, _ = unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(s.ctx), 0, events,
		uintptr(unsafe.Pointer(&evs[0])), uintptr(unsafe.Pointer(&zero)), 0)
}
