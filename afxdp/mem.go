package afxdp

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// rxHeadroom is where the kernel puts a received frame in its chunk in
// copy mode: after XDP_PACKET_HEADROOM (net/xdp/xsk_buff_pool.c:
// xp_alloc, with no UMEM headroom).
const rxHeadroom = unix.XDP_PACKET_HEADROOM

// MemKernel plays the kernel's side of the four rings of a socket over Go
// memory (NewMemSocket), for tests and benchmarks here and in other
// packages: forward's measure its worker on the AF_XDP path with it. It
// lives outside the test files so that other packages' tests can reach
// it; nothing in the daemon calls it, and the Socket it drives runs the
// same Read and Write code as one the kernel drives. It is not safe for
// concurrent use with the socket's Read and Write.
type MemKernel struct {
	q     *queue
	sg    bool
	frame uint64 // bytes of frame per RX chunk
	// lazy: the fill ring's consumer index is published only by
	// publishFill, as the kernel publishes it when its cached view runs
	// out; fillCons is the kernel's own.
	lazy     bool
	fillCons uint32
}

// NewMemSocket returns a Socket whose UMEM and rings are Go memory (frames
// chunks of chunkSize bytes each way, rings of frames entries; both powers
// of two, chunkSize at least 2048) and the MemKernel that plays the
// kernel. Its TX ring never asks for a wake-up (a zero-copy driver that is
// running), so Read and Write make no system call; it has no descriptor
// (Fd is -1, Close does nothing, Counters and Stats say EBADFD beside
// the socket's own counts). multiBuffer is SocketConfig.MultiBuffer; it
// takes partial checksums (SocketConfig.PartialChecksums), as on a veth.
func NewMemSocket(frames, chunkSize int, multiBuffer bool) (*Socket, *MemKernel) {
	k := newModel(uint32(frames), uint64(chunkSize), multiBuffer)
	k.q.tx.flags.Store(0)
	s := &Socket{fd: -1, q: *k.q}
	k.q = &s.q
	return s, k
}

// publishFill publishes the lazy kernel's fill consumer index.
func (m *MemKernel) publishFill() { m.q.fill.cons.Store(m.fillCons) }

func newModel(frames uint32, chunk uint64, sg bool) *MemKernel {
	mk := func() ring {
		return ring{prod: new(atomic.Uint32), cons: new(atomic.Uint32), flags: new(atomic.Uint32), size: frames, mask: frames - 1}
	}
	m := &MemKernel{q: new(queue), sg: sg, frame: chunk - rxHeadroom}
	m.q.fill = addrRing{ring: mk(), addrs: make([]uint64, frames)}
	m.q.comp = addrRing{ring: mk(), addrs: make([]uint64, frames)}
	m.q.rx = descRing{ring: mk(), descs: make([]unix.XDPDesc, frames)}
	m.q.tx = descRing{ring: mk(), descs: make([]unix.XDPDesc, frames)}
	m.q.tx.flags.Store(unix.XDP_RING_NEED_WAKEUP)
	m.q.init(make([]byte, 2*uint64(frames)*chunk), chunk, frames, sg)
	// Partial checksums taken, as on a veth (the test bed's NIC).
	m.q.partial = true
	return m
}

// Deliver is the kernel receiving frame (an Ethernet frame, no vnet
// header): it takes fill entries, copies the frame into their chunks and
// publishes the RX descriptors, as net/xdp/xsk.c: __xsk_rcv does. false:
// dropped (too long without multi-buffer, no fill entries, RX ring full).
func (m *MemKernel) Deliver(frame []byte) bool {
	q := m.q
	k := uint32((uint64(len(frame)) + m.frame - 1) / m.frame)
	if k == 0 {
		k = 1
	}
	if k > 1 && !m.sg {
		return false
	}
	fillCons, rxProd := q.fill.cons.Load(), q.rx.prod.Load()
	if m.lazy {
		fillCons = m.fillCons
	}
	if q.fill.prod.Load()-fillCons < k || q.rx.size-(rxProd-q.rx.cons.Load()) < k {
		return false
	}
	for j := uint32(0); j < k; j++ {
		addr := q.fill.addrs[(fillCons+j)&q.fill.mask] + rxHeadroom
		part := frame[uint64(j)*m.frame : min(uint64(j+1)*m.frame, uint64(len(frame)))]
		copy(q.mem[addr:], part)
		opts := uint32(0)
		if j < k-1 {
			opts = unix.XDP_PKT_CONTD
		}
		q.rx.descs[(rxProd+j)&q.rx.mask] = unix.XDPDesc{Addr: addr, Len: uint32(len(part)), Options: opts}
	}
	m.fillCons = fillCons + k
	if !m.lazy {
		q.fill.cons.Store(m.fillCons)
	}
	q.rx.prod.Store(rxProd + k)
	return true
}

// Transmit is the kernel sending everything on the TX ring: it joins each
// chain of descriptors into a frame (a new slice each) and completes every
// descriptor.
func (m *MemKernel) Transmit() [][]byte {
	q := m.q
	var out [][]byte
	var cur []byte
	cons, prod := q.tx.cons.Load(), q.tx.prod.Load()
	cp := q.comp.prod.Load()
	for ; cons != prod; cons++ {
		d := q.tx.descs[cons&q.tx.mask]
		cur = append(cur, q.mem[d.Addr:d.Addr+uint64(d.Len)]...)
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			out = append(out, cur)
			cur = nil
		}
		q.comp.addrs[cp&q.comp.mask] = d.Addr
		cp++
	}
	q.tx.cons.Store(cons)
	q.comp.prod.Store(cp)
	return out
}

// Complete is Transmit without building frames (it allocates nothing):
// the kernel takes the TX ring and completes every descriptor. It returns
// how many descriptors it took.
func (m *MemKernel) Complete() int {
	q := m.q
	cons, prod, cp := q.tx.cons.Load(), q.tx.prod.Load(), q.comp.prod.Load()
	n := int(prod - cons)
	for ; cons != prod; cons++ {
		q.comp.addrs[cp&q.comp.mask] = q.tx.descs[cons&q.tx.mask].Addr
		cp++
	}
	q.tx.cons.Store(cons)
	q.comp.prod.Store(cp)
	return n
}
