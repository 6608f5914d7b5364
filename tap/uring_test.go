package tap_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// newURingQueue makes a URingQueue for t, which it keeps on its OS
// thread: the queue's ring takes submissions from one thread only.
func newURingQueue(t *testing.T, fd, batch int) *tap.URingQueue {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	q, err := tap.NewURingQueue(fd, batch)
	if err != nil {
		t.Fatalf("NewURingQueue: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// seqpacketPair is a non-blocking SOCK_SEQPACKET socketpair, closed when
// t ends.
func seqpacketPair(t *testing.T) [2]int {
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Close(p[0])
		unix.Close(p[1])
	})
	return p
}

// TestURingQueueSocketpair: the Queue semantics over a socketpair, batches
// longer than the ring included.
func TestURingQueueSocketpair(t *testing.T) {
	p := seqpacketPair(t)
	w, r := newURingQueue(t, p[0], 4), newURingQueue(t, p[1], 4)
	out := make([][]byte, 11)
	for i := range out {
		out[i] = []byte{0xee, byte(i), byte(i)}
	}
	if n, err := w.Write(out, 1); n != len(out) || err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(out))
	}
	in, sizes := make([][]byte, 16), make([]int, 16)
	for i := range in {
		in[i] = make([]byte, 2+3)
	}
	var got []byte
	for range 3 { // 11 frames into reads of at most 16: it may take rounds
		n, err := r.Read(in, sizes, 2)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if sizes[i] != 2 || in[i][2] != in[i][3] {
				t.Fatalf("frame %d: size %d, % x", i, sizes[i], in[i][2:])
			}
			got = append(got, in[i][2])
		}
		if len(got) == len(out) {
			break
		}
	}
	if !bytes.Equal(got, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Errorf("frames read %v, want 0..10 in order", got)
	}
	if n, err := r.Read(in, sizes, 2); n != 0 || err != unix.EAGAIN {
		t.Errorf("Read with nothing queued = %d, %v; want 0, EAGAIN", n, err)
	}
}

// TestURingQueueNextThread: a URingQueue taken over by a goroutine on
// another thread (a worker of the forwarder's next Run: the first one's
// thread ended with its goroutine, still locked) goes on writing and
// reading there, through a ring of that thread's.
func TestURingQueueNextThread(t *testing.T) {
	p := seqpacketPair(t)
	w, err := tap.NewURingQueue(p[0], 4)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := tap.NewURingQueue(p[1], 4)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in, sizes := [][]byte{make([]byte, 8), make([]byte, 8), make([]byte, 8)}, make([]int, 3)
	for run := range 3 {
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			out := [][]byte{{byte(run), 1}, {byte(run), 2}}
			if n, err := w.Write(out, 0); n != 2 || err != nil {
				done <- fmt.Errorf("Write = %d, %v; want 2, nil", n, err)
				return
			}
			if n, err := r.Read(in, sizes, 0); n != 2 || err != nil || in[0][0] != byte(run) || in[1][1] != 2 {
				done <- fmt.Errorf("Read = %d, %v (% x); want 2 frames of run %d", n, err, in[:2], run)
				return
			}
			done <- nil
		}()
		if err := <-done; err != nil {
			t.Errorf("run %d: %v", run, err)
		}
	}
}

// TestURingQueueTAP moves frames both ways through a real TAP: writes
// reach a socket in the lab in order, frames the lab sends are read in
// order, and a frame the TAP refuses stops its batch there.
func TestURingQueueTAP(t *testing.T) {
	bed, d := labTAP(t)
	q := newURingQueue(t, d.Fds()[0], 8)
	const port = 7777
	sock := udpSocket(t, bed, bed.LabNS, net.IP(bed.LabAddr.Addr().AsSlice()), port, false)
	frames := labFrames(bed, d, 20, port, 100)
	if n, err := q.Write(frames, 0); n != len(frames) || err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(frames))
	}
	expectSeqs(t, sock, 0, 20)

	// A frame shorter than an Ethernet header: tun_get_user says EINVAL.
	bad := append(frames[:1:1], make([]byte, vnethdr.Len+5), frames[2], frames[3])
	if n, err := q.Write(bad, 0); n != 1 || err != unix.EINVAL {
		t.Fatalf("Write with frame 1 bad = %d, %v; want 1, EINVAL", n, err)
	}
	expectSeqs(t, sock, 0, 1)
	if n, err := q.Write(bad[2:], 0); n != 2 || err != nil {
		t.Fatalf("Write after the bad frame = %d, %v; want 2, nil", n, err)
	}
	expectSeqs(t, sock, 2, 4)

	// The lab sends; frames of a local EtherType tell ours from the lab
	// stack's own (IPv6 neighbour discovery, say).
	send, sa := labSender(t, bed, d)
	for _, k := range []int{1, 5, 64, 70} {
		for i := range k {
			f := make([]byte, vnethdr.Len+60)
			copy(f[vnethdr.Len:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0x5e, 0, 0, 2, 0x88, 0xb5, byte(i), byte(i >> 8)})
			if err := unix.Sendto(send, f, 0, sa); err != nil {
				t.Fatal(err)
			}
		}
		if got := readSeqs(t, q); len(got) != k || !ascending(got) {
			t.Fatalf("queued %d, read %v", k, got)
		}
	}
}

// expectSeqs reads datagrams from sock and checks their first payload
// bytes are from..to-1, in order.
func expectSeqs(t *testing.T, sock, from, to int) {
	t.Helper()
	b := make([]byte, 2048)
	for want := from; want < to; want++ {
		n, _, err := unix.Recvfrom(sock, b, 0)
		if err != nil || n < 1 || int(b[0]) != want {
			t.Fatalf("datagram %d: % x, %v", want, b[:max(n, 0)], err)
		}
	}
	if n, _, err := unix.Recvfrom(sock, b, unix.MSG_DONTWAIT); err != unix.EAGAIN {
		t.Fatalf("an extra datagram: % x, %v", b[:max(n, 0)], err)
	}
}

// readSeqs reads the TAP until nothing is queued and returns the numbers
// of the frames with EtherType 0x88b5.
func readSeqs(t *testing.T, q *tap.URingQueue) []int {
	t.Helper()
	bufs, sizes := make([][]byte, 64), make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	var got []int
	for {
		n, err := q.Read(bufs, sizes, 0)
		if err == unix.EAGAIN {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			f := bufs[i][vnethdr.Len:sizes[i]]
			if len(f) >= 16 && binary.BigEndian.Uint16(f[12:]) == 0x88b5 {
				got = append(got, int(f[14])|int(f[15])<<8)
			}
		}
	}
}

func ascending(s []int) bool {
	for i, v := range s {
		if v != i {
			return false
		}
	}
	return true
}

// TestURingQueueDownAndGone: the errors the forwarder reads: EIO while the
// TAP is down, EBADFD once it is deleted.
func TestURingQueueDownAndGone(t *testing.T) {
	bed, d := labTAP(t)
	q := newURingQueue(t, d.Fds()[0], 8)
	frames := labFrames(bed, d, 4, 9, 100)
	ip(t, bed, "link", "set", "dev", d.Name(), "down")
	if n, err := q.Write(frames, 0); n != 0 || err != unix.EIO {
		t.Errorf("Write while down = %d, %v; want 0, EIO", n, err)
	}
	ip(t, bed, "link", "set", "dev", d.Name(), "up")
	if n, err := q.Write(frames, 0); n != len(frames) || err != nil {
		t.Errorf("Write once up = %d, %v; want %d, nil", n, err, len(frames))
	}
	ip(t, bed, "link", "del", "dev", d.Name())
	if n, err := q.Write(frames, 0); n != 0 || err != unix.EBADFD {
		t.Errorf("Write after the TAP was deleted = %d, %v; want 0, EBADFD", n, err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	if n, err := q.Read(bufs, sizes, 0); n != 0 || err != unix.EBADFD {
		t.Errorf("Read after the TAP was deleted = %d, %v; want 0, EBADFD", n, err)
	}
}

// labFrames are n frames of ipLen-byte UDP datagrams (no GSO) from bed's
// wire to port in its lab, through d, numbered 0 to n-1.
func labFrames(bed *testbed.Bed, d *tap.Device, n int, port uint16, ipLen int) [][]byte {
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = udpFrame(d.MAC(), bed.WireAddr.Addr(), bed.LabAddr.Addr(), port, byte(i), ipLen, false)
	}
	return frames
}

func ip(t *testing.T, bed *testbed.Bed, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := bed.Run(ctx, bed.LabNS, "ip", args...); err != nil {
		t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
	}
}

// TestURingQueueInline: reads that find the TAP empty and writes run
// inline in io_uring_enter, handed to no io-wq worker thread (which would
// show in /proc/self/task as iou-wrk-N), and a batch allocates nothing.
func TestURingQueueInline(t *testing.T) {
	bed, d := labTAP(t)
	q := newURingQueue(t, d.Fds()[0], 64)
	frames := labFrames(bed, d, 64, 9, 1500)
	bufs, sizes := make([][]byte, 64), make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	// Drain what the lab stack queued when the TAP came up.
	for n, _ := q.Read(bufs, sizes, 0); n > 0; n, _ = q.Read(bufs, sizes, 0) {
	}
	allocs := testing.AllocsPerRun(200, func() {
		if n, err := q.Write(frames, 0); n != len(frames) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if n, err := q.Write(frames[:1], 0); n != 1 || err != nil { // a write()
			t.Fatalf("Write of one frame = %d, %v", n, err)
		}
		// ICMP errors and ARP the writes cause, or nothing: EAGAIN.
		if _, err := q.Read(bufs, sizes, 0); err != nil && err != unix.EAGAIN {
			t.Fatalf("Read: %v", err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch, want 0", allocs)
	}
	if w, err := procfs.IOWorkers(); err != nil || len(w) > 0 {
		t.Errorf("requests were handed to io-wq workers: %+v, %v", w, err)
	}
}

// TestURingQueueUnavailable: an fd that takes no non-blocking io_uring
// I/O is ErrNoURing, the caller's cue to use a Queue.
func TestURingQueueUnavailable(t *testing.T) {
	f, err := os.Open("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q, err := tap.NewURingQueue(int(f.Fd()), 8)
	if err == nil {
		q.Close()
		t.Fatal("NewURingQueue on a procfs file succeeded")
	}
	if !errors.Is(err, tap.ErrNoURing) {
		t.Errorf("err = %v, want ErrNoURing", err)
	}
}
