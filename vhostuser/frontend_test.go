package vhostuser_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// A front-end that breaks the protocol is sent away with the reason; the
// port serves the next one.
func TestFrontEndBreaksProtocol(t *testing.T) {
	const v = vhostusertest.FlagVersion
	cases := []struct {
		name string
		want string
		send func(d *vhostusertest.Driver) error
	}{
		{"version 2", "version 2", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetOwner, 2, nil)
		}},
		{"reply flag on a request", "reply flag", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetOwner, v|vhostusertest.FlagReply, nil)
		}},
		{"unknown flag", "unknown header flags", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetOwner, v|0x100, nil)
		}},
		{"unknown request", "request 99: not supported", func(d *vhostusertest.Driver) error {
			return d.Request(99, v, nil)
		}},
		{"log base, not offered", "SET_LOG_BASE: not supported", func(d *vhostusertest.Driver) error {
			return d.Request(6, v, u64(0))
		}},
		{"payload too large", "at most 264", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetFeatures, v, make([]byte, 1000))
		}},
		{"short payload", "want 8", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetFeatures, v, make([]byte, 4))
		}},
		{"feature not offered", "not offered", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetFeatures, v, u64(1<<63))
		}},
		{"queue size not a power of two", "power of two", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetVringNum, v, state(0, 100))
		}},
		{"queue size too big", "power of two", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetVringNum, v, state(1, 65536))
		}},
		{"ring index no request can name", "ring 256, at most 255", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetVringNum, v, state(256, 256))
		}},
		{"unknown bits with a kick", "unknown bits", func(d *vhostusertest.Driver) error {
			return withEventfd(func(fd int) error { return d.Request(vhostusertest.ReqSetVringKick, v, u64(1<<9), fd) })
		}},
		{"memfd as kick", "/memfd:vhostusertest (deleted), not an eventfd", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetVringKick, v, u64(0), d.Memfd())
		}},
		{"kick without fd", "0 file descriptors, want 1", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetVringKick, v, u64(0))
		}},
		{"fd with a request that takes none", "1 file descriptors, want 0", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetOwner, v, nil, d.Memfd())
		}},
		{"nine fds", "more than 8", func(d *vhostusertest.Driver) error {
			fd := d.Memfd()
			return d.Request(vhostusertest.ReqSetMemTable, v, memTable(d, 4096), fd, fd, fd, fd, fd, fd, fd, fd, fd)
		}},
		{"memory table without fds", "0 file descriptors, want 1", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetMemTable, v, memTable(d, 4096))
		}},
		{"region larger than its file", "the region ends at", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetMemTable, v, memTable(d, 1<<40), d.Memfd())
		}},
		{"region that wraps", "wrapping", func(d *vhostusertest.Driver) error {
			p := memTable(d, 1<<63)
			binary.NativeEndian.PutUint64(p[8:], ^uint64(0)-100)
			return d.Request(vhostusertest.ReqSetMemTable, v, p, d.Memfd())
		}},
		{"region fd not a file", "not a regular file", func(d *vhostusertest.Driver) error {
			f, err := d.Conn().File()
			if err != nil {
				return err
			}
			defer f.Close()
			return d.Request(vhostusertest.ReqSetMemTable, v, memTable(d, 4096), int(f.Fd()))
		}},
		{"kick before the ring is set up", "ring not set up", func(d *vhostusertest.Driver) error {
			return withEventfd(func(fd int) error { return d.SetVringFd(vhostusertest.ReqSetVringKick, 0, fd) })
		}},
		{"ring outside memory", "not inside one memory region", func(d *vhostusertest.Driver) error {
			if err := d.Request(vhostusertest.ReqSetMemTable, v, memTable(d, 65536), d.Memfd()); err != nil {
				return err
			}
			if err := d.Request(vhostusertest.ReqSetVringNum, v, state(0, 256)); err != nil {
				return err
			}
			a := binary.NativeEndian.AppendUint64(state(0, 0), d.UserAddr(1<<20))
			a = binary.NativeEndian.AppendUint64(a, d.UserAddr(8192))
			a = binary.NativeEndian.AppendUint64(a, d.UserAddr(4096))
			a = binary.NativeEndian.AppendUint64(a, 0)
			if err := d.Request(vhostusertest.ReqSetVringAddr, v, a); err != nil {
				return err
			}
			return withEventfd(func(fd int) error { return d.SetVringFd(vhostusertest.ReqSetVringKick, 0, fd) })
		}},
		{"misaligned ring", "misaligned", func(d *vhostusertest.Driver) error {
			a := binary.NativeEndian.AppendUint64(state(0, 0), d.UserAddr(8))
			a = binary.NativeEndian.AppendUint64(a, d.UserAddr(8192))
			a = binary.NativeEndian.AppendUint64(a, d.UserAddr(4096))
			return d.Request(vhostusertest.ReqSetVringAddr, v, binary.NativeEndian.AppendUint64(a, 0))
		}},
		{"dirty logging", "dirty logging", func(d *vhostusertest.Driver) error {
			a := binary.NativeEndian.AppendUint64(state(0, 1), d.UserAddr(0))
			a = binary.NativeEndian.AppendUint64(a, d.UserAddr(8192))
			a = binary.NativeEndian.AppendUint64(a, d.UserAddr(4096))
			return d.Request(vhostusertest.ReqSetVringAddr, v, binary.NativeEndian.AppendUint64(a, 0))
		}},
		{"base beyond 16 bits", "16-bit", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetVringBase, v, state(0, 0x10000))
		}},
		{"enable 2", "enable value", func(d *vhostusertest.Driver) error {
			return d.Request(vhostusertest.ReqSetVringEnable, v, state(0, 2))
		}},
		{"half a header, then gone", "unexpected EOF", func(d *vhostusertest.Driver) error {
			_, err := d.Conn().Write([]byte{1, 0, 0, 0, 1})
			d.Conn().CloseWrite()
			return err
		}},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			p := newPort(t, vhostuser.Config{})
			fds := fdCount(t)
			d := p.dialStopped(t)
			if err := c.send(d); err != nil {
				t.Fatal(err)
			}
			e := p.wait(t, vhostuser.EventDisconnected)
			if e.Err == nil || !strings.Contains(e.Err.Error(), c.want) {
				t.Fatalf("disconnected with %v, want an error saying %q", e.Err, c.want)
			}
			if strings.Contains(c.name, "gone") == errors.Is(e.Err, vhostuser.ErrProtocol) {
				t.Errorf("ErrProtocol %v for %v", errors.Is(e.Err, vhostuser.ErrProtocol), e.Err)
			}
			d.Close()
			waitFds(t, fds)
			if n := mapsLines(t, "memfd:vhostusertest"); n != 0 {
				t.Errorf("%d memfd mappings left", n)
			}
			// The port serves the next front-end.
			d2 := p.dial(t, vhostusertest.Config{})
			d2.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
			readAll(t, p, 1)
		})
	}
}

// withEventfd runs f with an eventfd it closes after.
func withEventfd(f func(fd int) error) error {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd)
}

// waitFds waits until the process has n fds again (the port releases a
// front-end's on its own goroutine).
func waitFds(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for fdCount(t) != n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := fdCount(t); got != n {
		t.Fatalf("%d fds, want %d", got, n)
	}
}

// A front-end that goes away leaves no mapping and no fd behind. The
// memory table is mapped once however often it is sent.
func TestDisconnectReleases(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	maps0, fds0, kinds0 := mapsLines(t, "memfd:vhostusertest"), fdCount(t), fdKinds(t)
	d := p.dial(t, vhostusertest.Config{})
	d.FillRx()
	d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
	readAll(t, p, 1)
	// The driver's own mapping and fds (memfd, socket, six eventfds) and
	// the port's: one mapping, the connection and six eventfds (each
	// ring's kick, call and error); the port closed the memfd it mapped.
	maps1, kinds1 := mapsLines(t, "memfd:vhostusertest"), fdKinds(t)
	if maps1 != maps0+2 || kinds1 != plus(kinds0, fdKind{Eventfds: 12, Sockets: 2, Memfds: 1}) {
		t.Fatalf("connected: %d memfd mappings (from %d), fds %+v (from %+v)", maps1, maps0, kinds1, kinds0)
	}
	for range 3 {
		if err := d.SendMemTable(); err != nil {
			t.Fatal(err)
		}
	}
	if n := mapsLines(t, "memfd:vhostusertest"); n != maps1 {
		t.Fatalf("%d memfd mappings after sending the table again, want %d", n, maps1)
	}
	if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); n != 1 || err != nil {
		t.Fatalf("write on the new table: %d %v", n, err)
	}
	d.Close()
	p.wait(t, vhostuser.EventDisconnected)
	if maps, fds := mapsLines(t, "memfd:vhostusertest"), fdCount(t); maps != maps0 || fds != fds0 {
		t.Fatalf("after disconnect: %d memfd mappings (want %d), %d fds (want %d)", maps, maps0, fds, fds0)
	}
}

// TestHelperFrontEnd is a front-end in a child process, for
// TestFrontEndKilled; it does nothing in a normal run.
func TestHelperFrontEnd(t *testing.T) {
	path := os.Getenv("VHOSTUSER_TEST_FRONTEND")
	if path == "" {
		t.Skip("runs only as TestFrontEndKilled's child")
	}
	d, err := vhostusertest.Dial(path, vhostusertest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.FillRx()
	os.Stdout.WriteString("ready\n")
	time.Sleep(time.Minute)
}

// A front-end killed with SIGKILL leaves no mapping and no fd in the port.
func TestFrontEndKilled(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	maps0, fds0, kinds0 := mapsLines(t, "memfd:vhostusertest"), fdCount(t), fdKinds(t)
	cmd, out := vhostusertest.StartHelper(t, "TestHelperFrontEnd", "VHOSTUSER_TEST_FRONTEND="+p.Path())
	p.wait(t, vhostuser.EventRunning)
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("child: %q %v", line, err)
	}
	if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); n != 1 || err != nil {
		t.Fatalf("write to the child's guest: %d %v", n, err)
	}
	// Another process's: the port's connection and six eventfds (exec's
	// pipe and pidfd are "other").
	if maps, kinds := mapsLines(t, "memfd:vhostusertest"), fdKinds(t); maps != maps0+1 ||
		ported(kinds) != ported(plus(kinds0, fdKind{Eventfds: 6, Sockets: 1})) {
		t.Fatalf("connected: %d memfd mappings, fds %+v (from %d, %+v)", maps, kinds, maps0, kinds0)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	e := p.wait(t, vhostuser.EventDisconnected)
	t.Logf("disconnected: %v", e.Err)
	if maps, fds := mapsLines(t, "memfd:vhostusertest"), fdCount(t); maps != maps0 || fds != fds0 {
		t.Fatalf("after SIGKILL: %d memfd mappings (want %d), %d fds (want %d)", maps, maps0, fds, fds0)
	}
	if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); n != 0 || err != unix.ENETDOWN {
		t.Fatalf("write with the front-end gone: %d %v", n, err)
	}
}

// The socket gets the mode and owner asked for; a stale socket is
// replaced, any other file refused; Close removes it.
func TestSocketFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vm.sock")
	old, err := vhostuser.Listen(vhostuser.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	// A crashed run leaves its socket: take the path over.
	owner := vhostuser.Owner{UID: 4242, GID: 4343}
	if os.Geteuid() != 0 {
		// giving a file to another user takes root (CAP_CHOWN)
		owner = vhostuser.Owner{UID: os.Getuid(), GID: os.Getgid()}
	}
	p, err := vhostuser.Listen(vhostuser.Config{Path: path, Mode: 0o660, Owner: &owner})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o660 || int(st.Uid) != owner.UID || int(st.Gid) != owner.GID || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		t.Fatalf("mode %#o uid %d gid %d", st.Mode, st.Uid, st.Gid)
	}
	old.Close() // not its socket any more: it must leave it
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the old port removed the new socket: %v", err)
	}
	d, err := vhostusertest.Dial(path, vhostusertest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	p.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files left: %v", entries)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	if _, err := vhostuser.Listen(vhostuser.Config{Path: file}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("listen over a file: %v", err)
	}
	if _, err := vhostuser.Listen(vhostuser.Config{Path: filepath.Join(dir, strings.Repeat("x", 100))}); err == nil {
		t.Fatal("a socket path longer than sun_path")
	}
}
