package afxdp

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults for SocketConfig.
const (
	DefaultFrames    = 2048 // UMEM chunks per direction, and entries per ring
	DefaultChunkSize = 4096 // bytes per UMEM chunk: one page, the most aligned mode takes
	// sndBufBytes bounds the skbs copy-mode TX has in flight (they are
	// charged to SO_SNDBUF): a ring's worth of MTU frames.
	sndBufBytes = 8 << 20
)

// Bind chooses between copy and zero-copy AF_XDP.
type Bind int

const (
	// BindAuto lets the kernel pick: zero-copy where the driver has it,
	// copy otherwise.
	BindAuto Bind = iota
	// BindCopy asks for copy mode (XDP_COPY).
	BindCopy
	// BindZeroCopy asks for zero-copy (XDP_ZEROCOPY) and fails with
	// ErrZeroCopy where the driver has none.
	BindZeroCopy
)

// BusyPoll sets the kernel's busy polling on a socket (5.11+ for Prefer and
// Budget). A socket bound to a queue whose NAPI has an id (veth does while
// XDP is attached) then polls that NAPI from recvfrom/sendto/poll.
type BusyPoll struct {
	Usecs  int  // SO_BUSY_POLL: how long one busy-poll call may spin, in microseconds; must be > 0
	Budget int  // SO_BUSY_POLL_BUDGET: frames per NAPI poll; 0 leaves the kernel's (8)
	Prefer bool // SO_PREFER_BUSY_POLL: softirq processing defers to busy polling while it runs
	// Inline: Read busy-polls (one recvfrom) whenever it finds the RX ring
	// empty. Without it something else calls Socket.BusyPoll (a poller on
	// its own CPU).
	Inline bool
}

// SocketConfig describes one socket.
type SocketConfig struct {
	Ifindex   int
	Queue     int
	Bind      Bind
	Frames    int // power of two; 0 means DefaultFrames
	ChunkSize int // 2048 or 4096; 0 means DefaultChunkSize
	// MultiBuffer binds with XDP_USE_SG (6.6+): frames longer than a chunk
	// arrive and leave as chains of chunks. Without it the kernel drops
	// them on receive (XDP_STATISTICS rx_dropped) and Write refuses them.
	MultiBuffer bool
	BusyPoll    *BusyPoll
	// PartialChecksums takes a TCP or UDP check field that holds the bare
	// pseudo-header sum for a partial checksum and marks the frame
	// NEEDS_CSUM (vnethdr.RecoverPartial). That is right only where a
	// stack on this host sent the frame and left its checksum to the
	// device, as a veth's peer does (XDP keeps no ip_summed). From a wire
	// such a field is a wrong checksum, which completing it would make
	// right: without PartialChecksums the frame passes as it came and the
	// lab's stack checks it, as with the packet backend. Open sets it for
	// a veth only.
	PartialChecksums bool
}

// Socket is one AF_XDP socket bound to one NIC queue, with its own UMEM.
// It is a forward.NIC: Read and Write belong to one goroutine; Stats,
// Counters, NAPIID and BusyPoll may be called from any.
type Socket struct {
	fd       int
	ifindex  int
	queueID  int
	zeroCopy bool
	inline   bool // BusyPoll.Inline
	q        queue
	maps     [][]byte // UMEM and rings, unmapped by Close

	down, gone bool // the last kick said ENETDOWN / the device is gone

	closeMu   sync.RWMutex // Close against Stats, Counters, BusyPoll
	rxFrames  atomic.Uint64
	txDropped atomic.Uint64
	refused   refusedCounters
}

// OpenSocket creates an XDP socket, registers its UMEM, maps its rings and
// binds it to c.Queue of c.Ifindex. No XDP program is needed to open it,
// but frames reach it only through one that redirects into an XSKMAP
// holding it (Program). On error nothing is left open.
func OpenSocket(c SocketConfig) (_ *Socket, err error) {
	frames, chunk := orDefault(c.Frames, DefaultFrames), orDefault(c.ChunkSize, DefaultChunkSize)
	if frames&(frames-1) != 0 || chunk&(chunk-1) != 0 {
		return nil, fmt.Errorf("UMEM frames (%d) and chunk size (%d) must be powers of two", frames, chunk)
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, opError("XDP socket", "socket", err, map[unix.Errno]error{unix.EAFNOSUPPORT: ErrNotSupported})
	}
	s := &Socket{fd: fd, ifindex: c.Ifindex, queueID: c.Queue}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.setupUmem(uint32(frames), uint64(chunk), c.MultiBuffer); err != nil {
		return nil, err
	}
	s.q.partial = c.PartialChecksums
	if err := s.setOptions(c.BusyPoll); err != nil {
		return nil, err
	}
	if err := s.bind(c); err != nil {
		return nil, err
	}
	// Copy-mode TX sends at most max_tx_budget (32) frames per kick; a
	// budget of the whole ring takes a batch in one (6.17+; older kernels
	// refuse the option and keep 32 per kick).
	unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, frames)
	opts, err := options(fd)
	if err != nil {
		return nil, fmt.Errorf("read the XDP socket's options: %w", err)
	}
	s.zeroCopy = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	return s, nil
}

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// setupUmem maps 2*frames chunks (the first half for RX, the second for
// TX), registers them and maps the four rings, each of frames entries.
func (s *Socket) setupUmem(frames uint32, chunk uint64, sg bool) error {
	size := int(2 * uint64(frames) * chunk)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("map a UMEM of %d bytes: %w", size, os.NewSyscallError("mmap", err))
	}
	s.maps = append(s.maps, mem)
	reg := unix.XDPUmemReg{Addr: umemAddr(mem), Len: uint64(size), Size: uint32(chunk)}
	if err := setsockoptUmemReg(s.fd, &reg); err != nil {
		return opError("XDP_UMEM_REG", "", err, nil)
	}
	for _, o := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, o, int(frames)); err != nil {
			return opError(fmt.Sprintf("ring size %d (option %d)", frames, o), "setsockopt", err, nil)
		}
	}
	off, err := mmapOffsets(s.fd)
	if err != nil {
		return fmt.Errorf("read the XDP rings' offsets: %w", err)
	}
	q := &s.q
	var rb [4][]byte
	if q.fill, rb[0], err = mapAddrRing(s.fd, unix.XDP_UMEM_PGOFF_FILL_RING, &off.Fr, frames); err == nil {
		if q.comp, rb[1], err = mapAddrRing(s.fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, &off.Cr, frames); err == nil {
			if q.rx, rb[2], err = mapDescRing(s.fd, unix.XDP_PGOFF_RX_RING, &off.Rx, frames); err == nil {
				q.tx, rb[3], err = mapDescRing(s.fd, unix.XDP_PGOFF_TX_RING, &off.Tx, frames)
			}
		}
	}
	for _, b := range rb {
		if b != nil {
			s.maps = append(s.maps, b)
		}
	}
	if err != nil {
		return fmt.Errorf("map the XDP rings: %w", err)
	}
	q.init(mem, chunk, frames, sg)
	return nil
}

func (s *Socket) setOptions(bp *BusyPoll) error {
	opts := []struct {
		opt, val int
		name     string
	}{{unix.SO_SNDBUFFORCE, sndBufBytes, "SO_SNDBUFFORCE"}}
	if bp != nil {
		if bp.Usecs <= 0 {
			return errors.New("busy polling needs a positive SO_BUSY_POLL time")
		}
		s.inline = bp.Inline
		opts = append(opts, struct {
			opt, val int
			name     string
		}{unix.SO_BUSY_POLL, bp.Usecs, "SO_BUSY_POLL"})
		if bp.Prefer {
			opts = append(opts, struct {
				opt, val int
				name     string
			}{unix.SO_PREFER_BUSY_POLL, 1, "SO_PREFER_BUSY_POLL"})
		}
		if bp.Budget > 0 {
			opts = append(opts, struct {
				opt, val int
				name     string
			}{unix.SO_BUSY_POLL_BUDGET, bp.Budget, "SO_BUSY_POLL_BUDGET"})
		}
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
			return opError(o.name, "setsockopt", err, nil)
		}
	}
	return nil
}

// bind binds the socket with need_wakeup, the chosen copy mode and, when
// asked, multi-buffer.
func (s *Socket) bind(c SocketConfig) error {
	flags := uint16(unix.XDP_USE_NEED_WAKEUP)
	switch c.Bind {
	case BindCopy:
		flags |= unix.XDP_COPY
	case BindZeroCopy:
		flags |= unix.XDP_ZEROCOPY
	}
	if c.MultiBuffer {
		flags |= unix.XDP_USE_SG
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(c.Ifindex), QueueID: uint32(c.Queue)}
	if err := bindXDP(s.fd, sa); err != nil {
		what := fmt.Sprintf("bind to ifindex %d queue %d", c.Ifindex, c.Queue)
		m := map[unix.Errno]error{unix.ENODEV: ErrNoDevice, unix.EINVAL: ErrQueue, unix.EBUSY: ErrQueueBusy}
		if c.Bind == BindZeroCopy {
			m[unix.EOPNOTSUPP] = ErrZeroCopy
		}
		return opError(what, "bind", err, m)
	}
	return nil
}

// bindXDP binds fd, waiting up to a second while the queue is busy: the
// kernel frees a closed socket's hold on its queue later, from a work
// queue (net/xdp/xsk_buff_pool.c: xp_put_pool defers xp_release_deferred),
// so a socket closed just now (a probe, a reopened queue, the previous
// process) still holds it for a moment. A queue still busy after that is
// another live socket's.
func bindXDP(fd int, sa *unix.SockaddrXDP) error {
	var err error
	for i := 0; i < 100; i++ {
		if err = unix.Bind(fd, sa); err != unix.EBUSY {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// Fd is the socket's descriptor, for polling: POLLIN when the RX ring holds
// frames, POLLOUT while the TX ring is less than half full.
func (s *Socket) Fd() int { return s.fd }

// ZeroCopy reports whether the kernel bound the socket in zero-copy mode
// (XDP_OPTIONS).
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// Queue is the NIC queue the socket is bound to.
func (s *Socket) Queue() int { return s.queueID }

// NAPIID is the id of the NAPI instance the kernel marked the socket with
// (SO_INCOMING_NAPI_ID): the queue's, taken at bind or from the first frame.
// 0 means busy polling has nothing to poll.
func (s *Socket) NAPIID() (uint32, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.fd < 0 {
		return 0, unix.EBADFD
	}
	v, err := unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_INCOMING_NAPI_ID)
	if err != nil {
		return 0, os.NewSyscallError("getsockopt", err)
	}
	return uint32(v), nil
}

// Close closes the socket (the kernel takes it out of every XSKMAP) and
// unmaps its UMEM and rings.
func (s *Socket) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	for _, b := range s.maps {
		unix.Munmap(b)
	}
	s.maps = nil
	return err
}
