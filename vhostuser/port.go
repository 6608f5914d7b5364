package vhostuser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/tapfwd/tapfwd/vhostuser/internal/eventfd"
)

// Config describes one port.
type Config struct {
	// Path of the listening unix socket. A socket already there (a port
	// of an earlier run) is replaced atomically, so a front-end that
	// reconnects finds the new one; any other file there is an error.
	Path string
	// Mode of the socket file; 0 means 0600. A front-end needs write
	// permission to connect.
	Mode os.FileMode
	// Owner of the socket file; nil leaves it to the process.
	Owner *Owner
	// KeepSocket makes Close leave the socket file where it is (a later
	// Listen at the same path replaces it); by default Close removes it.
	KeepSocket bool
	// Features limits the virtio features offered (a subset of
	// SupportedFeatures); 0 offers all of them.
	Features uint64
	// QueuePairs is how many queue pairs the port offers (GET_QUEUE_NUM,
	// and VIRTIO_NET_F_MQ when more than one), each a Queue of its own;
	// 0 means 1, at most MaxQueuePairs.
	QueuePairs int
	// Logger gets connections, disconnections and rule breaks; nil
	// discards.
	Logger *slog.Logger
	// MemoryBudget bounds the guest memory that the port alone holds
	// resident, in bytes: pages of the front-end's memory that it never
	// touched and the port faulted in (see memguard.go). A front-end over
	// it is sent away, and while earlier front-ends left more than it
	// behind (charged to this process) new ones are turned away. 0 means
	// DefaultMemoryBudget; negative, no limit.
	MemoryBudget int64
	// OnEvent, if set, is called for every Event, in order, from a
	// goroutine of the port's own. It must return promptly (events that
	// find 64 waiting are dropped and counted) and must not call Close.
	OnEvent func(Event)
}

// Owner is the socket file's owner; -1 leaves a field unchanged, as in chown(2).
type Owner struct{ UID, GID int }

// State is where a port stands.
type State int32

const (
	StateListening State = iota // no front-end connected
	StateConnected              // a front-end is connected; the first queue pair's rings are not both running
	StateRunning                // the first queue pair's rings started and enabled: frames move
	StateBroken                 // the guest broke the virtqueue rules: stopped until the rings restart
	StateClosed                 // Close was called
)

var stateNames = [...]string{"listening", "connected", "running", "broken", "closed"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state %d", int32(s))
}

// EventKind says what happened to a port.
type EventKind int

const (
	EventConnected    EventKind = iota + 1 // a front-end connected
	EventRunning                           // the first queue pair runs: frames move
	EventStopped                           // a ring of it stopped or was disabled (the guest's driver reset the device)
	EventBroken                            // the guest broke the rules; Err says how (ErrGuest)
	EventDisconnected                      // the front-end went away or was sent away; Err says why (nil: it closed)
)

var eventNames = [...]string{"", "connected", "running", "stopped", "broken", "disconnected"}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event %d", int(k))
}

// Event is a change of a port's state.
type Event struct {
	Kind EventKind
	Err  error
}

// Port is one vhost-user virtio-net port: a listening socket, the
// front-end connected to it, the guest's memory and its virtqueues, one
// receive and one transmit queue per queue pair.
//
// Each queue pair is a Queue (Queues) with the forwarder's batch shape: a
// worker of its own may own it. Port's own Read, Write and Fd are the
// first queue pair's, all of a single-queue port. All methods are safe for
// concurrent use: Read and Write may run at once (each ring has its own
// lock), and several goroutines writing to one queue take turns per batch.
type Port struct {
	cfg          Config
	log          *slog.Logger
	plog         *logLimiter // the lines a front-end or its guest can cause
	path         string
	ino          uint64
	ln           *net.UnixListener
	sig          *eventfd.Signaller
	offered      uint64
	offeredProto uint64
	events       chan Event
	wg, evwg     sync.WaitGroup
	closing      atomic.Bool
	closeOnce    sync.Once

	connMu sync.Mutex
	conn   *net.UnixConn // the front-end; nil when none

	// mu: the control path changes the fields below and the rings'
	// configuration under the write lock; Read and Write hold the read
	// lock, so nothing they use changes or is unmapped under them.
	mu       sync.RWMutex
	closed   bool
	features uint64
	proto    uint64
	hdrLen   int // the guest's virtio-net header, 10 or 12 bytes: set with features by useFeatures
	mem      memTable
	peer     peerProc // the connected front-end's process
	rings    []vring  // receiveq k at 2k, transmitq k at 2k+1
	queues   []*Queue // queue pair k: rings 2k and 2k+1
	reply    [hdrSize + maxPayload]byte
	// refused: the rings the front-end set up on this connection that
	// were refused (beyond the port's, or on another ring's memory), each
	// logged and counted once.
	refused [maxRingIndex/64 + 1]uint64

	state  atomic.Int32
	active atomic.Int32 // ActivePairs
	acked  atomic.Uint64
	mac    atomic.Uint64 // bit 48: known
	mtu    atomic.Uint32
	stats  portCounters

	// The guest memory the port alone holds (memguard.go): the last
	// measure of its current table's, what earlier tables left, and
	// whether the connected front-end was sent away for it.
	heldBytes  atomic.Uint64
	heldRss    atomic.Uint64
	heldAt     atomic.Int64 // unix ns
	carried    atomic.Uint64
	overBudget atomic.Bool
}

// MaxQueuePairs is the most queue pairs a port offers.
const MaxQueuePairs = 64

// Listen creates the port's socket and starts serving front-ends, one at a
// time: one that connects while another is served is turned away.
func Listen(c Config) (*Port, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, errors.New("vhost-user ports need a little-endian host")
	}
	if c.QueuePairs < 0 || c.QueuePairs > MaxQueuePairs {
		return nil, fmt.Errorf("vhost-user port of %d queue pairs: at most %d", c.QueuePairs, MaxQueuePairs)
	}
	p := makePort(c)
	p.log = p.log.With("socket", c.Path)
	p.plog = newLogLimiter(p.log, logLimits.burst, logLimits.interval)
	var err error
	if p.sig, err = signals(); err != nil {
		return nil, err
	}
	if err := p.openFds(); err != nil {
		p.closeFds()
		return nil, err
	}
	ln, ino, err := listenSocket(c.Path, c.Mode, c.Owner)
	if err != nil {
		p.closeFds()
		return nil, err
	}
	p.ln, p.ino = ln, ino
	p.log.Info("vhost-user port listening", "queue_pairs", len(p.queues))
	memGuardian.watch(p)
	p.wg.Add(1)
	go p.acceptLoop()
	p.evwg.Add(1)
	go p.dispatch()
	return p, nil
}

// makePort lays out a port of c's queue pairs with nothing open: what it
// offers, its rings and queues.
func makePort(c Config) *Port {
	p := &Port{cfg: c, log: c.Logger, path: c.Path, events: make(chan Event, 64), peer: noPeer}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.plog = newLogLimiter(p.log, logLimits.burst, logLimits.interval)
	pairs := max(c.QueuePairs, 1)
	p.offered, p.offeredProto = SupportedFeatures, SupportedProtocolFeatures
	if c.Features != 0 {
		p.offered = c.Features & SupportedFeatures
	}
	if pairs > 1 {
		p.offered |= 1 << FeatureNetMQ
	}
	if p.offered&(1<<FeatureProtocolFeatures) == 0 {
		// Without protocol features a front-end cannot ask GET_QUEUE_NUM.
		p.offeredProto, p.offered = 0, p.offered&^(1<<FeatureNetMQ)
	}
	p.rings = make([]vring, 2*pairs)
	for i := range p.rings {
		r := &p.rings[i]
		r.index, r.kick, r.call, r.errFd, r.w = i, -1, -1, -1, newWalker()
	}
	p.queues = make([]*Queue, pairs)
	for k := range p.queues {
		p.queues[k] = &Queue{p: p, index: k, rx: &p.rings[2*k], tx: &p.rings[2*k+1], epfd: -1, wakefd: -1}
	}
	p.useFeatures(0)
	return p
}

func (p *Port) openFds() error {
	for _, q := range p.queues {
		if err := q.openFds(); err != nil {
			return err
		}
	}
	return nil
}

func (p *Port) closeFds() {
	for _, q := range p.queues {
		q.closeFds()
	}
}

// Close stops serving, sends the front-end away, releases its memory and
// fds and removes the socket (unless Config.KeepSocket). Fd must no longer be polled.
func (p *Port) Close() error {
	p.closeOnce.Do(func() {
		p.closing.Store(true)
		memGuardian.forget(p)
		_ = p.ln.Close()
		p.connMu.Lock()
		if p.conn != nil {
			_ = p.conn.Close()
		}
		p.connMu.Unlock()
		p.wg.Wait()
		p.mu.Lock()
		p.closed = true
		p.state.Store(int32(StateClosed))
		p.closeFds()
		close(p.events)
		p.mu.Unlock()
		p.evwg.Wait()
		if !p.cfg.KeepSocket {
			removeSocket(p.path, p.ino)
		}
		p.plog.flush()
		p.log.Info("vhost-user port closed")
	})
	return nil
}

// Queues are the port's queue pairs, Config.QueuePairs of them, whether
// or not the guest uses them (see ActivePairs).
func (p *Port) Queues() []*Queue { return p.queues }

// ActivePairs is how many queue pairs the guest uses now: the leading
// pairs whose rings both run, as its driver enables them
// (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, which the front-end turns into
// SET_VRING_ENABLE); 0 while the first does not run. Frames toward the
// guest go to one of these, steered by flow.
func (p *Port) ActivePairs() int { return int(p.active.Load()) }

// Read is the first queue pair's Queue.Read.
func (p *Port) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return p.queues[0].Read(bufs, sizes, offset)
}

// Write is the first queue pair's Queue.Write.
func (p *Port) Write(bufs [][]byte, offset int) (int, error) { return p.queues[0].Write(bufs, offset) }

// Fd is the first queue pair's Queue.Fd.
func (p *Port) Fd() int { return p.queues[0].Fd() }

// Path is the socket's path.
func (p *Port) Path() string { return p.path }

// State is where the port stands now.
func (p *Port) State() State { return State(p.state.Load()) }

// Features are the virtio features the front-end acknowledged (0 while
// none is connected).
func (p *Port) Features() uint64 { return p.acked.Load() }

// GuestOffloads are the offloads the guest takes on frames Write gives it.
func (p *Port) GuestOffloads() Offloads { return offloadsOf(p.acked.Load()) }

// MTU is what the front-end said with NET_SET_MTU (QEMU's host_mtu), 0 if
// it said nothing.
func (p *Port) MTU() int { return int(p.mtu.Load()) }

// MAC is the source address of the guest's unicast frames, once it sent one.
func (p *Port) MAC() (net.HardwareAddr, bool) {
	v := p.mac.Load()
	if v&(1<<48) == 0 {
		return nil, false
	}
	m := make(net.HardwareAddr, 6)
	for i := range m {
		m[i] = byte(v >> (8 * (5 - i)))
	}
	return m, true
}

// emit queues an event for OnEvent; it never blocks (an event that does
// not fit is counted and dropped).
func (p *Port) emit(e Event) {
	select {
	case p.events <- e:
	default:
		p.stats.eventsDropped.Add(1)
	}
}

func (p *Port) dispatch() {
	defer p.evwg.Done()
	for e := range p.events {
		if p.cfg.OnEvent != nil {
			p.cfg.OnEvent(e)
		}
	}
}

// wake makes every queue's Fd readable, so that the workers waiting on
// them look at the port.
func (p *Port) wake() {
	for _, q := range p.queues {
		q.wake()
	}
}

// The process's eventfd signaller, made with the first port (and by a
// later one if that failed).
var (
	signallerMu sync.Mutex
	signaller   *eventfd.Signaller
)

func signals() (*eventfd.Signaller, error) {
	signallerMu.Lock()
	defer signallerMu.Unlock()
	if signaller == nil {
		s, err := eventfd.NewSignaller()
		if err != nil {
			return nil, fmt.Errorf("vhost-user signals: %w", err)
		}
		signaller = s
	}
	return signaller, nil
}

// eventfdOne is what write(2) adds to an eventfd: a native-endian u64 of 1
// (eventfd(2)). It is never written after init, so every goroutine of every
// port may hand it to the kernel at once.
var eventfdOne = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()
