package eventfd

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func newEventfd(t *testing.T, flags int) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// count reads an eventfd's counter from /proc/self/fdinfo, which leaves it.
func count(t *testing.T, fd int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "eventfd-count:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no eventfd-count in %s", b)
	return ""
}

// Issue 22, item 1: an eventfd in blocking mode whose counter the other
// process filled to 0xfffffffffffffffe makes write(2) wait for ever;
// Signal returns at once and leaves the counter at the top, readable.
func TestSignalNeverWaits(t *testing.T) {
	s, err := NewSignaller()
	if err != nil {
		t.Fatal(err)
	}
	fd := newEventfd(t, 0) // blocking, as a front-end may leave it
	var full [8]byte
	binary.NativeEndian.PutUint64(full[:], 0xfffffffffffffffe)
	if _, err := unix.Write(fd, full[:]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Signal(fd) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		var b [8]byte
		unix.Read(fd, b[:]) // let it go
		t.Fatal("Signal waited on a full eventfd")
	}
	if c := count(t, fd); c != "ffffffffffffffff" {
		t.Fatalf("counter %s, want the top", c)
	}
	// At the top it stays there, and Signal still does not wait.
	if err := s.Signal(fd); err != nil || count(t, fd) != "ffffffffffffffff" {
		t.Fatalf("signal at the top: %v, counter %s", err, count(t, fd))
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(pfd, 0); n != 1 || pfd[0].Revents&unix.POLLIN == 0 {
		t.Fatalf("a saturated eventfd polls %#x", pfd[0].Revents)
	}
}

// Signal adds one per call, many more times than the completion ring
// holds, allocates nothing, and refuses a file that is not an eventfd.
func TestSignalCounts(t *testing.T) {
	s, err := NewSignaller()
	if err != nil {
		t.Fatal(err)
	}
	fd := newEventfd(t, unix.EFD_NONBLOCK)
	const n = 10 * events
	for range n {
		if err := s.Signal(fd); err != nil {
			t.Fatal(err)
		}
	}
	var b [8]byte
	if _, err := unix.Read(fd, b[:]); err != nil || binary.NativeEndian.Uint64(b[:]) != n {
		t.Fatalf("counter %d (%v), want %d", binary.NativeEndian.Uint64(b[:]), err, n)
	}
	if a := testing.AllocsPerRun(100, func() { s.Signal(fd) }); a != 0 {
		t.Fatalf("%v allocations per signal", a)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if err := s.Signal(p[1]); err != unix.EINVAL {
		t.Fatalf("signal on a pipe: %v, want EINVAL", err)
	}
}

// Check takes eventfds only, whatever their flags; other anonymous inodes,
// pipes, sockets and files are refused, saying what they are.
func TestCheck(t *testing.T) {
	for _, fl := range []int{0, unix.EFD_NONBLOCK, unix.EFD_SEMAPHORE} {
		if err := Check(newEventfd(t, fl)); err != nil {
			t.Errorf("eventfd (flags %#x): %v", fl, err)
		}
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ep, _ := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	tfd, _ := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	mfd, _ := unix.MemfdCreate("eventfd-test", unix.MFD_CLOEXEC)
	fds := map[string]int{"pipe:[": p[0], "socket:[": sp[0], "anon_inode:[eventpoll]": ep,
		"anon_inode:[timerfd]": tfd, "/memfd:eventfd-test": mfd}
	for want, fd := range fds {
		err := Check(fd)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "not an eventfd") {
			t.Errorf("%s: %v", want, err)
		}
	}
	for _, fd := range []int{p[0], p[1], sp[0], sp[1], ep, tfd, mfd} {
		unix.Close(fd)
	}
	if err := Check(p[0]); err == nil {
		t.Error("a closed fd passed")
	}
}
