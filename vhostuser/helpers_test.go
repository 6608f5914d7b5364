package vhostuser_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// testPort is a port in a temporary directory whose events a test can wait for.
type testPort struct {
	*vhostuser.Port
	events chan vhostuser.Event
}

func newPort(t testing.TB, c vhostuser.Config) *testPort {
	t.Helper()
	tp := &testPort{events: make(chan vhostuser.Event, 256)}
	if c.Path == "" {
		c.Path = filepath.Join(t.TempDir(), "port.sock")
	}
	c.OnEvent = func(e vhostuser.Event) { tp.events <- e }
	if c.Logger == nil && testing.Verbose() {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := vhostuser.Listen(c)
	if err != nil {
		t.Fatal(err)
	}
	tp.Port = p
	t.Cleanup(func() { p.Close() })
	return tp
}

// wait returns the next event of kind k, failing after 5 s.
func (tp *testPort) wait(t testing.TB, k vhostuser.EventKind) vhostuser.Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e := <-tp.events:
			if e.Kind == k {
				return e
			}
		case <-timeout:
			t.Fatalf("no %v event; state %v", k, tp.State())
		}
	}
}

// dial connects a driver and waits until the port runs.
func (tp *testPort) dial(t testing.TB, c vhostusertest.Config) *vhostusertest.Driver {
	t.Helper()
	d, err := vhostusertest.Dial(tp.Path(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	tp.wait(t, vhostuser.EventRunning)
	return d
}

// dialStopped connects a driver that has set nothing up yet (NoStart): the
// test sends the requests itself. It is closed when t ends.
func (tp *testPort) dialStopped(t testing.TB) *vhostusertest.Driver {
	t.Helper()
	d, err := vhostusertest.Dial(tp.Path(), vhostusertest.Config{NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// frame builds an Ethernet frame of n bytes from src with a pattern.
func frame(n int, src byte, seed byte) []byte {
	f := make([]byte, n)
	copy(f, []byte{0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, src, 0x08, 0x00})
	for i := 14; i < n; i++ {
		f[i] = byte(i) ^ seed
	}
	return f
}

func hdr(flags, gso uint8, hdrLen, gsoSize, csumStart, csumOff uint16) []byte {
	h := vnethdr.Hdr{Flags: flags, GSOType: gso, HdrLen: hdrLen, GSOSize: gsoSize, CsumStart: csumStart, CsumOffset: csumOff}
	b := make([]byte, vnethdr.Len)
	h.Encode(b)
	return b
}

// bufs carves n read buffers of size bytes.
func bufs(n, size int) ([][]byte, []int) {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, size)
	}
	return b, make([]int, n)
}

// withHdr returns a write buffer: offset bytes of headroom, the header, the frame.
func withHdr(offset int, h, f []byte) []byte {
	b := make([]byte, offset, offset+len(h)+len(f))
	return append(append(b, h...), f...)
}

// readAll reads until n frames came or 2 s passed.
func readAll(t testing.TB, p *testPort, n int) ([][]byte, []int) {
	t.Helper()
	b, sizes := bufs(n, 70000)
	got := 0
	deadline := time.Now().Add(2 * time.Second)
	for got < n && time.Now().Before(deadline) {
		k, err := p.Read(b[got:], sizes[got:], 0)
		got += k
		if err != nil && err != unix.EAGAIN {
			t.Fatalf("read: %v", err)
		}
	}
	if got != n {
		t.Fatalf("read %d frames, want %d", got, n)
	}
	return b, sizes
}

func mustEqual(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes %x..., want %d bytes %x...", what, len(got), head(got), len(want), head(want))
	}
}

func head(b []byte) []byte { return b[:min(len(b), 24)] }

// pollFd reports whether fd becomes readable within d.
func pollFd(fd int, d time.Duration) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, int(d/time.Millisecond))
	return err == nil && n == 1
}

// mapsLines counts the lines of /proc/self/maps that contain s.
func mapsLines(t testing.TB, s string) int {
	t.Helper()
	n, err := vhostusertest.MapsLines(0, s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// fdCount counts /proc/self/fd entries.
func fdCount(t testing.TB) int {
	t.Helper()
	e, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(e)
}

func isGuestErr(err error) bool { return errors.Is(err, vhostuser.ErrGuest) }

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

// readOne reads at most one frame.
func readOne(p *testPort) (int, error) {
	b, s := bufs(1, 70000)
	return p.Read(b, s, 0)
}

// fdKind counts the process's fds by kind; ported leaves out the kinds
// a front-end does not give.
type fdKind = vhostusertest.Fds

func plus(a, b fdKind) fdKind {
	return fdKind{Eventfds: a.Eventfds + b.Eventfds, Sockets: a.Sockets + b.Sockets, Memfds: a.Memfds + b.Memfds, Other: a.Other + b.Other}
}

func ported(a fdKind) fdKind { a.Other = 0; return a }

func fdKinds(t testing.TB) fdKind {
	t.Helper()
	k, err := vhostusertest.CountFds(0)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// memTable is a SET_MEM_TABLE payload: one region of size bytes at the
// start of the driver's memory.
func memTable(d *vhostusertest.Driver, size uint64) []byte {
	p := binary.NativeEndian.AppendUint32(nil, 1)
	p = binary.NativeEndian.AppendUint32(p, 0)
	p = binary.NativeEndian.AppendUint64(p, d.GPA(0))
	p = binary.NativeEndian.AppendUint64(p, size)
	p = binary.NativeEndian.AppendUint64(p, d.UserAddr(0))
	return binary.NativeEndian.AppendUint64(p, 0)
}
