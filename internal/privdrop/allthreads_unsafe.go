package privdrop

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// allThreads runs a two-argument system call on every thread of the
// process (capabilities, no_new_privs and the bounding set are per thread).
// It returns unix.ENOTSUP in a cgo build, where Go cannot.
func allThreads(trap, a1, a2 uintptr) error {
	_, _, e := syscall.AllThreadsSyscall(trap, a1, a2, 0)
	if e != 0 {
		return e
	}
	return nil
}

// clearCaps empties the permitted, effective and inheritable sets of
// every thread (capset).
func clearCaps(step func(string, uintptr, uintptr, uintptr) error) error {
	// On the heap, which does not move, and kept alive across the call:
	// the addresses travel as uintptrs.
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	err := step("capset", unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])))
	runtime.KeepAlive(hdr)
	runtime.KeepAlive(data)
	return err
}
