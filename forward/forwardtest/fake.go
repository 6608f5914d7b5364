package forwardtest

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Frame is one frame a Fake hands out, with the VLAN tag a NIC would
// report beside it.
type Frame struct {
	Data      []byte // vnet header (when the side has one) and frame
	Tagged    bool
	TPID, TCI uint16
}

// Fake is a scripted endpoint: Read hands out what Push queued, Write
// records what it is given (and which goroutines called it), and errors
// are injected call by call. Its Fd is an eventfd that is readable while
// frames are queued, so a running worker wakes for them. It satisfies
// forward.NIC (and so forward.Endpoint).
type Fake struct {
	mu       sync.Mutex
	efd      int
	in       []Frame
	tags     []Frame // of the last Read
	written  [][]byte
	writers  map[uint64]bool // the goroutines that called Write
	hold     chan struct{}   // while set, Read blocks until it is closed
	limited  bool            // Write takes at most room frames more, then EAGAIN
	room     int
	writes   int                // Write calls
	refuse   func([]byte) error // Write refuses a frame this says no to
	readErr  []error            // returned by the next Reads, one each, after the frames queued before them
	writeErr []error            // the next written frames fail with these, one each (nil: taken)
}

// NewFake returns an empty Fake, closed when t ends.
func NewFake(t testing.TB) *Fake {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	return &Fake{efd: efd}
}

// Push queues frames for Read.
func (f *Fake) Push(frames ...Frame) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.in = append(f.in, frames...)
	f.signal()
}

// FailRead makes the next Read return err after the frames queued so far
// (a Read returns them first, then err, as a real endpoint does).
func (f *Fake) FailRead(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readErr = append(f.readErr, err)
	f.signal()
}

// FailWrite makes the next written frames fail, one error each (nil takes
// that frame).
func (f *Fake) FailWrite(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writeErr = append(f.writeErr, errs...)
}

// Full makes Write take nothing (EAGAIN) while on: a device with no room.
func (f *Fake) Full(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limited, f.room = on, 0
}

// Room makes Write take n frames more, then nothing (EAGAIN) until Full(false)
// or another Room: a guest with n receive buffers posted.
func (f *Fake) Room(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limited, f.room = true, n
}

// Writes returns how many times Write was called.
func (f *Fake) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// Refuse makes Write refuse each frame (vnet header included) that fn
// returns an error for, with that error, until Refuse(nil): a device that
// will not take some frames (GSO ones without the offload: EOPNOTSUPP).
func (f *Fake) Refuse(fn func(frame []byte) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = fn
}

// Hold makes the next Read block until Release: a device that wedges the
// worker reading it.
func (f *Fake) Hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = make(chan struct{})
	f.signal()
}

// Release lets a held Read return.
func (f *Fake) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold != nil {
		close(f.hold)
		f.hold = nil
	}
}

// Reset makes f as NewFake left it, its fd kept: nothing queued or
// written, no error or refusal scripted, no writer seen.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold != nil {
		close(f.hold)
	}
	f.in, f.tags, f.written, f.writers, f.hold = nil, nil, nil, nil, nil
	f.limited, f.room, f.writes, f.refuse, f.readErr, f.writeErr = false, 0, 0, nil, nil, nil
	var drain [8]byte
	unix.Read(f.efd, drain[:])
}

// Written returns copies of the frames Write took.
func (f *Fake) Written() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.written...)
}

// Writers is how many goroutines have called Write: an endpoint has one
// writer, so anything but 1 (after a write) breaks that rule.
func (f *Fake) Writers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.writers)
}

// goid is the calling goroutine's id, read from its stack trace's first
// line ("goroutine 42 [running]:").
func goid() uint64 {
	var b [64]byte
	s := bytes.TrimPrefix(b[:runtime.Stack(b[:], false)], []byte("goroutine "))
	if i := bytes.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	id, _ := strconv.ParseUint(string(s), 10, 64)
	return id
}

func (f *Fake) signal() {
	one := [8]byte{1}
	unix.Write(f.efd, one[:])
}

// Fd is an eventfd, readable while frames or errors are queued.
func (f *Fake) Fd() int { return f.efd }

// Duplex: a Fake's Read and Write may run at once (its lock orders them).
func (f *Fake) Duplex() {}

// Read copies queued frames into bufs[i][offset:]; a frame longer than its
// buffer is cut and its size says so. Without frames it returns the next
// scripted error, else EAGAIN.
func (f *Fake) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h := f.hold; h != nil {
		f.mu.Unlock()
		<-h
		f.mu.Lock()
	}
	n := 0
	f.tags = f.tags[:0]
	for n < len(bufs) && n < len(sizes) && len(f.in) > 0 {
		fr := f.in[0]
		f.in = f.in[1:]
		copy(bufs[n][offset:], fr.Data)
		sizes[n] = len(fr.Data)
		f.tags = append(f.tags, fr)
		n++
	}
	var err error
	if len(f.in) == 0 && len(f.readErr) > 0 {
		err, f.readErr = f.readErr[0], f.readErr[1:]
	}
	if n == 0 && err == nil {
		err = unix.EAGAIN
	}
	if len(f.in) == 0 && len(f.readErr) == 0 {
		var drain [8]byte
		unix.Read(f.efd, drain[:])
	}
	return n, err
}

// VLAN reports the tag pushed with frame i of the last Read.
func (f *Fake) VLAN(i int) (tpid, tci uint16, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.tags) {
		return 0, 0, false
	}
	return f.tags[i].TPID, f.tags[i].TCI, f.tags[i].Tagged
}

// Write records bufs[i][offset:] until a scripted error: it returns the
// count taken and that error (so a short count comes with the failing
// frame's error).
func (f *Fake) Write(bufs [][]byte, offset int) (int, error) {
	id := goid()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writers == nil {
		f.writers = map[uint64]bool{}
	}
	f.writers[id] = true
	f.writes++
	for i, b := range bufs {
		if f.limited && f.room == 0 {
			return i, unix.EAGAIN
		}
		if f.refuse != nil {
			if err := f.refuse(b[offset:]); err != nil {
				return i, err
			}
		}
		if len(f.writeErr) > 0 {
			err := f.writeErr[0]
			f.writeErr = f.writeErr[1:]
			if err != nil {
				return i, err
			}
		}
		if f.limited {
			f.room--
		}
		f.written = append(f.written, append([]byte(nil), b[offset:]...))
	}
	return len(bufs), nil
}
