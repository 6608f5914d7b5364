package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// noXDPEnv, set in the environment of this test binary run again, makes
// Main install the filter and exec its arguments instead of running tests.
const noXDPEnv = "TAPFWD_TESTKIT_NO_AF_XDP"

// mainRan says Main is the test binary's TestMain, which WithoutXDPSockets
// needs.
var mainRan bool

// WithoutXDPSockets makes cmd run under a seccomp filter on which
// socket(AF_XDP, ...) fails with EAFNOSUPPORT, as on a kernel built
// without CONFIG_XDP_SOCKETS, and every other system call is the kernel's
// (what systemd's RestrictAddressFamilies=~AF_XDP installs). This test
// binary runs first, installs the filter (Main) and execs cmd's program;
// filters survive execve and are inherited by children, so a tapfwd under
// `ip netns exec` has it. cmd must not have started; its Env is kept.
func WithoutXDPSockets(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if !mainRan {
		t.Fatal("testkit: WithoutXDPSockets needs testkit.Main as the test binary's TestMain")
	}
	if _, ok := auditArch(); !ok {
		t.Skipf("no seccomp filter for %s here", runtime.GOARCH)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, noXDPEnv+"=1")
	cmd.Args = append([]string{self, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = self
}

// execWithoutXDPSockets installs the filter on this thread and execs
// argv; it returns only if either fails.
func execWithoutXDPSockets(argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("testkit: %s set without a command", noXDPEnv)
	}
	// The filter and no_new_privs are the thread's: exec from it.
	runtime.LockOSThread()
	if err := denyXDPSockets(); err != nil {
		return err
	}
	os.Unsetenv(noXDPEnv)
	return unix.Exec(argv[0], argv, os.Environ())
}

// auditArch is the AUDIT_ARCH_ value seccomp_data.arch holds for this
// build's system calls, and whether the filter knows it.
func auditArch() (uint32, bool) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, true
	}
	return 0, false
}

// Offsets in struct seccomp_data (include/uapi/linux/seccomp.h): nr, arch,
// instruction_pointer, args[6]; args[0]'s low word on a little-endian
// machine.
const (
	seccompNR    = 0
	seccompArch  = 4
	seccompArg0  = 16
	eafnosupport = uint32(unix.EAFNOSUPPORT)
)

// xdpFilter is the classic BPF program: socket(AF_XDP, ...) of this
// build's arch returns EAFNOSUPPORT, everything else is allowed.
func xdpFilter(arch uint32) []unix.SockFilter {
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	// jne jumps to the ALLOW at the end when A != k (jf), else falls through.
	jne := func(k uint32, toAllow uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: 0, Jf: toAllow}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	return []unix.SockFilter{
		ld(seccompArch),
		jne(arch, 5),
		ld(seccompNR),
		jne(unix.SYS_SOCKET, 3),
		ld(seccompArg0),
		jne(unix.AF_XDP, 1),
		ret(unix.SECCOMP_RET_ERRNO | eafnosupport),
		ret(unix.SECCOMP_RET_ALLOW),
	}
}

// denyXDPSockets sets no_new_privs (which an unprivileged filter needs,
// and which keeps setuid programs from escaping it) and installs
// xdpFilter on the calling thread, which the caller must have locked.
func denyXDPSockets() error {
	arch, ok := auditArch()
	if !ok {
		return fmt.Errorf("testkit: no seccomp filter for %s", runtime.GOARCH)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("testkit: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	f := xdpFilter(arch)
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("testkit: seccomp(SECCOMP_SET_MODE_FILTER): %w", e)
	}
	runtime.KeepAlive(f)
	return nil
}
