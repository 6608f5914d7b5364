package vhostuser_test

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// within runs f and fails if it does not return within 5 s; unblock, run
// then, must make it return (so that the test ends instead of hanging).
func within(t *testing.T, what string, f func(), unblock func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		unblock()
		<-done
		t.Fatalf("%s waited on the front-end", what)
	}
}

// Issue 22, item 1: kick, call and error fds are eventfds or the
// front-end is sent away, whatever else it hands: a pipe, a socket, a
// memfd, another kind of anonymous inode.
func TestRingFdsMustBeEventfds(t *testing.T) {
	kinds := map[string]func() (fd int, keep []int){
		"pipe": func() (int, []int) {
			var p [2]int
			unix.Pipe2(p[:], unix.O_CLOEXEC)
			return p[0], p[1:]
		},
		"socket": func() (int, []int) {
			sp, _ := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			return sp[0], sp[1:]
		},
		"anon_inode:[eventpoll]": func() (int, []int) {
			fd, _ := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
			return fd, nil
		},
		"memfd": func() (int, []int) {
			fd, _ := unix.MemfdCreate("not-an-eventfd", unix.MFD_CLOEXEC)
			return fd, nil
		},
	}
	for _, req := range []uint32{vhostusertest.ReqSetVringKick, vhostusertest.ReqSetVringCall, vhostusertest.ReqSetVringErr} {
		for kind, mk := range kinds {
			t.Run(kind, func(t *testing.T) {
				p := newPort(t, vhostuser.Config{})
				d := p.dialStopped(t)
				fd, keep := mk()
				defer closeFds(append(keep, fd))
				if req == vhostusertest.ReqSetVringKick {
					// A kick with the ring set up, which starts it if taken.
					d.SetKickFd(vhostusertest.TX, fd)
					fd = -1
					d.Start()
				} else if err := d.SetVringFd(req, vhostusertest.TX, fd); err != nil {
					t.Fatal(err)
				}
				e := p.wait(t, vhostuser.EventDisconnected)
				if e.Err == nil || !strings.Contains(e.Err.Error(), "not an eventfd") {
					t.Fatalf("request %d with a %s: disconnected with %v, want \"not an eventfd\"", req, kind, e.Err)
				}
			})
		}
	}
}

func closeFds(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// Issue 22, item 1: the front-end put its call and error eventfds in
// blocking mode and filled their counters (a write(2) of them waits until
// they are read, which it never does). Read and Write still return, the
// guest is still notified (the counter stays at the top, readable), a
// guest's rule break is still reported, and the control path
// (GET_VRING_BASE) and Close do not wait behind the data path.
func TestBlockingCallEventfds(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p)
	unblock := func() {
		var b [8]byte
		for i := range 2 {
			unix.SetNonblock(d.CallFd(i), true)
			unix.Read(d.CallFd(i), b[:])
			unix.SetNonblock(d.ErrFd(i), true)
			unix.Read(d.ErrFd(i), b[:])
		}
	}
	for i := range 2 {
		for _, fd := range []int{d.CallFd(i), d.ErrFd(i)} {
			if err := vhostusertest.Fill(fd); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.FillRx()
	d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
	within(t, "Read", func() { readAll(t, p, 1) }, unblock)
	within(t, "Write", func() {
		if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); n != 1 || err != nil {
			t.Errorf("write: %d %v", n, err)
		}
	}, unblock)
	if st := p.Stats(); st.Interrupts != 2 {
		t.Errorf("%d notifications sent, want 2", st.Interrupts)
	}
	for i := range 2 {
		if !pollFd(d.CallFd(i), 0) {
			t.Errorf("ring %d: the call eventfd is not readable", i)
		}
	}
	// A rule break signals the error eventfd, full too.
	d.PushAvail(vhostusertest.TX, 300)
	within(t, "Read of a broken ring", func() {
		if _, err := readOne(p); err != vhostuser.ErrBroken {
			t.Errorf("read: %v, want ErrBroken", err)
		}
	}, unblock)
	within(t, "GET_VRING_BASE", func() {
		if _, err := d.Stop(); err != nil {
			t.Error(err)
		}
	}, unblock)
	within(t, "Close", func() { p.Close() }, unblock)
}

// Issue 22, item 2: a pipe whose write end is closed polls hung up for
// ever. Handed as a kick it is refused, and the port's Fd, once a Read
// consumed what it had, stays quiet (it made the worker spin).
func TestKickHungUp(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dialStopped(t)
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	unix.Close(pipe[1])
	d.SetKickFd(vhostusertest.TX, pipe[0])
	d.Start()
	if e := p.wait(t, vhostuser.EventDisconnected); e.Err == nil || !strings.Contains(e.Err.Error(), "pipe:[") {
		t.Fatalf("disconnected with %v, want the pipe refused", e.Err)
	}
	readOne(p)
	if pollFd(p.Fd(), 100*time.Millisecond) {
		t.Fatal("Fd readable after a Read: a worker polling it spins")
	}
}

// Issue 22, item 2: a kick eventfd that polls in error (its counter at
// the top, where only the front-end can have put it) breaks the port like
// a rule break; its ring is no longer polled, so Fd stays quiet.
func TestKickSaturated(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p)
	if err := vhostusertest.Saturate(d.KickFd(vhostusertest.TX)); err != nil {
		t.Fatal(err)
	}
	if !pollFd(p.Fd(), time.Second) {
		t.Fatal("Fd not readable after the kick")
	}
	if _, err := readOne(p); err != vhostuser.ErrBroken {
		t.Fatalf("read: %v, want ErrBroken", err)
	}
	e := p.wait(t, vhostuser.EventBroken)
	if !isGuestErr(e.Err) || !strings.Contains(e.Err.Error(), "transmit queue 0: kick eventfd is in error") {
		t.Fatalf("broken with %v", e.Err)
	}
	if !d.ErrSignalled(vhostusertest.TX) {
		t.Error("the front-end's error eventfd was not signalled")
	}
	readOne(p)
	if pollFd(p.Fd(), 100*time.Millisecond) {
		t.Fatal("Fd readable after the break was read")
	}
	// The front-end restarts the rings with a new kick: frames flow.
	if _, err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	kick, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	d.SetKickFd(vhostusertest.TX, kick)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, vhostuser.EventRunning)
	d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
	readAll(t, p, 1)
}

// TestHelperHostile is the hostile front-end of TestHostileFrontEnd, in a
// child process; it does nothing in a normal run.
func TestHelperHostile(t *testing.T) { vhostusertest.HostileChild(t, "VHOSTUSER_TEST_HOSTILE") }

// Issue 22, items 1 and 2: a front-end in another process hands a hung-up
// pipe, then a socket, as kick (sent away each time), saturates its kick
// eventfd (the port stops its rings), then runs the rings with call and
// error eventfds a write would wait on for ever. The port goes on: Read
// and Write return, Fd is quiet once drained, and Close ends it all.
func TestHostileFrontEnd(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	cmd, out := vhostusertest.StartHelper(t, "TestHelperHostile", "VHOSTUSER_TEST_HOSTILE="+p.Path())
	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	want := []string{"pipe-kick: sent away", "socket-kick: sent away", "saturated-kick: stopped", "blocking-calls: running"}
	for _, w := range want {
		// Read as a worker would, so that the port sees the kicks.
		deadline := time.After(10 * time.Second)
	wait:
		for {
			select {
			case l := <-lines:
				if l != w {
					t.Fatalf("the hostile front-end says %q, want %q", l, w)
				}
				break wait
			case <-deadline:
				t.Fatalf("no %q from the hostile front-end", w)
			case <-time.After(10 * time.Millisecond):
				readOne(p)
			}
		}
	}
	if st := p.Stats(); st.ProtocolErrors != 2 || st.GuestErrors != 1 {
		t.Errorf("stats %+v, want 2 protocol errors and 1 guest error", st)
	}
	within(t, "Read", func() { readAll(t, p, 4) }, func() { cmd.Process.Kill() })
	within(t, "Write", func() {
		for range 8 {
			if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); n != 1 || err != nil {
				t.Errorf("write: %d %v", n, err)
			}
		}
	}, func() { cmd.Process.Kill() })
	readOne(p)
	if pollFd(p.Fd(), 100*time.Millisecond) {
		t.Error("Fd readable with nothing to do")
	}
	within(t, "Close", func() { p.Close() }, func() { cmd.Process.Kill() })
}
