// Package forwardtest provides stand-ins for the forwarding workers' endpoints, so
// the workers can be tested without a TAP, a NIC or privileges: socketpairs
// behind the real TAP-queue and packet-socket code, the real AF_XDP socket
// code over an in-memory UMEM, and a scripted fake that replays frames, VLAN
// tags and errors; and WaitFor, to wait for what a worker did over them.
package forwardtest

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afpacket"
	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/tap"
)

// socketpair returns a SOCK_SEQPACKET pair with 4 MiB buffers, both ends
// non-blocking; the caller closes them.
func socketpair(t testing.TB) [2]int {
	t.Helper()
	p, err := newSocketpair()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newSocketpair() ([2]int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return [2]int{-1, -1}, err
	}
	for _, fd := range fds {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	return [2]int{fds[0], fds[1]}, nil
}

// Pair is NIC and TAP for code without a test to close them (an
// example): a NIC endpoint and its wire peer, a TAP endpoint and its lab
// peer, as NIC and TAP make them. Close closes all four.
type Pair struct {
	NIC  *afpacket.Socket
	Wire int
	TAP  *tap.Queue
	Lab  int
}

// NewPair makes a Pair whose NIC reads and writes up to batch frames per
// call.
func NewPair(batch int) (*Pair, error) {
	n, err := newSocketpair()
	if err != nil {
		return nil, err
	}
	l, err := newSocketpair()
	if err != nil {
		unix.Close(n[0])
		unix.Close(n[1])
		return nil, err
	}
	return &Pair{NIC: afpacket.NewSocketFd(n[0], batch), Wire: n[1], TAP: tap.NewQueueFd(l[0]), Lab: l[1]}, nil
}

// Close closes both endpoints and both peers.
func (p *Pair) Close() {
	p.NIC.Close()
	unix.Close(p.Wire)
	unix.Close(p.TAP.Fd())
	unix.Close(p.Lab)
}

// NIC returns a NIC endpoint that is ring's packet-socket code (recvmmsg,
// sendmmsg) over one end of a socketpair, and the other end: what the wire
// writes to and reads from, every frame with a virtio-net header in front.
// Both are closed when t ends.
func NIC(t testing.TB, batch int) (*afpacket.Socket, int) {
	p := socketpair(t)
	s := afpacket.NewSocketFd(p[0], batch)
	t.Cleanup(func() {
		s.Close()
		unix.Close(p[1])
	})
	return s, p[1]
}

// XDP returns a NIC endpoint that is afxdp's socket code (Read and Write:
// the descriptor checks, the vnet header it builds, segmentation into the
// UMEM) over an in-memory UMEM of the daemon's sizes, multi-buffer on, and
// the afxdp.MemKernel that plays the kernel and the wire: Deliver puts a
// frame (no vnet header: the wire has none) on the RX ring, Complete or
// Transmit takes the TX ring. No system call is made on either side.
func XDP() (*afxdp.Socket, *afxdp.MemKernel) {
	return afxdp.NewMemSocket(afxdp.DefaultFrames, afxdp.DefaultChunkSize, true)
}

// TAP returns a TAP endpoint that is tap's queue code over one end of a
// socketpair, and the other end: what the lab side writes to and reads
// from (with a virtio-net header in front when the forwarder is told the
// TAP has one). Both are closed when t ends.
func TAP(t testing.TB) (*tap.Queue, int) {
	p := socketpair(t)
	t.Cleanup(func() {
		unix.Close(p[0])
		unix.Close(p[1])
	})
	return tap.NewQueueFd(p[0]), p[1]
}

// URingTAP is TAP with the queue's I/O batched through io_uring
// (tap.URingQueue, up to batch frames per io_uring_enter). Use it from one
// goroutine locked to its OS thread.
func URingTAP(t testing.TB, batch int) (*tap.URingQueue, int) {
	p := socketpair(t)
	q, err := tap.NewURingQueue(p[0], batch)
	if err != nil {
		t.Fatalf("io_uring on a socketpair: %v", err)
	}
	t.Cleanup(func() {
		q.Close()
		unix.Close(p[0])
		unix.Close(p[1])
	})
	return q, p[1]
}
