package uring

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// seqpacket returns a non-blocking SOCK_SEQPACKET pair: one message per
// read and write, as a TUN fd has one frame per read and write.
func seqpacket(t *testing.T) [2]int {
	t.Helper()
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return [2]int{p[0], p[1]}
}

// lockThread keeps the test on its OS thread: a Batch takes submissions
// from the thread of its first one only.
func lockThread(t *testing.T) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

func newBatchT(t *testing.T, fd, size int) *Batch {
	t.Helper()
	b, err := NewBatch(fd, size)
	if err != nil {
		t.Fatalf("NewBatch(%d, %d): %v", fd, size, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestBatchWriteRead(t *testing.T) {
	lockThread(t)
	p := seqpacket(t)
	w, r := newBatchT(t, p[0], 8), newBatchT(t, p[1], 8)
	frames := [][]byte{[]byte("xxa"), []byte("xxbb"), []byte("xxccccccccc")}
	if err := w.Write(frames, 2); err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		if n, err := w.Result(i); n != len(f)-2 || err != nil {
			t.Errorf("write %d: %d, %v; want %d, nil", i, n, err, len(f)-2)
		}
	}
	bufs := make([][]byte, 5)
	for i := range bufs {
		bufs[i] = make([]byte, 1+4)
	}
	if err := r.Read(bufs, 1); err != nil {
		t.Fatal(err)
	}
	// In order; the third cut to its 4-byte buffer; then nothing queued.
	for i, want := range []string{"a", "bb", "cccc"} {
		if n, err := r.Result(i); err != nil || string(bufs[i][1:1+n]) != want {
			t.Errorf("read %d: %q, %v; want %q", i, bufs[i][1:1+n], err, want)
		}
	}
	for i := 3; i < 5; i++ {
		if n, err := r.Result(i); n != 0 || err != unix.EAGAIN {
			t.Errorf("read %d of an empty socket: %d, %v; want EAGAIN", i, n, err)
		}
	}
}

// TestWriteChainStops: a failed write ends its batch, and the writes
// after it are not made.
func TestWriteChainStops(t *testing.T) {
	lockThread(t)
	p := seqpacket(t)
	w := newBatchT(t, p[0], 4)
	// A message larger than the socket's send buffer: EMSGSIZE
	// (net/unix/af_unix.c: unix_dgram_sendmsg).
	frames := [][]byte{[]byte("one"), make([]byte, 8<<20), []byte("three")}
	if err := w.Write(frames, 0); err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, unix.EMSGSIZE, unix.ECANCELED} {
		if _, err := w.Result(i); err != want {
			t.Errorf("write %d: %v, want %v", i, err, want)
		}
	}
	buf := make([]byte, 16)
	if n, err := unix.Read(p[1], buf); err != nil || string(buf[:n]) != "one" {
		t.Fatalf("first message %q, %v", buf[:n], err)
	}
	if n, err := unix.Read(p[1], buf); err != unix.EAGAIN {
		t.Fatalf("a write after the failed one was made: %q, %v", buf[:n], err)
	}
}

// TestUnavailableFd: a file without FMODE_NOWAIT (procfs) is refused as
// a TUN fd before Linux 6.4 would be.
func TestUnavailableFd(t *testing.T) {
	f, err := os.Open("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := NewBatch(int(f.Fd()), 4)
	if err == nil {
		b.Close()
		t.Fatal("NewBatch on a procfs file succeeded")
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "RWF_NOWAIT") {
		t.Errorf("err = %v, want ErrUnavailable saying RWF_NOWAIT", err)
	}
}

func TestSetupError(t *testing.T) {
	for _, tc := range []struct {
		errno       unix.Errno
		unavailable bool
	}{
		{unix.ENOSYS, true}, {unix.EPERM, true}, {unix.EACCES, true}, {unix.EINVAL, true},
		{unix.ENOMEM, false}, {unix.EMFILE, false},
	} {
		err := setupError(tc.errno)
		if errors.Is(err, ErrUnavailable) != tc.unavailable || !errors.Is(err, tc.errno) {
			t.Errorf("setupError(%v) = %v; unavailable %v", tc.errno, err, tc.unavailable)
		}
	}
}

// TestNothingPunted: reads that find nothing and writes run inline and
// leave no io-wq worker thread behind; a request with IOSQE_ASYNC, the
// control, does start one.
func TestNothingPunted(t *testing.T) {
	lockThread(t)
	if w, err := procfs.IOWorkers(); err != nil || len(w) > 0 {
		t.Skipf("io-wq workers before the test: %+v, %v", w, err)
	}
	p := seqpacket(t)
	w, r := newBatchT(t, p[0], 8), newBatchT(t, p[1], 8)
	bufs := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64)}
	for range 200 {
		if err := r.Read(bufs, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Result(0); err != unix.EAGAIN {
			t.Fatalf("read of an empty socket: %v", err)
		}
		if err := w.Write(bufs[:2], 0); err != nil {
			t.Fatal(err)
		}
		if err := r.Read(bufs, 0); err != nil {
			t.Fatal(err)
		}
	}
	if w, err := procfs.IOWorkers(); err != nil || len(w) > 0 {
		t.Fatalf("requests were handed to io-wq workers: %+v, %v", w, err)
	}
	// The control: the same read with IOSQE_ASYNC goes to a worker.
	s := r.r.prepare()
	s.opcode, s.fd, s.flags, s.userData = opRead, int32(p[1]), 1<<4, 0
	s.setBuf(bufs[0])
	if err := r.r.submit(0, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		w, err := procfs.IOWorkers()
		if err != nil {
			t.Fatal(err)
		}
		if len(w) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Error("no io-wq worker after an IOSQE_ASYNC read: the check sees nothing")
			break
		}
	}
	// Let the parked read complete so the ring closes with nothing in flight.
	if _, err := unix.Write(p[0], []byte("x")); err != nil {
		t.Fatal(err)
	}
	for r.r.ready() == 0 {
		if err := r.r.submit(1, nil); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
	}
	r.r.advance(r.r.ready())
}

func TestZeroAllocs(t *testing.T) {
	lockThread(t)
	p := seqpacket(t)
	w, r := newBatchT(t, p[0], 64), newBatchT(t, p[1], 64)
	out, in := make([][]byte, 64), make([][]byte, 64)
	for i := range out {
		out[i], in[i] = make([]byte, 100), make([]byte, 128)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := w.Write(out, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Result(63); err != nil {
			t.Fatal(err)
		}
		if err := r.Read(in, 0); err != nil {
			t.Fatal(err)
		}
		if n, err := r.Result(63); n != 100 || err != nil {
			t.Fatalf("read %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch, want 0", allocs)
	}
}

// TestOneThread: a Batch used from a second thread fails with EEXIST
// (IORING_SETUP_SINGLE_ISSUER) and goes on working on its first.
func TestOneThread(t *testing.T) {
	lockThread(t)
	p := seqpacket(t)
	w := newBatchT(t, p[0], 4)
	frame := [][]byte{[]byte("x")}
	if err := w.Write(frame, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- w.Write(frame, 0)
	}()
	if err := <-done; err != unix.EEXIST {
		t.Errorf("Write from another thread: %v, want EEXIST", err)
	}
	if _, err := w.Result(0); err != unix.EEXIST {
		t.Errorf("its Result: %v, want EEXIST", err)
	}
	if err := w.Write(frame, 0); err != nil {
		t.Fatalf("Write from the first thread again: %v", err)
	}
	if n, err := w.Result(0); n != 1 || err != nil {
		t.Errorf("Result = %d, %v", n, err)
	}
}
