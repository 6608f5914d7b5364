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

	"golang.org/x/sys/unix"

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
	// Logger gets connections, disconnections and rule breaks; nil
	// discards.
	Logger *slog.Logger
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
	StateConnected              // a front-end is connected; the rings are not both running
	StateRunning                // both rings started and enabled: frames move
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
	EventRunning                           // both rings run: frames move
	EventStopped                           // a ring stopped or was disabled (the guest's driver reset the device)
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
// front-end connected to it, the guest's memory and its two virtqueues.
//
// Read and Write move frames with the forwarder's batch shape. All methods
// are safe for concurrent use: Read and Write may run at once (each ring
// has its own lock), and several goroutines writing to one port take turns
// per batch.
type Port struct {
	cfg          Config
	log          *slog.Logger
	path         string
	ino          uint64
	ln           *net.UnixListener
	sig          *eventfd.Signaller
	epfd, wakefd int
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
	rings    [numRings]vring
	reply    [hdrSize + maxPayload]byte

	// Read's scratch, under rings[txRing].mu.
	evs    [numRings + 1]unix.EpollEvent
	rdBuf  [8]byte
	macNow [6]byte

	state atomic.Int32
	acked atomic.Uint64
	mac   atomic.Uint64 // bit 48: known
	mtu   atomic.Uint32
	stats counters
}

// Epoll tags: which fd became readable.
const (
	tagWake = 0 // the port's own eventfd, level-triggered
	tagKick = 1 // + ring index: the ring's kick eventfd, edge-triggered
)

// Listen creates the port's socket and starts serving front-ends, one at a
// time: one that connects while another is served is turned away.
func Listen(c Config) (*Port, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, errors.New("vhostuser: big-endian hosts are not supported")
	}
	p := &Port{cfg: c, log: c.Logger, path: c.Path, epfd: -1, wakefd: -1, events: make(chan Event, 64)}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("socket", c.Path)
	p.offered, p.offeredProto = SupportedFeatures, SupportedProtocolFeatures
	if c.Features != 0 {
		p.offered = c.Features & SupportedFeatures
	}
	if p.offered&(1<<FeatureProtocolFeatures) == 0 {
		p.offeredProto = 0
	}
	for i := range p.rings {
		r := &p.rings[i]
		r.kick, r.call, r.errFd, r.w = -1, -1, -1, newWalker()
	}
	p.useFeatures(0)
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
	p.log.Info("vhost-user port listening")
	p.wg.Add(1)
	go p.acceptLoop()
	p.evwg.Add(1)
	go p.dispatch()
	return p, nil
}

func (p *Port) openFds() error {
	var err error
	if p.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("vhostuser: %w", os.NewSyscallError("epoll_create1", err))
	}
	if p.wakefd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("vhostuser: %w", os.NewSyscallError("eventfd", err))
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: tagWake}
	if err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, p.wakefd, &ev); err != nil {
		return fmt.Errorf("vhostuser: %w", os.NewSyscallError("epoll_ctl", err))
	}
	return nil
}

func (p *Port) closeFds() {
	for _, fd := range []*int{&p.epfd, &p.wakefd} {
		if *fd >= 0 {
			_ = unix.Close(*fd)
			*fd = -1
		}
	}
}

// Close stops serving, sends the front-end away, releases its memory and
// fds and removes the socket (unless Config.KeepSocket). Fd must no longer be polled.
func (p *Port) Close() error {
	p.closeOnce.Do(func() {
		p.closing.Store(true)
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
		p.log.Info("vhost-user port closed")
	})
	return nil
}

// Fd becomes readable when the guest transmitted frames (Read has work),
// when the guest posted receive buffers after a Write found none, and when
// the port's state changed. Read consumes the notifications; poll it for
// reading only. Once Read said EIO, Fd stays quiet until the front-end
// restarts the rings: a broken port no longer polls the guest's kicks.
func (p *Port) Fd() int { return p.epfd }

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

// wake makes Fd readable, so a worker waiting on it looks at the port.
func (p *Port) wake() { _, _ = unix.Write(p.wakefd, eventfdOne[:]) }

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
			return nil, fmt.Errorf("vhostuser: %w", err)
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
