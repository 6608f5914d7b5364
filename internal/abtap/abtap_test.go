package abtap

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
)

var _ forward.Endpoint = (*Endpoint)(nil)

// pair is an Endpoint over two real tap.Queues on socketpairs, and their
// peers: what the TAP's queue 0 and queue 1 hand the kernel.
func pair(t *testing.T, c Config) (*Endpoint, [2]int) {
	t.Helper()
	var peers [2]int
	for i := range 2 {
		c.Queues[i], peers[i] = forwardtest.TAP(t)
	}
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, peers
}

func frames(n int, tag byte) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = bytes.Repeat([]byte{tag, byte(i)}, 40)
	}
	return out
}

// recvAll reads what fd holds now.
func recvAll(t *testing.T, fd int) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		b := make([]byte, 2048)
		n, err := unix.Read(fd, b)
		if err == unix.EAGAIN {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b[:n])
	}
}

// TestArms: writes go to queue 0 at first, to queue 1 after a control byte
// 1, back after 0; a byte other than 0 to 3 changes nothing; the totals
// count each queue's frames and bytes without the header.
func TestArms(t *testing.T) {
	e, peers := pair(t, Config{HdrLen: 10})
	want := [2]int{}
	for _, step := range []struct {
		b      byte
		ok     bool
		queue  int
		frames int
	}{{0, true, 0, 3}, {1, true, 1, 5}, {7, false, 1, 2}, {0, true, 0, 4}, {0x81, false, 0, 1}} {
		if ok := e.SetArm(step.b); ok != step.ok {
			t.Errorf("SetArm(%#x) = %v", step.b, ok)
		}
		if got := e.Arm().Queue(); got != step.queue {
			t.Fatalf("after byte %#x: arm queue %d, want %d", step.b, got, step.queue)
		}
		if n, err := e.Write(frames(step.frames, byte(step.queue)), 0); n != step.frames || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
		got := recvAll(t, peers[step.queue])
		if len(got) != step.frames || len(recvAll(t, peers[1-step.queue])) != 0 {
			t.Fatalf("after byte %#x: queue %d got %d frames, want %d, and the other none", step.b, step.queue, len(got), step.frames)
		}
		want[step.queue] += step.frames
	}
	tot := e.Totals()
	if tot.Frames != [2]uint64{uint64(want[0]), uint64(want[1])} || tot.Bytes != [2]uint64{uint64(want[0] * 70), uint64(want[1] * 70)} ||
		tot.Delayed != 0 || tot.Control != 3 || tot.Refused != 2 {
		t.Errorf("totals %+v, want frames %v, 70 bytes each", tot, want)
	}
}

// TestDelay: with bit 1 each frame waits Delay before its write, counted
// as delayed, on the queue bit 0 picks.
func TestDelay(t *testing.T) {
	const delay = 2 * time.Millisecond
	e, peers := pair(t, Config{Delay: delay})
	for _, b := range []byte{byte(ArmDelay), byte(ArmDelay | ArmQueue)} {
		e.SetArm(b)
		start := time.Now()
		if n, err := e.Write(frames(5, b), 0); n != 5 || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
		if took := time.Since(start); took < 5*delay {
			t.Errorf("arm %d: 5 delayed frames written in %v, want at least %v", b, took, 5*delay)
		}
		if got := len(recvAll(t, peers[Arm(b).Queue()])); got != 5 {
			t.Errorf("arm %d: queue got %d frames", b, got)
		}
	}
	e.SetArm(1)
	e.Write(frames(4, 1), 0)
	if tot := e.Totals(); tot.Delayed != 10 || tot.Frames != [2]uint64{5, 9} {
		t.Errorf("totals %+v, want 10 delayed of 5 and 9 frames", tot)
	}
	// A frame waits Delay for every DelayUnit bytes or part of them.
	for n, units := range map[int]time.Duration{0: 1, 1: 1, DelayUnit: 1, DelayUnit + 1: 2, 40 * DelayUnit: 40} {
		if got := e.frameDelay(n); got != units*delay {
			t.Errorf("a frame of %d bytes waits %v, want %v", n, got, units*delay)
		}
	}
}

// TestReadBoth: Read takes frames from both queues, up to the batch, and
// is EAGAIN only when both are empty; the epoll fd is readable while
// either queue has frames.
func TestReadBoth(t *testing.T) {
	e, peers := pair(t, Config{})
	bufs, sizes := make([][]byte, 8), make([]int, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 256)
	}
	if n, err := e.Read(bufs, sizes, 0); n != 0 || err != unix.EAGAIN {
		t.Fatalf("Read of two empty queues: %d, %v; want EAGAIN", n, err)
	}
	for q := range 2 {
		if readable(t, e.Fd()) {
			t.Fatal("epoll fd readable with both queues empty")
		}
		unix.Write(peers[q], []byte{byte(q), 'x'})
		if !readable(t, e.Fd()) {
			t.Fatalf("epoll fd not readable with a frame on queue %d", q)
		}
		if n, err := e.Read(bufs, sizes, 0); n != 1 || err != nil || bufs[0][0] != byte(q) {
			t.Fatalf("Read with a frame on queue %d: %d, %v", q, n, err)
		}
	}
	for i := range 12 {
		unix.Write(peers[i%2], []byte{byte(i % 2), byte(i)})
	}
	seen := map[byte]int{}
	total := 0
	for total < 12 {
		n, err := e.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatalf("Read after %d: %v", total, err)
		}
		for i := range n {
			seen[bufs[i][0]]++
		}
		total += n
	}
	if seen[0] != 6 || seen[1] != 6 || readable(t, e.Fd()) {
		t.Errorf("read %v of 6 frames per queue; readable after: %v", seen, readable(t, e.Fd()))
	}
}

func readable(t *testing.T, fd int) bool {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1 && p[0].Revents&unix.POLLIN != 0
}

// TestErrors: a queue's errors come back as it returned them, after the
// frames read before them (the worker's classify table reads them).
func TestErrors(t *testing.T) {
	var fakes [2]*forwardtest.Fake
	var c Config
	for i := range fakes {
		fakes[i] = forwardtest.NewFake(t)
		c.Queues[i] = fakes[i]
	}
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	bufs, sizes := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64)}, make([]int, 3)
	fakes[0].Push(forwardtest.Frame{Data: []byte("q0")})
	fakes[1].FailRead(unix.EBADFD)
	for range 2 { // whichever queue Read takes first
		n, err := e.Read(bufs, sizes, 0)
		if err == unix.EBADFD {
			if n > 1 {
				t.Errorf("Read: %d frames with EBADFD", n)
			}
			break
		}
		if n != 1 || err != nil {
			t.Fatalf("Read: %d, %v", n, err)
		}
	}
	fakes[1].FailWrite(nil, unix.EIO)
	e.SetArm(1)
	if n, err := e.Write(frames(3, 1), 0); n != 1 || err != unix.EIO {
		t.Errorf("Write to a queue failing its second frame with EIO: %d, %v", n, err)
	}
	fakes[1].FailWrite(unix.ENXIO)
	e.SetArm(3)
	if n, err := e.Write(frames(2, 1), 0); n != 0 || err != unix.ENXIO {
		t.Errorf("delayed Write to a gone queue: %d, %v", n, err)
	}
	if tot := e.Totals(); tot.Frames != [2]uint64{0, 1} || tot.Delayed != 0 {
		t.Errorf("totals %+v: want the one frame taken", tot)
	}
}

// TestControlFIFO: bytes written to the FIFO set the arm; Close ends the
// reader (no goroutine left) though the writer keeps the FIFO open.
func TestControlFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ab")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	before := goroutines()
	e, _ := pair(t, Config{Control: path})
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, b := range []byte{1, 9, 3, 2, 0, 1} {
		w.Write([]byte{b})
		want := b
		if b == 9 {
			want = 1
		}
		forwardtest.WaitFor(t, func() bool { return e.Totals().Control+e.Totals().Refused > 0 && byte(e.Arm()) == want })
	}
	forwardtest.WaitFor(t, func() bool { return e.Totals().Control == 5 && e.Totals().Refused == 1 })
	w.Write([]byte{0, 1, 0, 1})
	forwardtest.WaitFor(t, func() bool { return e.Totals().Control == 9 })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	forwardtest.WaitFor(t, func() bool { return goroutines() <= before })

	reg := filepath.Join(t.TempDir(), "file")
	os.WriteFile(reg, nil, 0o600)
	for _, p := range []string{reg, filepath.Join(t.TempDir(), "none")} {
		var c Config
		for i := range 2 {
			c.Queues[i], _ = forwardtest.TAP(t)
		}
		c.Control = p
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), "control") {
			t.Errorf("control %s: %v, want an error", p, err)
		}
	}
}

func goroutines() int {
	var n int
	for range 20 {
		n = runtime.NumGoroutine()
		time.Sleep(time.Millisecond)
	}
	return n
}

// TestForwarder runs forward's worker over the Endpoint: frames from the
// NIC go to the queue of the arm in force, and frames the lab writes to
// either queue reach the NIC (the worker's ppoll wakes through the epoll
// fd).
func TestForwarder(t *testing.T) {
	e, peers := pair(t, Config{})
	nic, wire := forwardtest.NIC(t, 16)
	f, err := forward.New([]forward.Endpoint{e}, []forward.NIC{nic}, forward.Config{Batch: 16, MTU: 1500, CPUs: []int{-1}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	frame := append(make([]byte, 10), bytes.Repeat([]byte{0xff}, 6)...) // vnet header, broadcast
	frame = append(frame, make([]byte, 60)...)
	for _, arm := range []byte{0, 1, 0} {
		e.SetArm(arm)
		for range 10 {
			unix.Write(wire, frame)
		}
		var got int
		forwardtest.WaitFor(t, func() bool { got += len(recvAll(t, peers[arm])); return got == 10 })
		if n := len(recvAll(t, peers[1-arm])); n != 0 {
			t.Errorf("arm %d: the other queue got %d frames", arm, n)
		}
	}
	for q := range 2 {
		unix.Write(peers[q], frame[10:])
		var got int
		forwardtest.WaitFor(t, func() bool { got += len(recvAll(t, wire)); return got == 1 })
	}
	if tot := e.Totals(); tot.Frames != [2]uint64{20, 10} {
		t.Errorf("totals %+v", tot)
	}
}
