package uring

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/napi"
)

// loNAPI is a NAPI id the kernel takes: any id past the CPU ids (sender
// CPU numbers below MIN_NAPI_ID are refused) names a NAPI to poll; one
// that exists nowhere is polled as nothing.
var loNAPI = NAPI{IDs: []uint32{1 << 30}, BusyPoll: 50 * time.Microsecond}

func newPollerT(t *testing.T, n NAPI) *Poller {
	t.Helper()
	p, err := NewPoller(n)
	if err != nil {
		t.Fatalf("NewPoller: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPollerWait: Wait reports what ppoll would, times out with nothing,
// reports an fd still readable again, and refuses more fds than it
// watches.
func TestPollerWait(t *testing.T) {
	lockThread(t)
	p := newPollerT(t, loNAPI)
	s := seqpacket(t)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	pfd := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}, {Fd: int32(s[1]), Events: unix.POLLIN}}
	ts := unix.NsecToTimespec(int64(20 * time.Millisecond))
	start := time.Now()
	if err := p.Wait(pfd, &ts); err != nil || pfd[0].Revents != 0 || pfd[1].Revents != 0 {
		t.Fatalf("Wait on idle fds: %v, revents %#x %#x; want a timeout with none", err, pfd[0].Revents, pfd[1].Revents)
	}
	if d := time.Since(start); d < 15*time.Millisecond {
		t.Errorf("Wait with a 20 ms timeout returned after %v", d)
	}
	unix.Write(s[0], []byte("x"))
	for i := 0; i < 2; i++ { // not read: still readable the second time
		if err := p.Wait(pfd, nil); err != nil || pfd[1].Revents&unix.POLLIN == 0 || pfd[0].Revents != 0 {
			t.Fatalf("Wait %d with a message queued: %v, revents %#x %#x", i, err, pfd[0].Revents, pfd[1].Revents)
		}
	}
	unix.Read(s[1], make([]byte, 8))
	unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	if err := p.Wait(pfd, nil); err != nil || pfd[0].Revents&unix.POLLIN == 0 {
		t.Fatalf("Wait with the eventfd set: %v, revents %#x %#x", err, pfd[0].Revents, pfd[1].Revents)
	}
	// The socket's poll is still armed from before; a different event
	// set is a watch of its own.
	out := []unix.PollFd{{Fd: int32(s[1]), Events: unix.POLLOUT}}
	if err := p.Wait(out, nil); err != nil || out[0].Revents&unix.POLLOUT == 0 {
		t.Fatalf("Wait for POLLOUT: %v, revents %#x", err, out[0].Revents)
	}
	many := make([]unix.PollFd, pollerEntries+1)
	for i := range many {
		many[i] = unix.PollFd{Fd: int32(efd), Events: int16(1 << i)}
	}
	if err := p.Wait(many, &ts); err != unix.EINVAL {
		t.Errorf("Wait on %d watches: %v, want EINVAL", len(many), err)
	}
}

// TestPollerOneThread: the thread of the first Wait is the Poller's.
func TestPollerOneThread(t *testing.T) {
	lockThread(t)
	p := newPollerT(t, loNAPI)
	ts := unix.NsecToTimespec(int64(time.Millisecond))
	if err := p.Spin(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() {
		runtime.LockOSThread() // ends with the goroutine
		errc <- p.Wait([]unix.PollFd{{Fd: 0, Events: unix.POLLIN}}, &ts)
	}()
	if err := <-errc; err != unix.EEXIST {
		t.Errorf("Wait from another thread: %v, want EEXIST", err)
	}
}

// TestPollerRefuses: what NewPoller refuses, and that an id the kernel
// does not take says ErrUnavailable.
func TestPollerRefuses(t *testing.T) {
	for _, n := range []NAPI{{BusyPoll: time.Millisecond}, {IDs: []uint32{1 << 30}}} {
		if p, err := NewPoller(n); err == nil {
			p.Close()
			t.Errorf("NewPoller(%+v) took it", n)
		}
	}
	_, err := NewPoller(NAPI{IDs: []uint32{1}, BusyPoll: time.Millisecond})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("NewPoller with NAPI id 1 (a CPU's number, not a NAPI's): %v, want ErrUnavailable", err)
	}
}

// TestPollerBusyPolls: the kernel polls a veth's NAPI from the Poller's
// Wait: BusyPollRxPackets counts the datagrams a busy poll received, and
// none without the Poller. The veth has a NAPI, and the peer's datagrams
// go through it, while an XDP program is attached (afxdp's, with no
// socket: every frame passes up the stack).
func TestPollerBusyPolls(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := bed.LabAddr.Addr() // the lab's address, on the veth (no lab here)
	if _, err := bed.Run(ctx, bed.FwdNS, "ip", "addr", "add", bed.LabAddr.String(), "dev", bed.NIC); err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	var sock int
	ifindex := kernel.Link(t, bed.FwdNS, bed.NIC).Index
	err := bed.Do(bed.FwdNS, func() error {
		c, err := napi.Dial()
		if err != nil {
			return err
		}
		defer c.Close()
		prog, err := afxdp.LoadProgram(ifindex, 1, afxdp.ModeNative, false)
		if err != nil {
			return err
		}
		t.Cleanup(func() { prog.Close() })
		list, err := c.List(ifindex)
		if err != nil {
			return err
		}
		for _, n := range list {
			ids = append(ids, n.ID)
		}
		if sock, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		return unix.Bind(sock, &unix.SockaddrInet4{Port: 9000, Addr: addr.As4()})
	})
	if err != nil || len(ids) == 0 {
		t.Fatalf("the veth's NAPI: %v %v", ids, err)
	}
	defer unix.Close(sock)
	for _, withPoller := range []bool{false, true} {
		got := busyPolled(t, bed, sock, addr, ids, withPoller)
		switch {
		case withPoller && got == 0:
			t.Errorf("with a Poller on NAPI %v: no datagram came in by busy poll", ids)
		case !withPoller && got != 0:
			t.Errorf("with ppoll: %d datagrams came in by busy poll", got)
		}
		t.Logf("poller %v: BusyPollRxPackets +%d of 200", withPoller, got)
	}
}

// busyPolled sends 200 datagrams from the wire to sock one at a time,
// each after the receiver went back to waiting, and returns how many the
// fwd namespace counted as received by busy polling.
func busyPolled(t *testing.T, bed *testbed.Bed, sock int, addr netip.Addr, ids []uint32, withPoller bool) int64 {
	got := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		pinThread(1)
		var p *Poller
		if withPoller {
			var err error
			if p, err = NewPoller(NAPI{IDs: ids, BusyPoll: 50 * time.Millisecond, Prefer: true}); err != nil {
				done <- err
				return
			}
			defer p.Close()
		}
		buf := make([]byte, 64)
		pfd := []unix.PollFd{{Fd: int32(sock), Events: unix.POLLIN}}
		for n := 0; n < 200; {
			if _, err := unix.Read(sock, buf); err == nil {
				n++
				got <- struct{}{}
				continue
			}
			ts := unix.NsecToTimespec(int64(time.Second))
			var err error
			if p != nil {
				err = p.Wait(pfd, &ts)
			} else {
				_, err = unix.Ppoll(pfd, &ts, nil)
			}
			if err != nil && err != unix.EINTR {
				done <- err
				return
			}
		}
		done <- nil
	}()
	before := busyPollRx(t, bed)
	err := bed.Do(bed.WireNS, func() error {
		var old unix.CPUSet
		unix.SchedGetaffinity(0, &old)
		defer unix.SchedSetaffinity(0, &old)
		pinThread(0)
		s, err := net.Dial("udp", netip.AddrPortFrom(addr, 9000).String())
		if err != nil {
			return err
		}
		defer s.Close()
		for i := 0; i < 200; i++ {
			time.Sleep(time.Millisecond) // the receiver is back in its wait
			if _, err := s.Write([]byte("ping")); err != nil {
				return err
			}
			select {
			case <-got:
			case <-time.After(2 * time.Second):
				return errors.New("a datagram did not arrive")
			}
		}
		return nil
	})
	if err == nil {
		err = <-done
	}
	if err != nil {
		t.Fatal(err)
	}
	return busyPollRx(t, bed) - before
}

// pinThread locks the goroutine to its thread and the thread to the
// n-th CPU this process may use (the receiver and the sender of a busy
// poll test on CPUs of their own).
func pinThread(n int) {
	runtime.LockOSThread()
	var set, one unix.CPUSet
	unix.SchedGetaffinity(0, &set)
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			if n == 0 {
				one.Set(c)
				unix.SchedSetaffinity(0, &one)
				return
			}
			n--
		}
	}
}

func busyPollRx(t *testing.T, bed *testbed.Bed) int64 {
	var n int64
	err := bed.Do(bed.FwdNS, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/netstat")
		if err == nil {
			n, err = procfs.ParseSNMP(string(b)).Counter("TcpExt", "BusyPollRxPackets")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
