package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/ring"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// Config tunes the workers.
type Config struct {
	// Batch is the most frames a worker moves per direction per wake-up;
	// 0 means 64.
	Batch int
	// CPUs[i] is the CPU queue i is pinned to; a negative entry (or a
	// missing one) leaves that queue unpinned.
	CPUs []int
	// TAPVnetHdr says the TAP fds carry a virtio_net_hdr.
	TAPVnetHdr bool
	// MTU of the TAP, which sizes segmented frames; 0 means 1500.
	MTU int
	// Logger gets link events, logged once per change; nil discards.
	Logger *slog.Logger
	// Busy makes each worker spin on non-blocking reads of both fds
	// instead of sleeping in ppoll: lower latency for a whole CPU per
	// queue. Neither fd has kernel busy polling (a packet socket carries no
	// NAPI id, a TUN fd none at all), so this is tapfwd's own spinning.
	Busy bool
	// GRO coalesces consecutive TCP segments of a flow received from the
	// NIC into one GSO frame before writing them to the TAP (needs
	// TAPVnetHdr; vnethdr.GRO).
	GRO bool
	// UDPGRO lets GRO also merge same-size UDP datagrams of a flow into one
	// USO frame; only when the TAP took the USO offloads (Linux 6.2+, which
	// also accepts USO writes), else such a write is refused.
	UDPGRO bool
	// StrictMAC, when set, drops frames from the TAP whose source address
	// is not this one (DropSpoofed).
	StrictMAC net.HardwareAddr
}

const (
	// headroom before each frame: room for the vnet header plus an 802.1Q
	// tag put back in place, rounded up.
	headroom = 32
	// frameCap holds a 64 KiB GSO super-frame with Ethernet and VLAN
	// headers (the IP length field caps it at 65535).
	frameCap = 65536 + 64
	hdrLen   = vnethdr.Len
)

// Forwarder owns the workers of one TAP and one NIC.
type Forwarder struct {
	queues []*Queue
	stopFd int
	stop   *atomic.Bool
	log    *slog.Logger
	// Link state shared by the queues, so each change is logged once.
	nicDown, tapDown atomic.Bool
}

// Queue is one worker: a TAP fd and a packet socket.
type Queue struct {
	ID  int
	CPU int // -1 when not pinned
	C   Counters

	tapFd   int
	sock    *ring.Socket
	stopFd  int
	batch   int
	tapVnet bool
	busy    bool
	stop    *atomic.Bool
	fw      *Forwarder
	strict  bool
	mac     [6]byte
	// kernel stats of sockets replaced by Reattach
	kpackets, kdrops uint64

	nicBufs  [][]byte
	nicMeta  []ring.Meta
	frames   []vnethdr.Frame // the batch being forwarded NIC -> TAP
	gro      *vnethdr.GRO
	tapBufs  [][]byte
	txFrames [][]byte
	segBufs  [][]byte
	segSizes []int
	pfd      [3]unix.PollFd
	tally    tally
}

// New prepares one worker per (TAP fd, socket) pair. It does not start them.
func New(tapFds []int, socks []*ring.Socket, c Config) (*Forwarder, error) {
	if len(tapFds) != len(socks) || len(tapFds) == 0 {
		return nil, fmt.Errorf("forward: %d TAP queues but %d sockets", len(tapFds), len(socks))
	}
	if c.Batch <= 0 {
		c.Batch = 64
	}
	if c.MTU <= 0 {
		c.MTU = 1500
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("forward: eventfd: %w", os.NewSyscallError("eventfd", err))
	}
	if c.StrictMAC != nil && len(c.StrictMAC) != 6 {
		unix.Close(efd)
		return nil, fmt.Errorf("forward: strict MAC %s is not an Ethernet address", c.StrictMAC)
	}
	f := &Forwarder{stopFd: efd, stop: new(atomic.Bool), log: c.Logger}
	for i := range tapFds {
		cpu := -1
		if i < len(c.CPUs) {
			cpu = c.CPUs[i]
		}
		q := newQueue(i, cpu, tapFds[i], socks[i], efd, f.stop, c)
		q.fw = f
		if c.StrictMAC != nil {
			q.strict = true
			copy(q.mac[:], c.StrictMAC)
		}
		f.queues = append(f.queues, q)
	}
	return f, nil
}

func newQueue(id, cpu, tapFd int, sock *ring.Socket, stopFd int, stop *atomic.Bool, c Config) *Queue {
	q := &Queue{
		ID: id, CPU: cpu, tapFd: tapFd, sock: sock, stopFd: stopFd,
		batch: c.Batch, tapVnet: c.TAPVnetHdr, busy: c.Busy, stop: stop,
	}
	q.nicBufs = makeBufs(c.Batch, headroom+frameCap)
	q.nicMeta = make([]ring.Meta, c.Batch)
	q.frames = make([]vnethdr.Frame, 0, c.Batch)
	if c.GRO && c.TAPVnetHdr {
		q.gro = vnethdr.NewGRO(c.Batch)
		q.gro.SetUDP(c.UDPGRO)
	}
	q.tapBufs = makeBufs(c.Batch, headroom+frameCap)
	q.txFrames = make([][]byte, c.Batch)
	if !c.TAPVnetHdr {
		// A 64 KiB super-frame with the smallest MSS Linux uses (TCP_MIN_MSS
		// is 88) would need ~745 segments; 512 covers every MSS >= 128.
		// Larger counts are dropped as DropSegment.
		seg := c.MTU + 14 + 4
		q.segBufs = makeBufs(512, seg)
		q.segSizes = make([]int, 512)
	}
	q.pfd[0] = unix.PollFd{Fd: int32(stopFd), Events: unix.POLLIN}
	q.pfd[1] = unix.PollFd{Fd: int32(sock.Fd()), Events: unix.POLLIN}
	q.pfd[2] = unix.PollFd{Fd: int32(tapFd), Events: unix.POLLIN}
	return q
}

// makeBufs carves n buffers of size bytes out of one allocation.
func makeBufs(n, size int) [][]byte {
	all := make([]byte, n*size)
	b := make([][]byte, n)
	for i := range b {
		b[i] = all[i*size : (i+1)*size : (i+1)*size]
	}
	return b
}

// Queues returns the workers, for reading counters.
func (f *Forwarder) Queues() []*Queue { return f.queues }

// Run starts every worker and blocks until ctx is done or a worker fails;
// then it stops them all and returns the first failure (nil after ctx).
//
// Run may be called again after it returned (after Reattach, say).
func (f *Forwarder) Run(ctx context.Context) error {
	// Clear a stop request left by the previous Run.
	var drain [8]byte
	unix.Read(f.stopFd, drain[:])
	f.stop.Store(false)
	var wg sync.WaitGroup
	errc := make(chan error, len(f.queues))
	for _, q := range f.queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.run(); err != nil {
				errc <- fmt.Errorf("queue %d: %w", q.ID, err)
			}
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	f.stop.Store(true)
	var one = [8]byte{1}
	unix.Write(f.stopFd, one[:])
	wg.Wait()
	return err
}

// Reattach gives the queues new packet sockets, one each (after the NIC
// came back, say). Call it only while Run is not running.
func (f *Forwarder) Reattach(socks []*ring.Socket) error {
	if len(socks) != len(f.queues) {
		return fmt.Errorf("forward: %d sockets for %d queues", len(socks), len(f.queues))
	}
	for i, q := range f.queues {
		if p, d, err := q.sock.Stats(); err == nil {
			q.kpackets, q.kdrops = q.kpackets+p, q.kdrops+d
		}
		q.sock = socks[i]
		q.pfd[1].Fd = int32(socks[i].Fd())
	}
	return nil
}

// Close releases the stop eventfd. The TAP fds and sockets stay the
// caller's.
func (f *Forwarder) Close() error { return unix.Close(f.stopFd) }

// ErrTAPGone and ErrNICGone end a worker: the device was removed.
var (
	ErrTAPGone = errors.New("the TAP device went away")
	ErrNICGone = errors.New("the NIC went away")
)

func (q *Queue) run() error {
	// The thread stays locked for good: its affinity was changed.
	runtime.LockOSThread()
	if q.CPU >= 0 {
		var set unix.CPUSet
		set.Set(q.CPU)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pin to CPU %d: %w", q.CPU, os.NewSyscallError("sched_setaffinity", err))
		}
	}
	nicReady, tapReady := true, true
	for !q.stop.Load() {
		if nicReady {
			n, err := q.nicToTAP()
			if err != nil {
				return err
			}
			nicReady = n == q.batch
		}
		if tapReady {
			n, err := q.tapToNIC()
			if err != nil {
				return err
			}
			tapReady = n == q.batch
		}
		if nicReady || tapReady {
			continue
		}
		if q.busy {
			// Spin: try both fds again. Errors that need attention
			// (POLLERR on the socket) come back from recvmmsg itself.
			nicReady, tapReady = true, true
			continue
		}
		if err := q.wait(); err != nil {
			return err
		}
		if q.pfd[0].Revents != 0 {
			return nil
		}
		nicReady = q.pfd[1].Revents&(unix.POLLIN|unix.POLLERR) != 0
		tapReady = q.pfd[2].Revents&(unix.POLLIN|unix.POLLERR|unix.POLLHUP) != 0
		if q.pfd[1].Revents&unix.POLLERR != 0 {
			if err := q.sockError(); err != nil {
				return err
			}
		}
	}
	return nil
}

// wait blocks in ppoll on the stop eventfd, the socket and the TAP.
func (q *Queue) wait() error {
	for {
		q.pfd[0].Revents, q.pfd[1].Revents, q.pfd[2].Revents = 0, 0, 0
		_, err := unix.Ppoll(q.pfd[:], nil, nil)
		if err == nil {
			return nil
		}
		if err != unix.EINTR {
			return os.NewSyscallError("ppoll", err)
		}
	}
}

// sockError reads SO_ERROR: POLLERR stays set on a packet socket until it
// is read (net/packet/af_packet.c: packet_notifier sets sk_err).
func (q *Queue) sockError() error {
	e, err := unix.GetsockoptInt(q.sock.Fd(), unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return os.NewSyscallError("getsockopt SO_ERROR", err)
	}
	if e == 0 {
		return nil
	}
	if unix.Errno(e) != unix.ENETDOWN {
		q.C.NICToTAP.Errors.Add(1)
		return nil
	}
	return q.nicWentDown()
}

// nicWentDown handles ENETDOWN from the socket (through SO_ERROR, or
// returned by recvmmsg, which consumes it): the NIC went down or away. The
// kernel re-hooks the socket when it comes back up (af_packet.c:
// packet_notifier, NETDEV_UP).
func (q *Queue) nicWentDown() error {
	if !q.nicExists() {
		return ErrNICGone
	}
	if q.fw != nil && q.fw.nicDown.CompareAndSwap(false, true) {
		q.fw.log.Warn("NIC link is down: frames toward it are dropped until it comes back")
	}
	return nil
}

// linkUp logs, once, that a device that was down forwards again.
func (q *Queue) linkUp(down *atomic.Bool, what string) {
	if q.fw != nil && down.Load() && down.CompareAndSwap(true, false) {
		q.fw.log.Info(what + " is forwarding again")
	}
}

func (q *Queue) nicExists() bool {
	idx := q.sock.Ifindex()
	if idx < 0 {
		return true
	}
	_, err := net.InterfaceByIndex(idx)
	return err == nil
}

// KernelStats reads the packet socket's PACKET_STATISTICS, accumulated:
// frames that reached the socket and frames the kernel dropped because
// the socket's queue was full.
func (q *Queue) KernelStats() (packets, drops uint64, err error) {
	p, d, err := q.sock.Stats()
	return q.kpackets + p, q.kdrops + d, err
}
