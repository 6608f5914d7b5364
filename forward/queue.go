package forward

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// QueueWorker is one worker: a TAP queue and a NIC endpoint.
type QueueWorker struct {
	ID       int
	CPU      int // -1 when not pinned
	Counters Counters

	tap    Endpoint
	nic    NIC
	kstats kernelStats
	live   live
	fw     *Forwarder
	batch  int
	tapHdr int // bytes of vnet header on the TAP side (0 or hdrLen)
	busy   bool

	nicBufs  [][]byte
	nicSizes []int
	frames   []vnethdr.Frame // the batch being forwarded NIC -> TAP
	gro      *vnethdr.GRO
	tapOut   [][]byte   // frames for one TAP Write
	seg      segBuffers // segments for the TAP, with tapHdr bytes of room in front
	segUsed  int        // seg's buffers taken by tapOut
	tunnel   []bool     // tunnel[i]: frames[i] is a GSO frame inside a tunnel (vnethdr.SegmentTunnel)
	tapBufs  [][]byte
	tapSizes []int
	nicOut   [][]byte // frames for one NIC Write
	pfd      [3]unix.PollFd
	tally    tally
	dirty    uint64 // guests handed frames in this batch
}

// kernelStats accumulates the NIC's kernel drop counters across Reattach.
// Scrapes read it while the worker runs, so it has its own lock; the
// worker never takes it.
type kernelStats struct {
	mu             sync.Mutex
	src            KernelCounters // nil when the NIC keeps none
	packets, drops uint64         // of NICs replaced by Reattach
}

func newQueue(f *Forwarder, id, cpu int, tap Endpoint, nic NIC, c Config) *QueueWorker {
	q := &QueueWorker{
		ID: id, CPU: cpu, tap: tap, nic: nic, fw: f,
		batch: c.Batch, busy: c.Busy,
	}
	q.kstats.src, _ = nic.(KernelCounters)
	if c.TAPVnetHdr {
		q.tapHdr = hdrLen
	}
	q.nicBufs = makeBufs(c.Batch, bufSize)
	q.nicSizes = make([]int, c.Batch)
	q.frames = make([]vnethdr.Frame, 0, c.Batch)
	q.tunnel = make([]bool, c.Batch)
	if c.GRO && c.TAPVnetHdr {
		q.gro = vnethdr.NewGRO(c.Batch)
		q.gro.SetUDP(c.UDPGRO)
		if c.GROMaxIPv4 > 0 || c.GROMaxIPv6 > 0 {
			q.gro.SetMaxSize(orDefault(c.GROMaxIPv4, 65536), orDefault(c.GROMaxIPv6, 65536))
		}
	}
	q.tapOut = make([][]byte, 0, c.Batch+maxSegments)
	q.seg = segBuffers{hdr: q.tapHdr, mtu: c.MTU}
	if !c.TAPVnetHdr {
		q.seg.ensure()
	}
	q.tapBufs = makeBufs(c.Batch, bufSize)
	q.tapSizes = make([]int, c.Batch)
	q.nicOut = make([][]byte, 0, c.Batch)
	q.pfd[0] = unix.PollFd{Fd: int32(f.stopFd), Events: unix.POLLIN}
	q.pfd[1] = unix.PollFd{Fd: int32(nic.Fd()), Events: unix.POLLIN}
	q.pfd[2] = unix.PollFd{Fd: int32(tap.Fd()), Events: unix.POLLIN}
	return q
}

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// maxSegments bounds userspace segmentation (a TAP without a vnet header):
// a 64 KiB super-frame with the smallest MSS Linux uses (TCP_MIN_MSS is 88)
// would need ~745 segments; 512 covers every MSS >= 128. Larger counts are
// dropped as DropSegment.
const maxSegments = 512

// segBuffers hold the segments of super-frames segmented in userspace,
// each with hdr bytes of room in front for a zeroed vnet header.
// ensure allocates them: maxSegments MTU-sized frames, under 1 MiB.
type segBuffers struct {
	hdr, mtu int
	bufs     [][]byte
	out      [][]byte // bufs[i][hdr:], where segmentation writes
	sizes    []int
}

// segBufSize is one segment buffer: the header room, an MTU-sized packet,
// its Ethernet header and a VLAN tag.
func segBufSize(hdr, mtu int) int { return hdr + mtu + 14 + 4 }

func (s *segBuffers) ensure() {
	if s.bufs != nil {
		return
	}
	s.bufs = makeBufs(maxSegments, segBufSize(s.hdr, s.mtu))
	s.out = make([][]byte, maxSegments)
	for i, b := range s.bufs {
		s.out[i] = b[s.hdr:]
	}
	s.sizes = make([]int, maxSegments)
}

// segment segments frame (a tunnel GSO frame with vnethdr.SegmentTunnel,
// any other with vnethdr.Segment) into the buffers from the from-th on.
func (s *segBuffers) segment(h vnethdr.Hdr, frame []byte, tunnel bool, from int) (int, error) {
	if tunnel {
		return vnethdr.SegmentTunnel(h, frame, s.out[from:], s.sizes[from:])
	}
	return vnethdr.Segment(h, frame, s.out[from:], s.sizes[from:])
}

// appendFrames appends the k segments from the from-th on to dst, each
// with its header room zeroed.
func (s *segBuffers) appendFrames(dst [][]byte, from, k int) [][]byte {
	for j := from; j < from+k; j++ {
		b := s.bufs[j][:s.hdr+s.sizes[j]]
		clear(b[:s.hdr])
		dst = append(dst, b)
	}
	return dst
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

func (q *QueueWorker) run() error {
	if err := lockTo(q.CPU); err != nil {
		return err
	}
	q.fw.workerUp()
	nicReady, tapReady := true, true
	for !q.fw.stop.Load() {
		q.live.beats.Add(1)
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
		if err := q.live.poll(q.pfd[:]); err != nil {
			return err
		}
		if q.pfd[0].Revents != 0 {
			return nil
		}
		// POLLERR: a read returns the pending error and clears it
		// (net/core/datagram.c: __skb_try_recv_datagram reads sk_err
		// first), so a down NIC does not keep the worker spinning.
		nicReady = q.pfd[1].Revents&(unix.POLLIN|unix.POLLERR) != 0
		tapReady = q.pfd[2].Revents&(unix.POLLIN|unix.POLLERR|unix.POLLHUP) != 0
	}
	return nil
}

// nicDownOrGone handles ENETDOWN or ENODEV from the NIC: a NIC that went
// down is waited for (the kernel re-hooks a packet socket when its device
// comes back up, af_packet.c: packet_notifier, NETDEV_UP); one that is gone
// ends the worker.
func (q *QueueWorker) nicDownOrGone(err error) error {
	if gone(err) {
		return ErrNICGone
	}
	if q.fw.nicDown.CompareAndSwap(false, true) {
		q.fw.log.Warn("NIC link is down: frames toward it are dropped until it comes back")
	}
	return nil
}

// linkUp logs, once, that a device that was down forwards again.
func (q *QueueWorker) linkUp(down *atomic.Bool, what string) {
	if down.Load() && down.CompareAndSwap(true, false) {
		q.fw.log.Info(what + " is forwarding again")
	}
}

// KernelStats reads the NIC's kernel counters (PACKET_STATISTICS on a
// packet socket), accumulated across Reattach: frames that reached the
// socket and frames the kernel dropped because its queue was full. It may
// be called while the worker runs.
func (q *QueueWorker) KernelStats() (packets, drops uint64, err error) {
	return q.kstats.read()
}

func (k *kernelStats) read() (packets, drops uint64, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	packets, drops = k.packets, k.drops
	if k.src != nil {
		p, d, e := k.src.Stats()
		packets, drops, err = packets+p, drops+d, e
	}
	return packets, drops, err
}

// replace keeps what the old NIC counted and reads the new one from now on.
func (k *kernelStats) replace(nic NIC) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.src != nil {
		if p, d, err := k.src.Stats(); err == nil {
			k.packets, k.drops = k.packets+p, k.drops+d
		}
	}
	k.src, _ = nic.(KernelCounters)
}
