package testkit

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// childEnv makes TestSocketsInChild check the sockets it is given.
const childEnv = "TAPFWD_TESTKIT_SECCOMP_CHILD"

// TestDenyXDPSockets: on a thread with the filter, socket(AF_XDP) fails
// with EAFNOSUPPORT and socket(AF_INET) and socket(AF_PACKET) work; the
// thread is thrown away afterwards (it stays locked), so the filter
// leaves the test binary with it.
func TestDenyXDPSockets(t *testing.T) {
	if _, ok := auditArch(); !ok {
		t.Skipf("no seccomp filter for %s", runtime.GOARCH)
	}
	errs := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := denyXDPSockets(); err != nil {
			errs <- err
			return
		}
		errs <- checkSockets()
	}()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// This thread has no filter: the kernel's own answer.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.EAFNOSUPPORT):
		t.Skip("this kernel has no AF_XDP sockets: the filter's effect cannot be told apart")
	case errors.Is(err, unix.EPERM):
		t.Log("socket(AF_XDP) without the filter: not permitted here")
	case err != nil:
		t.Errorf("socket(AF_XDP) without the filter: %v", err)
	default:
		unix.Close(fd)
	}
}

// checkSockets: socket(AF_XDP) fails with EAFNOSUPPORT, AF_INET and
// AF_PACKET sockets open (the latter only when permitted).
func checkSockets() error {
	if _, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); !errors.Is(err, unix.EAFNOSUPPORT) {
		return errors.New("socket(AF_XDP) under the filter: " + errString(err) + ", want EAFNOSUPPORT")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return errors.New("socket(AF_INET) under the filter: " + err.Error())
	}
	unix.Close(fd)
	fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	} else if !errors.Is(err, unix.EPERM) {
		return errors.New("socket(AF_PACKET) under the filter: " + err.Error())
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestWithoutXDPSockets: a command run through WithoutXDPSockets (this
// test binary again, running TestSocketsInChild) has the filter after
// exec on every thread it makes, and its environment lacks the re-exec
// variable.
func TestWithoutXDPSockets(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestSocketsInChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	WithoutXDPSockets(t, cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestSocketsInChild") || strings.Contains(string(out), "SKIP") {
		t.Fatalf("the child did not check its sockets:\n%s", out)
	}
}

// TestSocketsInChild is TestWithoutXDPSockets' child; run directly, it
// skips.
func TestSocketsInChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestWithoutXDPSockets")
	}
	if v := os.Getenv(noXDPEnv); v != "" {
		t.Errorf("%s=%s is still in the exec'd program's environment", noXDPEnv, v)
	}
	// A new goroutine on a locked thread: the filter is on every thread.
	errs := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		errs <- checkSockets()
	}()
	if err := <-errs; err != nil {
		t.Error(err)
	}
	if err := checkSockets(); err != nil {
		t.Error(err)
	}
}
