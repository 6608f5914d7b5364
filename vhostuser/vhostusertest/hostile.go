package vhostusertest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser/internal/eventfd"
)

// Attack is one way a hostile front-end abuses the fds it hands a port.
type Attack int

const (
	// PipeKick hands the read end of a pipe whose write end is closed
	// (it polls hung up for ever) as the transmit ring's kick.
	PipeKick Attack = iota + 1
	// SocketKick hands a unix socket as the transmit ring's kick: in
	// blocking mode, with SO_RCVLOWAT 8 and one byte waiting, so that it
	// polls readable and a read of it waits.
	SocketKick
	// SaturatedKick drives the transmit ring's kick eventfd to the top of
	// its counter, where it polls in error.
	SaturatedKick
	// BlockingCalls puts every call and error eventfd in blocking mode
	// with its counter at 0xfffffffffffffffe, where a write(2) of it waits
	// until someone reads it (the front-end never does); the rings run,
	// the guest posts its receive buffers and sends four frames.
	BlockingCalls
)

var attackNames = [...]string{"", "pipe-kick", "socket-kick", "saturated-kick", "blocking-calls"}

func (a Attack) String() string {
	if a > 0 && int(a) < len(attackNames) {
		return attackNames[a]
	}
	return fmt.Sprintf("attack %d", int(a))
}

// Hostile plays a front-end that makes the given attacks on the port at
// path, in order, each on a connection of its own (as QEMU reconnects),
// and writes a line for each to out as it ends: "ATTACK: sent away" when
// the port closed the connection, "ATTACK: stopped" when it reported the
// rings broken on their error eventfd, else "ATTACK: running". The last
// attack's connection stays until ctx is done. A test runs it in a process
// of its own (its test binary again, in a helper mode), so that the
// attacker shares nothing with the forwarder but the socket and the fds.
func Hostile(ctx context.Context, path string, out io.Writer, attacks ...Attack) error {
	for i, a := range attacks {
		d, outcome, err := a.run(path)
		if err != nil {
			return fmt.Errorf("vhostusertest: %v: %w", a, err)
		}
		if _, err := fmt.Fprintf(out, "%v: %s\n", a, outcome); err != nil {
			d.Close()
			return err
		}
		if i == len(attacks)-1 {
			<-ctx.Done()
		}
		d.Close()
	}
	return nil
}

func (a Attack) run(path string) (*Driver, string, error) {
	switch a {
	case PipeKick, SocketKick:
		return badKick(path, a)
	case SaturatedKick:
		d, err := redial(path, Config{})
		if err != nil {
			return nil, "", err
		}
		if err := Saturate(d.KickFd(TX)); err != nil {
			d.Close()
			return nil, "", err
		}
		if waitReadable(d.ErrFd(TX), 5*time.Second) {
			return d, "stopped", nil
		}
		return d, "running", nil
	case BlockingCalls:
		return blockingCalls(path)
	}
	return nil, "", fmt.Errorf("unknown attack %d", int(a))
}

// redial connects as QEMU's reconnect does: a port still releasing the
// last connection turns a new one away for a moment.
func redial(path string, c Config) (*Driver, error) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d, err := Dial(path, c)
		if err == nil || time.Now().After(deadline) {
			return d, err
		}
	}
}

// badKick starts the rings with a kick that is no eventfd and reports
// whether the port sent the front-end away.
func badKick(path string, a Attack) (*Driver, string, error) {
	d, err := redial(path, Config{NoStart: true})
	if err != nil {
		return nil, "", err
	}
	fd, keep, err := kickOf(a)
	if err != nil {
		d.Close()
		return nil, "", err
	}
	defer closeAll(keep)
	d.SetKickFd(TX, fd)
	if err := d.Start(); err == nil {
		return d, "running", nil
	}
	// The port closes at the kick; what the driver sent after it may or
	// may not have been written.
	_ = d.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := d.conn.Read(make([]byte, 1)); errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) {
		return d, "sent away", nil
	}
	return d, "running", nil
}

// kickOf makes the fd an attack hands as kick, and the fds to keep open
// while it lasts.
func kickOf(a Attack) (int, []int, error) {
	var p [2]int
	if a == PipeKick {
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return -1, nil, os.NewSyscallError("pipe2", err)
		}
		_ = unix.Close(p[1])
		return p[0], nil, nil
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, os.NewSyscallError("socketpair", err)
	}
	if err := unix.SetsockoptInt(sp[0], unix.SOL_SOCKET, unix.SO_RCVLOWAT, 8); err != nil {
		closeAll(sp[:])
		return -1, nil, os.NewSyscallError("setsockopt", err)
	}
	if _, err := unix.Write(sp[1], []byte{1}); err != nil {
		closeAll(sp[:])
		return -1, nil, os.NewSyscallError("write", err)
	}
	return sp[0], sp[1:], nil
}

// blockingCalls sets the rings up, then turns every call and error
// eventfd into one a write(2) waits on, and has the guest post its
// receive buffers, send four frames and then a 4-byte chain, shorter than
// its virtio-net header.
func blockingCalls(path string) (*Driver, string, error) {
	d, err := redial(path, Config{})
	if err != nil {
		return nil, "", err
	}
	for i := range 2 {
		for _, fd := range []int{d.CallFd(i), d.ErrFd(i)} {
			if err := Fill(fd); err != nil {
				d.Close()
				return nil, "", err
			}
		}
	}
	d.FillRx()
	f := make([]byte, 60)
	copy(f, []byte{0x02, 0xba, 0xd0, 0, 0, 2, 0x02, 0xba, 0xd0, 0, 0, 1, 0x88, 0xb5})
	for range 4 {
		if err := d.Send(make([]byte, 10), f, Flat); err != nil {
			d.Close()
			return nil, "", err
		}
	}
	if err := d.Pair(0).SendRunt(4); err != nil {
		d.Close()
		return nil, "", err
	}
	return d, "running", nil
}

// Fill puts eventfd fd in blocking mode with its counter at
// 0xfffffffffffffffe: a write(2) of it then waits until it is read.
func Fill(fd int) error {
	if err := unix.SetNonblock(fd, true); err != nil {
		return os.NewSyscallError("fcntl", err)
	}
	var b [8]byte
	_, _ = unix.Read(fd, b[:])
	if err := unix.SetNonblock(fd, false); err != nil {
		return os.NewSyscallError("fcntl", err)
	}
	binary.NativeEndian.PutUint64(b[:], 0xfffffffffffffffe)
	if _, err := unix.Write(fd, b[:]); err != nil {
		return os.NewSyscallError("write", err)
	}
	return nil
}

var signaller = sync.OnceValues(eventfd.NewSignaller)

// Saturate drives eventfd fd to the top of its counter, 2^64-1, which
// write(2) cannot reach and the kernel's signalling can: the eventfd then
// polls in error.
func Saturate(fd int) error {
	s, err := signaller()
	if err != nil {
		return err
	}
	if err := Fill(fd); err != nil {
		return err
	}
	return s.Signal(fd)
}

func waitReadable(fd int, d time.Duration) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, int(d/time.Millisecond))
	return err == nil && n == 1
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
