package afxdp

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// rxHeadroom is where the kernel puts a received frame in its chunk in
// copy mode: after XDP_PACKET_HEADROOM (net/xdp/xsk_buff_pool.c:
// xp_alloc, with no UMEM headroom).
const rxHeadroom = unix.XDP_PACKET_HEADROOM

// model is a queue over Go memory and a fake kernel that plays the
// kernel's side of the four rings.
type model struct {
	q     *queue
	sg    bool
	frame uint64 // bytes of frame per RX chunk
	// lazy: the fill ring's consumer index is published only by
	// publishFill, as the kernel publishes it when its cached view runs
	// out; fillCons is the kernel's own.
	lazy     bool
	fillCons uint32
}

// publishFill publishes the lazy kernel's fill consumer index.
func (m *model) publishFill() { m.q.fill.cons.Store(m.fillCons) }

func newModel(frames uint32, chunk uint64, sg bool) *model {
	mk := func() ring {
		return ring{prod: new(atomic.Uint32), cons: new(atomic.Uint32), flags: new(atomic.Uint32), size: frames, mask: frames - 1}
	}
	m := &model{q: new(queue), sg: sg, frame: chunk - rxHeadroom}
	m.q.fill = addrRing{ring: mk(), addrs: make([]uint64, frames)}
	m.q.comp = addrRing{ring: mk(), addrs: make([]uint64, frames)}
	m.q.rx = descRing{ring: mk(), descs: make([]unix.XDPDesc, frames)}
	m.q.tx = descRing{ring: mk(), descs: make([]unix.XDPDesc, frames)}
	m.q.tx.flags.Store(unix.XDP_RING_NEED_WAKEUP)
	m.q.init(make([]byte, 2*uint64(frames)*chunk), chunk, frames, sg)
	return m
}

// deliver is the kernel receiving frame: it takes fill entries, copies the
// frame into their chunks and publishes the RX descriptors, as
// net/xdp/xsk.c: __xsk_rcv does. false: dropped (too long without
// multi-buffer, no fill entries, RX ring full).
func (m *model) deliver(frame []byte) bool {
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

// transmit is the kernel sending everything on the TX ring: it joins each
// chain of descriptors into a frame and completes every descriptor.
func (m *model) transmit() [][]byte {
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
