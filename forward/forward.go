package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tapfwd/tapfwd/forward/fabric"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// DefaultBatch is the batch a worker moves when it is given none: the most
// frames per direction per wake-up (Config.Batch). Every default of the
// batch (the daemon's, the CLI's --batch) is this one.
const DefaultBatch = 64

// Config tunes the workers.
type Config struct {
	// Batch is the most frames a worker moves per direction per wake-up;
	// 0 means DefaultBatch.
	Batch int
	// CPUs[i] is the CPU queue i is pinned to; a negative entry (or a
	// missing one) leaves that queue unpinned.
	CPUs []int
	// Roam, with two or more CPUs, lets each queue worker pinned to one
	// of them move among them to follow its load: while the queue is busy
	// and the worker's CPU has no idle time left, it moves to one of them
	// that has (the roamer in roam.go). Fewer than two: workers stay
	// where CPUs put them.
	Roam []int
	// Split, when not nil, runs each queue as two workers, one per
	// direction (split.go): the queue's own, on CPUs[i], reads the NIC and
	// writes the TAP; another, on Split[i] (negative: not pinned), reads
	// the TAP and writes the NIC. Every endpoint must then be Duplex. Split
	// queues do not roam.
	Split []int
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
	// SpinMax is the longest a queue worker spins on non-blocking reads
	// of its fds before it sleeps in ppoll, adapted between 0 and it
	// (spin.go): longer while frames come soon after a sleep began, none
	// while the queue idles; 0 never spins. Busy spins without limit.
	SpinMax time.Duration
	// GRO coalesces consecutive TCP segments of a flow received from the
	// NIC into one GSO frame before writing them to the TAP (needs
	// TAPVnetHdr; offload.GRO).
	GRO bool
	// GROWindow, with GRO, is how long a worker that read less than a
	// batch from the NIC may wait for more while the batch's last frame
	// leaves its flow open (offload.GRO.Open): frames of a flow that
	// arrive a little apart then merge into one TAP write. It waits in
	// ppoll on the NIC alone; 0 never waits.
	GROWindow time.Duration
	// UDPGRO lets GRO also merge same-size UDP datagrams of a flow into one
	// USO frame; only when the TAP took the USO offloads (Linux 6.2+, which
	// also accepts USO writes), else such a write is refused.
	UDPGRO bool
	// TAPMACs are the addresses behind the TAP: the TAP's, its host
	// port's, the macvtap VM ports' guests'. A frame from the NIC whose
	// source is one of them, one of StrictMACs or a guest port's is forged
	// or looped back: it is dropped (DropSpoofed) before a guest's worker
	// learns from it that the address lives on the wire.
	TAPMACs []net.HardwareAddr
	// StrictMACs, unless nil, are the sources frames from the TAP may
	// have (the lab host's, the macvtap guests'): others are dropped
	// (DropSpoofed). A guest port's frames must always come from its own
	// address.
	StrictMACs []net.HardwareAddr
	// L2 is what frames from the TAP side may carry onto the wire.
	L2 L2Policy
	// GROMaxIPv4 and GROMaxIPv6 bound what userspace GRO builds: the TAP's
	// gro_ipv4_max_size and gro_max_size (0: 65536, offload.GRO's default).
	GROMaxIPv4, GROMaxIPv6 int
	// Guests are VMs on the segment besides the TAP and the NIC, each with
	// a worker of its own (at most 64).
	Guests []GuestPort
}

// BufferBytes is the memory the workers take for frame buffers: two
// batches of 64 KiB frames per queue (one each way), plus the segment
// buffers when the TAP has no vnet header. With one, a queue allocates its
// segment buffers (maxSegments MTU-sized frames, under 1 MiB) only when the
// first GSO frame from inside a tunnel arrives, which BufferBytes leaves
// out.
func BufferBytes(queues, batch int, tapVnet bool, mtu int) int64 {
	per := 2 * int64(batch) * bufSize
	if !tapVnet {
		per += maxSegments * int64(segBufSize(0, mtu))
	}
	return int64(queues) * per
}

const (
	// headroom before each frame: room for the vnet header plus an 802.1Q
	// tag put back in place, rounded up.
	headroom = 32
	// frameCap is the largest frame forwarded: a 64 KiB GSO super-frame
	// with Ethernet and VLAN headers (the IP length field caps it at 65535).
	frameCap = 65536 + 64
	// bufSize holds the headroom and one byte more than frameCap, so a
	// frame that fills its buffer is known to be oversize even where the
	// read does not say it was cut short (a TUN read does not).
	bufSize = headroom + frameCap + 1
	hdrLen  = vnethdr.Len
)

// Forwarder owns the workers of one TAP and one NIC.
type Forwarder struct {
	queues  []*QueueWorker
	guests  []*GuestWorker
	workers []*worker // the queues' and the guests' loops, in that order
	stop    stop
	// Link state shared by the workers, so each change is logged once.
	tap, nic link
	// The switch between the guests, the TAP and the wire; nil without
	// guests.
	sw *fabric.Switch
	// What frames from the TAP and the guests must pass.
	untrusted untrusted
	// The CPUs queue workers roam among (Config.Roam), and what their
	// roamers read the CPUs' times with (nil: /proc/stat; tests set it).
	roam      []int
	roamTimes func() ([]procfs.CPUTimes, error)
	log       *slog.Logger
	// Workers in their loop, and Started closed when all are.
	up        atomic.Int32
	started   chan struct{}
	startOnce sync.Once
}

// New prepares one worker per (TAP queue, NIC) pair. It does not start
// them. The endpoints stay the caller's to close.
func New(taps []Endpoint, nics []NIC, c Config) (*Forwarder, error) {
	if len(taps) != len(nics) || len(taps) == 0 {
		return nil, fmt.Errorf("%d TAP queues but %d NIC endpoints", len(taps), len(nics))
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.MTU <= 0 {
		c.MTU = 1500
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Split != nil {
		if err := checkSplit(taps, nics, c.Split); err != nil {
			return nil, err
		}
	}
	f := &Forwarder{started: make(chan struct{}), roam: c.Roam, log: c.Logger}
	if err := f.untrusted.set(c); err != nil {
		return nil, err
	}
	if err := f.stop.open(); err != nil {
		return nil, err
	}
	f.tap = link{log: c.Logger, downMsg: "TAP is down: frames for it are dropped (tap_write) until it is up", upMsg: "TAP is forwarding again"}
	f.nic = link{log: c.Logger, downMsg: "NIC link is down: frames toward it are dropped until it comes back", upMsg: "NIC is forwarding again"}
	for i := range taps {
		cpu := -1
		if i < len(c.CPUs) {
			cpu = c.CPUs[i]
		}
		f.queues = append(f.queues, newQueue(f, i, cpu, taps[i], nics[i], c))
	}
	if len(c.Guests) > 0 {
		if err := f.addGuests(c); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// QueueWorkers returns the workers, for reading counters.
func (f *Forwarder) QueueWorkers() []*QueueWorker { return f.queues }

// Run starts every worker and blocks until ctx is done or a worker fails;
// then it stops them all and returns the first failure (nil after ctx).
//
// Run may be called again after it returned (after Reattach, say).
func (f *Forwarder) Run(ctx context.Context) error {
	f.stop.clear() // the previous Run's
	var wg sync.WaitGroup
	errc := make(chan error, len(f.workers))
	for _, w := range f.workers {
		wg.Go(func() {
			if err := w.run(); err != nil && err != errClosed {
				errc <- fmt.Errorf("%s: %w", w.name, err)
			}
		})
	}
	rs := f.startRoamers()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopRoamers(rs)
	f.stop.set()
	wg.Wait()
	return err
}

// Reattach gives the queues new NIC endpoints, one each (after the NIC
// came back, say). Call it only while Run is not running.
func (f *Forwarder) Reattach(nics []NIC) error {
	if len(nics) != len(f.queues) {
		return fmt.Errorf("%d NIC endpoints for %d queues", len(nics), len(f.queues))
	}
	for i, q := range f.queues {
		q.kstats.replace(nics[i])
		q.nic, q.toNIC.ep = nics[i], nics[i]
		q.w.pfd[1].Fd = int32(nics[i].Fd())
		q.w.waiter, _ = nics[i].(Waiter)
	}
	return nil
}

// Close releases the stop eventfd and the inboxes. The endpoints stay the
// caller's.
func (f *Forwarder) Close() error {
	if f.sw != nil {
		f.sw.Close()
	}
	for _, q := range f.queues {
		if q.in != nil {
			q.in.Close()
		}
	}
	return f.stop.close()
}

// ErrTAPGone and ErrNICGone end a worker: the device was removed.
var (
	ErrTAPGone = errors.New("the TAP device went away")
	ErrNICGone = errors.New("the NIC went away")
)

// errClosed ends a guest's worker quietly: its port was closed.
var errClosed = errors.New("guest port closed")
