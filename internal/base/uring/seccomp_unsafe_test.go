package uring

import (
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestUnavailableSeccomp: io_uring_setup refused by a seccomp filter (as
// container runtimes' default profiles do) or hidden by one comes back as
// ErrUnavailable, with the errno.
func TestUnavailableSeccomp(t *testing.T) {
	for _, errno := range []unix.Errno{unix.EPERM, unix.ENOSYS} {
		done := make(chan error)
		go func() {
			// The filter binds this thread only; the goroutine ends
			// locked, so the thread goes with it.
			runtime.LockOSThread()
			if err := denyURingSetup(errno); err != nil {
				done <- err
				return
			}
			p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				done <- err
				return
			}
			defer unix.Close(p[0])
			defer unix.Close(p[1])
			b, err := NewBatch(p[0], 4)
			if err == nil {
				b.Close()
			}
			done <- err
		}()
		err := <-done
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errno) {
			t.Errorf("with io_uring_setup denied with %v: err = %v, want ErrUnavailable and %v", errno, err, errno)
		}
	}
}

// denyURingSetup makes io_uring_setup fail with errno on this thread.
func denyURingSetup(errno unix.Errno) error {
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_IO_URING_SETUP, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(errno)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	return unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0)
}
