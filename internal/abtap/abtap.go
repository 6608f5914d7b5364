package abtap

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Queue is one TAP queue's I/O (tap.Queue): the batch shape of
// forward.Endpoint, its errors errno values.
type Queue interface {
	Read(bufs [][]byte, sizes []int, offset int) (int, error)
	Write(bufs [][]byte, offset int) (int, error)
	Fd() int
}

// Arm is what the controller picks, one byte of the control stream:
// ArmQueue is the queue written to, ArmDelay delays each frame.
type Arm uint8

// The bits of an Arm; a byte with any other bit set is refused.
const (
	ArmQueue Arm = 1 << 0 // the queue written to: 0 or 1
	ArmDelay Arm = 1 << 1 // busy-wait Config.Delay per DelayUnit before each frame's write
	armBits      = ArmQueue | ArmDelay
)

// Queue is the queue the arm writes to, 0 or 1.
func (a Arm) Queue() int { return int(a & ArmQueue) }

// Delayed says whether the arm waits before each frame.
func (a Arm) Delayed() bool { return a&ArmDelay != 0 }

// ErrNotFIFO means the control path is not a named pipe.
var ErrNotFIFO = errors.New("not a FIFO (mkfifo makes one)")

// Config is an Endpoint's queues, control stream and delay.
type Config struct {
	// Queues are the TAP's queues 0 and 1, the arms' (owned by the
	// caller, who closes them after the Endpoint).
	Queues [2]Queue
	// Control is a FIFO the controller holds open for writing; every byte
	// it writes sets the Arm. Empty: none (SetArm only).
	Control string
	// Delay is how long an arm with ArmDelay busy-waits, on the writing
	// thread, for every DelayUnit bytes (or part of them) of a frame,
	// before the frame's write: a known slowdown.
	Delay time.Duration
	// HdrLen is the length of the header in front of each frame (the
	// vnet header), left out of the byte counts.
	HdrLen int
	// Logger reports a refused control byte (once) and a failed read of
	// the control stream; nil discards.
	Logger *slog.Logger
}

// Totals are what the Endpoint wrote, per queue.
type Totals struct {
	// Frames and Bytes (without HdrLen) written to queue 0 and queue 1.
	Frames, Bytes [2]uint64
	// Delayed are the frames written after a Delay.
	Delayed uint64
	// Control counts the control bytes taken, Refused those ignored.
	Control, Refused uint64
}

// Endpoint is a forward.Endpoint over two TAP queues: Write writes a batch
// to the queue of the current Arm, Read reads both, Fd is an epoll fd that
// is readable when either queue has frames. Read and Write are called from
// the worker's goroutine, the rest from any.
type Endpoint struct {
	q     [2]Queue
	epfd  int
	delay time.Duration
	hdr   int
	log   *slog.Logger
	first int // the queue Read reads first: alternates, so neither starves

	arm                   atomic.Uint32
	frames, bytes         [2]atomic.Uint64
	delayed, ctl, refused atomic.Uint64

	f    *os.File // the control FIFO; nil without
	done chan struct{}
}

// New makes the Endpoint over c.Queues at Arm 0 (queue 0, no delay), and
// reads c.Control until Close.
func New(c Config) (_ *Endpoint, err error) {
	e := &Endpoint{q: c.Queues, delay: c.Delay, hdr: c.HdrLen, log: c.Logger, epfd: -1, done: make(chan struct{})}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if e.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("A/B endpoint: %w", os.NewSyscallError("epoll_create1", err))
	}
	for _, q := range e.q {
		// Level-triggered EPOLLIN only: a TAP queue is always writable,
		// and EPOLLERR (a detached queue, drivers/net/tun.c: tun_chr_poll)
		// is reported unasked.
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(q.Fd())}
		if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, q.Fd(), &ev); err != nil {
			return nil, fmt.Errorf("A/B endpoint: %w", os.NewSyscallError("epoll_ctl", err))
		}
	}
	if c.Control == "" {
		close(e.done)
		return e, nil
	}
	if e.f, err = OpenControl(c.Control); err != nil {
		return nil, err
	}
	go e.control()
	return e, nil
}

// OpenControl opens the FIFO at path for reading, O_RDWR so that the open
// does not wait for a writer and a read never sees the end of the stream,
// through the runtime's poller so that Close ends a read.
func OpenControl(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("A/B control: %w", err)
	}
	if st, err := f.Stat(); err != nil || st.Mode().Type() != fs.ModeNamedPipe {
		f.Close()
		return nil, fmt.Errorf("A/B control %s: %w", path, ErrNotFIFO)
	}
	return f, nil
}

// control sets the arm from each byte read, until Close.
func (e *Endpoint) control() {
	defer close(e.done)
	buf := make([]byte, 256)
	for {
		n, err := e.f.Read(buf)
		for _, b := range buf[:n] {
			e.SetArm(b)
		}
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				e.log.Error("A/B control stream failed: the arm stays", "err", err, "arm", e.Arm())
			}
			return
		}
	}
}

// SetArm takes one control byte: bit 0 the queue, bit 1 the delay. A byte
// with other bits is refused (counted, logged the first time).
func (e *Endpoint) SetArm(b byte) bool {
	if Arm(b)&^armBits != 0 {
		if e.refused.Add(1) == 1 {
			e.log.Warn("A/B control: ignoring a byte that is not 0 to 3 (bit 0 the queue, bit 1 the delay); further ones are counted", "byte", b)
		}
		return false
	}
	e.arm.Store(uint32(b))
	e.ctl.Add(1)
	return true
}

// Arm is the arm now in force.
func (e *Endpoint) Arm() Arm { return Arm(e.arm.Load()) }

// Delay is the Config's.
func (e *Endpoint) Delay() time.Duration { return e.delay }

// Totals reads the counters.
func (e *Endpoint) Totals() Totals {
	var t Totals
	for i := range 2 {
		t.Frames[i], t.Bytes[i] = e.frames[i].Load(), e.bytes[i].Load()
	}
	t.Delayed, t.Control, t.Refused = e.delayed.Load(), e.ctl.Load(), e.refused.Load()
	return t
}

// Fd is the epoll fd holding both queues: readable while either has
// frames (level-triggered), so a worker polling it wakes for both. It is
// never writable (an epoll fd reports only EPOLLIN): a worker that waits
// for room after EAGAIN times out, but a TAP queue does not say EAGAIN to
// a write (drivers/net/tun.c: its socket's sndbuf is INT_MAX).
func (e *Endpoint) Fd() int { return e.epfd }

// Read reads up to len(bufs) frames from both queues, first from the
// one the previous Read read second; it returns EAGAIN only when both
// have none. Errors other than EAGAIN are the queues' own, after the
// frames read before them.
func (e *Endpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	first := e.first
	e.first ^= 1
	n, err := e.q[first].Read(bufs, sizes, offset)
	if err != nil && err != unix.EAGAIN {
		return n, err
	}
	m, err := e.q[first^1].Read(bufs[n:], sizes[n:], offset)
	if n += m; err == unix.EAGAIN && n > 0 {
		err = nil
	}
	return n, err
}

// Write writes bufs to the queue of the arm in force when it is called,
// each frame after a busy wait of Delay with ArmDelay; its count and
// errors are the queue's.
func (e *Endpoint) Write(bufs [][]byte, offset int) (int, error) {
	a := Arm(e.arm.Load())
	q := a.Queue()
	var n int
	var err error
	if !a.Delayed() {
		n, err = e.q[q].Write(bufs, offset)
	} else {
		n, err = e.writeDelayed(e.q[q], bufs, offset)
		e.delayed.Add(uint64(n))
	}
	if n > 0 {
		b := 0
		for _, f := range bufs[:n] {
			b += len(f) - offset - e.hdr
		}
		e.frames[q].Add(uint64(n))
		e.bytes[q].Add(uint64(b))
	}
	return n, err
}

// DelayUnit is the frame size Config.Delay is per: a frame waits Delay
// for every DelayUnit bytes it carries or part of them. A delay per
// frame alone would slow nothing a TCP sender can route around: its
// writes, held back, leave as fewer, larger GSO frames (64 B writes
// reach the TAP as frames of tens of kilobytes), so the known slowdown
// is per byte, as a copy's is.
const DelayUnit = 1500

// frameDelay is how long a frame of n bytes waits.
func (e *Endpoint) frameDelay(n int) time.Duration {
	return e.delay * time.Duration(max(1, (n+DelayUnit-1)/DelayUnit))
}

// writeDelayed writes one frame at a time, each after spinning its delay
// (frameDelay) on the monotonic clock (a sleep would give the CPU away
// and take far longer than microseconds).
func (e *Endpoint) writeDelayed(q Queue, bufs [][]byte, offset int) (int, error) {
	for i := range bufs {
		d := e.frameDelay(len(bufs[i]) - offset - e.hdr)
		for start := time.Now(); time.Since(start) < d; {
		}
		if n, err := q.Write(bufs[i:i+1], offset); n == 0 {
			return i, err
		}
	}
	return len(bufs), nil
}

// Close stops reading the control stream, waits for that reader to end,
// and closes the epoll fd; the queues stay open.
func (e *Endpoint) Close() error {
	if e.f != nil {
		e.f.Close()
		<-e.done
		e.f = nil
	}
	if e.epfd >= 0 {
		err := unix.Close(e.epfd)
		e.epfd = -1
		return os.NewSyscallError("close", err)
	}
	return nil
}
