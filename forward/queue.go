package forward

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward/fabric"
	"github.com/tapfwd/tapfwd/offload"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// QueueWorker is one worker: a TAP queue and a NIC endpoint, and, with
// guest ports, an inbox of what guests send to the TAP. It is the one
// goroutine that reads and writes its TAP queue and its NIC endpoint.
type QueueWorker struct {
	ID       int
	CPU      int // -1 when not pinned
	Counters Counters

	w      *worker
	tap    Endpoint
	nic    NIC
	kstats kernelStats
	fw     *Forwarder
	batch  int
	tapHdr int // bytes of vnet header on the TAP side (0 or hdrLen)
	busy   bool
	// What the NIC and the TAP cost when they fail.
	fromNIC, fromTAP source
	toTAP, toNIC     sink
	// Which fds to read on the next turn: those the last turn filled a
	// batch from, or the last wait found ready (the TAP's: tx.ready).
	nicReady, inReady bool
	// tx reads the TAP and writes the NIC: in this worker's turns, or in
	// a worker of its own when the queue is split (Config.Split).
	tx tapSide

	nicBufs  [][]byte
	nicSizes []int
	frames   []offload.Frame // the batch being written to the TAP (from the NIC or a guest)
	gro      *offload.GRO
	tapOut   [][]byte   // frames for one TAP Write
	seg      segBuffers // segments for the TAP, with tapHdr bytes of room in front
	segUsed  int        // seg's buffers taken by tapOut
	tunnel   []bool     // tunnel[i]: frames[i] is a GSO frame inside a tunnel (offload.SegmentTunnel)
	tally    tally
	dirty    uint64 // guests handed frames in this batch
	// The guests' frames for the TAP (nil without guests on this queue),
	// a batch taken from it, and the tally of one guest's run of it.
	in    *fabric.Inbox
	taken [][]byte
	tags  []fabric.Tag
	runT  tally

	// How long a short batch from the NIC may wait for more
	// (Config.GROWindow; 0 without GRO).
	groWindow time.Duration
	// moves counts the worker's moves to follow its load (Config.Roam).
	moves atomic.Uint64
	// got is what the last turn read from the NIC and the TAP.
	got int
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
		batch: c.Batch, busy: c.Busy, nicReady: true,
	}
	q.kstats.src, _ = nic.(KernelCounters)
	if c.TAPVnetHdr {
		q.tapHdr = hdrLen
	}
	q.fromNIC = source{link: &f.nic, gone: ErrNICGone, lost: DropNICRecv}
	q.fromTAP = source{gone: ErrTAPGone, lost: DropTAPRead}
	q.toTAP = sink{ep: tap, hdr: q.tapHdr, refused: DropTAPWrite, busy: DropTAPWrite, link: &f.tap, gone: ErrTAPGone}
	// The NIC's link state is what its reader sees: a packet socket says it
	// went down once, on a read, while every send to it fails until then.
	// A NIC that is gone ends the worker from either side: an AF_XDP
	// socket's reads say nothing once its device is unregistered (the
	// kernel unbinds it, and poll reports nothing on an unbound socket),
	// while its sends fail with ENXIO.
	q.toNIC = sink{ep: nic, hdr: hdrLen, refused: DropNICRefused, busy: DropNICBusy, gone: ErrNICGone}
	q.nicBufs = makeBufs(c.Batch, bufSize)
	q.nicSizes = make([]int, c.Batch)
	q.frames = make([]offload.Frame, 0, c.Batch)
	q.tunnel = make([]bool, c.Batch)
	if c.GRO && c.TAPVnetHdr {
		q.gro = offload.NewGRO(c.Batch)
		q.gro.SetUDP(c.UDPGRO)
		if c.GROMaxIPv4 > 0 || c.GROMaxIPv6 > 0 {
			q.gro.SetMaxSize(orDefault(c.GROMaxIPv4, 65536), orDefault(c.GROMaxIPv6, 65536))
		}
		q.groWindow = c.GROWindow
	}
	q.tapOut = make([][]byte, 0, c.Batch+maxSegments)
	q.seg = segBuffers{hdr: q.tapHdr, mtu: c.MTU}
	if !c.TAPVnetHdr {
		q.seg.ensure()
	}
	q.tx = tapSide{q: q, ready: true, bufs: makeBufs(c.Batch, bufSize), sizes: make([]int, c.Batch), out: make([][]byte, 0, c.Batch)}
	name := fmt.Sprintf("queue %d", id)
	if c.Split == nil {
		q.w = f.newWorker(name, cpu, q, nic.Fd(), tap.Fd())
		q.tx.w = q.w
	} else {
		q.w = f.newWorker(name+" from the NIC", cpu, q, nic.Fd())
		q.split(c.Split[id], c.SpinMax)
	}
	q.w.waiter, _ = nic.(Waiter)
	q.w.spin.max = c.SpinMax
	return q
}

// addInbox gives the queue in, for what guests send to the TAP, and its
// worker in's fd to wait on.
func (q *QueueWorker) addInbox(in *fabric.Inbox) {
	q.in, q.inReady = in, true
	q.taken = make([][]byte, q.batch)
	q.tags = make([]fabric.Tag, q.batch)
	q.w.pfd = append(q.w.pfd, unix.PollFd{Fd: int32(in.Fd()), Events: unix.POLLIN})
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

// segment segments frame (a tunnel GSO frame with offload.SegmentTunnel,
// any other with offload.Segment) into the buffers from the from-th on.
func (s *segBuffers) segment(h vnethdr.Hdr, frame []byte, tunnel bool, from int) (int, error) {
	if tunnel {
		return offload.SegmentTunnel(h, frame, s.out[from:], s.sizes[from:])
	}
	return offload.Segment(h, frame, s.out[from:], s.sizes[from:])
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

// turn moves a batch each way between the NIC and the TAP, from the fds
// that have frames, and writes what guests left for the TAP.
func (q *QueueWorker) turn() (bool, error) {
	q.got = 0
	if q.nicReady {
		n, err := q.nicToTAP()
		if err != nil {
			return false, err
		}
		q.nicReady, q.got = n == q.batch, n
	}
	if !q.tx.own() && q.tx.ready {
		n, err := q.tx.toNIC()
		if err != nil {
			return false, err
		}
		q.tx.ready, q.got = n == q.batch, q.got+n
	}
	if q.inReady {
		more, err := q.guestsToTAP()
		if err != nil {
			return false, err
		}
		q.inReady = more
	}
	if q.nicReady || !q.tx.own() && q.tx.ready || q.inReady {
		return true, nil
	}
	if q.busy {
		// Spin: try every fd again. Errors that need attention (POLLERR on
		// the socket) come back from recvmmsg itself.
		q.poke()
		return true, nil
	}
	return false, nil
}

// poke marks every fd as ready, for a turn that looks at each without a
// wait; after it, moved says whether that turn read anything.
func (q *QueueWorker) poke() {
	q.nicReady, q.inReady = true, q.in != nil
	if !q.tx.own() { // a split queue's TAP side is its own worker's
		q.tx.ready = true
	}
}

func (q *QueueWorker) moved() bool { return q.got > 0 || q.inReady }

// woke notes which fds have frames: the NIC, the TAP and the inbox.
// POLLERR: a read returns the pending error and clears it
// (net/core/datagram.c: __skb_try_recv_datagram reads sk_err first), so a
// down NIC does not keep the worker spinning.
func (q *QueueWorker) woke(pfd []unix.PollFd) {
	q.nicReady = pfd[0].Revents&(unix.POLLIN|unix.POLLERR) != 0
	if !q.tx.own() {
		q.tx.woke(pfd[1:2])
		pfd = pfd[1:]
	}
	if q.in != nil && pfd[1].Revents != 0 {
		q.in.Settle()
		q.inReady = true
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
