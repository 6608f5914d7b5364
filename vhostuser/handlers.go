package vhostuser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser/internal/eventfd"
)

// handle applies one checked request to the port and returns its reply
// (nil for requests without one) and, for need_reply, the status to
// acknowledge with. It owns fds. An error sends the front-end away.
func (p *Port) handle(m *message, fds []int) ([]byte, uint64, error) {
	if m.beyond {
		out, status := p.refuseRing(m, fds)
		return out, status, nil
	}
	switch m.req {
	case reqGetFeatures:
		return p.u64Reply(m.req, p.offered), 0, nil
	case reqSetFeatures:
		return nil, 0, p.setFeatures(m.u64)
	case reqGetProtocolFeatures, reqSetProtocolFeatures:
		if p.offered&(1<<FeatureProtocolFeatures) == 0 {
			return nil, 0, protoErr(m.req, "protocol features were not offered")
		}
		if m.req == reqGetProtocolFeatures {
			return p.u64Reply(m.req, p.offeredProto), 0, nil
		}
		return nil, 0, p.setProtocolFeatures(m.u64)
	case reqGetQueueNum:
		return p.u64Reply(m.req, uint64(len(p.queues))), 0, nil
	case reqSetOwner:
		return nil, 0, nil
	case reqResetOwner:
		// Deprecated; docs/interop/vhost-user.rst recommends disabling the
		// rings and keeping the rest.
		p.mu.Lock()
		for i := range p.rings {
			p.stopRing(i)
			p.rings[i].enabled = false
		}
		p.refreshActive()
		p.mu.Unlock()
		return nil, 0, nil
	case reqSetMemTable:
		return nil, 0, p.setMemTable(m, fds)
	case reqSetVringNum, reqSetVringBase, reqSetVringAddr, reqSetVringEnable:
		status, err := ringStatus(p.setVring(m))
		return nil, status, err
	case reqGetVringBase:
		return p.getVringBase(m), 0, nil
	case reqSetVringKick, reqSetVringCall, reqSetVringErr:
		fd := -1
		if !m.noFd {
			fd = fds[0]
		}
		status, err := ringStatus(p.setVringFd(m, fd))
		return nil, status, err
	case reqNetSetMTU:
		return p.setMTU(m)
	}
	closeFds(fds)
	return nil, 0, protoErr(m.req, "not supported")
}

// refuseRing answers a request for a ring beyond the port's. The first
// for each ring on a connection is logged and counted as a protocol error;
// its fds are closed, GET_VRING_BASE is answered with base 0 and a
// need_reply with a failure. The front-end is not sent away: DPDK's
// virtio-user sets up every ring of its queues=N without asking
// GET_QUEUE_NUM (and its control queue as ring 2 when the port offers no
// VIRTIO_NET_F_MQ), and runs on the rings it was offered.
func (p *Port) refuseRing(m *message, fds []int) ([]byte, uint64) {
	closeFds(fds)
	p.mu.Lock()
	bit := uint64(1) << (m.ring % 64)
	first := p.refused[m.ring/64]&bit == 0
	p.refused[m.ring/64] |= bit
	p.mu.Unlock()
	if first {
		p.stats.protocolErrors.Add(1)
		p.plog.Warn("vhost-user front-end set up a ring beyond the port's: refused, the connection kept "+
			"(give it as many queues as the port has queue pairs)",
			"request", reqName(m.req), "ring", m.ring, "queue_pairs", len(p.queues))
	}
	if m.req == reqGetVringBase {
		var b [sizeState]byte
		binary.NativeEndian.PutUint32(b[:], uint32(m.ring))
		return putReply(p.reply[:], m.req, b[:]), 0
	}
	return nil, 1
}

// errRingShared: the ring was refused for sharing another ring's memory
// (refuseShared); the connection is kept.
var errRingShared = errors.New("ring on another ring's memory")

// ringStatus turns errRingShared into a need_reply failure that keeps the
// connection; other errors stay errors.
func ringStatus(err error) (uint64, error) {
	if err == errRingShared {
		return 1, nil
	}
	return 0, err
}

func (p *Port) u64Reply(req uint32, v uint64) []byte {
	var b [sizeU64]byte
	binary.NativeEndian.PutUint64(b[:], v)
	return putReply(p.reply[:], req, b[:])
}

func (p *Port) setFeatures(v uint64) error {
	if extra := v &^ p.offered; extra != 0 {
		return protoErr(reqSetFeatures, "features %#x were not offered", extra)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.useFeatures(v)
	p.log.Debug("vhost-user features acknowledged", "features", fmt.Sprintf("%#x", v))
	// EVENT_IDX and INDIRECT_DESC change what running rings look like.
	err := p.resetup(reqSetFeatures)
	p.refreshActive()
	return err
}

// useFeatures takes v as the negotiated features (0: none yet) and the
// guest's header size they make: struct virtio_net_hdr_mrg_rxbuf, 12
// bytes, with VERSION_1 or MRG_RXBUF, else struct virtio_net_hdr, 10.
// Under the write lock.
func (p *Port) useFeatures(v uint64) {
	p.features = v
	p.acked.Store(v)
	p.hdrLen = 10
	if v&(1<<FeatureVersion1|1<<FeatureNetMrgRxbuf) != 0 {
		p.hdrLen = 12
	}
}

func (p *Port) setProtocolFeatures(v uint64) error {
	if extra := v &^ p.offeredProto; extra != 0 {
		return protoErr(reqSetProtocolFeatures, "protocol features %#x were not offered", extra)
	}
	p.mu.Lock()
	p.proto = v
	p.mu.Unlock()
	return nil
}

func (p *Port) setMTU(m *message) ([]byte, uint64, error) {
	p.mu.RLock()
	ok := p.proto&(1<<ProtocolNetMTU) != 0
	p.mu.RUnlock()
	if !ok {
		return nil, 0, protoErr(m.req, "NET_MTU was not negotiated")
	}
	if m.u64 < minMTU || m.u64 > maxMTU {
		p.plog.Warn("vhost-user front-end set an MTU out of range", "mtu", m.u64)
		return nil, 1, nil // refused with REPLY_ACK; the connection stays
	}
	p.mtu.Store(uint32(m.u64))
	return nil, 0, nil
}

// setMemTable maps the new table, moves running rings onto it and unmaps
// the old one.
func (p *Port) setMemTable(m *message, fds []int) error {
	t, err := mapTable(m.regions[:m.nregions], fds)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.mem
	p.mem = t
	err = p.resetup(reqSetMemTable)
	p.retire(&old, noPeer) // the front-end is here: it holds its file
	p.refreshActive()
	return err
}

// resetup re-derives the host views of the running rings after the memory
// table or the features changed. A ring that no longer fits is stopped
// and the front-end is sent away; one that now shares another's memory is
// refused (refuseShared).
func (p *Port) resetup(req uint32) error {
	var err error
	for i := range p.rings {
		r := &p.rings[i]
		if !r.started {
			continue
		}
		if e := r.setup(&p.mem, p.features); e != nil {
			p.stopRing(i)
			err = protoErr(req, "ring %d: %v", i, e)
		}
	}
	// Only now do all running rings have views of the new memory to
	// compare: a ring that came to share another's is refused.
	for i := range p.rings {
		if p.rings[i].started {
			p.refuseShared(i)
		}
	}
	return err
}

func (p *Port) setVring(m *message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := m.ring
	r := &p.rings[i]
	switch m.req {
	case reqSetVringNum, reqSetVringBase:
		if r.started {
			return protoErr(m.req, "ring %d is running", i)
		}
		if m.req == reqSetVringNum {
			r.num = m.state.num
		} else {
			r.base = uint16(m.state.num)
		}
	case reqSetVringAddr:
		r.addr, r.addrSet = m.addr, true
		if r.started {
			if err := r.setup(&p.mem, p.features); err != nil {
				p.stopRing(i)
				return protoErr(m.req, "ring %d: %v", i, err)
			}
			if p.refuseShared(i) {
				p.refreshActive()
				return errRingShared
			}
		}
	case reqSetVringEnable:
		r.enabled = m.state.num == 1
	}
	p.refreshActive()
	return nil
}

// getVringBase stops the ring and answers where the guest's next
// available entry is.
func (p *Port) getVringBase(m *message) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := m.ring
	r := &p.rings[i]
	if r.started {
		r.base = r.lastAvail
		p.stopRing(i)
		p.refreshActive()
	}
	var b [sizeState]byte
	binary.NativeEndian.PutUint32(b[:], uint32(i))
	binary.NativeEndian.PutUint32(b[4:], uint32(r.base))
	return putReply(p.reply[:], m.req, b[:])
}

// setVringFd takes a ring's kick, call or error eventfd (-1: none). A kick
// fd starts the ring (docs/interop/vhost-user.rst, "Ring states").
func (p *Port) setVringFd(m *message, fd int) error {
	if fd >= 0 {
		// Only an eventfd: the port signals and polls the ring fds in
		// ways only an eventfd makes safe (eventfd.Signaller, drain); a
		// pipe that hangs up or a socket with a receive low-water mark
		// would make them spin or wait.
		if err := eventfd.Check(fd); err != nil {
			_ = unix.Close(fd)
			return protoErr(m.req, "ring %d: %v", m.ring, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &p.rings[m.ring]
	switch m.req {
	case reqSetVringCall:
		setFd(&r.call, fd)
		return nil
	case reqSetVringErr:
		setFd(&r.errFd, fd)
		return nil
	}
	if fd < 0 {
		return protoErr(m.req, "ring %d: polling without a kick eventfd is not supported", m.ring)
	}
	q := p.queueOf(m.ring)
	if r.kick >= 0 {
		_ = unix.EpollCtl(q.epfd, unix.EPOLL_CTL_DEL, r.kick, nil)
	}
	setFd(&r.kick, fd)
	// Edge-triggered, so that the port never reads the kick eventfd
	// (drain); a kick already pending shows when it is added.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(tagKick + m.ring)}
	if err := unix.EpollCtl(q.epfd, unix.EPOLL_CTL_ADD, r.kick, &ev); err != nil {
		return protoErr(m.req, "ring %d: kick fd cannot be polled: %v", m.ring, os.NewSyscallError("epoll_ctl", err))
	}
	if r.started {
		return nil // a new fd for a running ring
	}
	if err := r.setup(&p.mem, p.features); err != nil {
		return protoErr(m.req, "ring %d: %v", m.ring, err)
	}
	if p.refuseShared(m.ring) {
		return errRingShared
	}
	if v := guarded(func() { r.start(m.ring%2 == 0) }); v != nil {
		return protoErr(m.req, "ring %d: fault on the used ring: %v", m.ring, v)
	}
	p.refreshActive()
	q.wake()
	return nil
}

// guarded runs f, turning a fault on guest memory (its file shrank under
// the mapping) into a returned value instead of a crash.
func guarded(f func()) (fault any) {
	old := debug.SetPanicOnFault(true)
	defer func() { fault = memFault(old, recover()) }()
	f()
	return nil
}

// stopRing stops ring i: the data path leaves it alone until it starts
// again, and its kick fd is closed (a new SET_VRING_KICK starts it).
func (p *Port) stopRing(i int) {
	r := &p.rings[i]
	if r.kick >= 0 {
		_ = unix.EpollCtl(p.queueOf(i).epfd, unix.EPOLL_CTL_DEL, r.kick, nil)
		_ = unix.Close(r.kick)
		r.kick = -1
	}
	r.started = false
	r.broken.Store(false)
}

// queueOf is the queue pair ring i belongs to.
func (p *Port) queueOf(i int) *Queue { return p.queues[i/2] }

// refreshActive recomputes which rings move frames: started ones, enabled
// by SET_VRING_ENABLE when protocol features were negotiated (else a ring
// starts enabled, docs/interop/vhost-user.rst), the pairs the guest uses
// and the port's state.
func (p *Port) refreshActive() {
	for i := range p.rings {
		r := &p.rings[i]
		r.active = r.started && (r.enabled || p.features&(1<<FeatureProtocolFeatures) == 0)
	}
	n := 0
	for n < len(p.queues) && p.queues[n].rx.active && p.queues[n].tx.active {
		n++
	}
	p.active.Store(int32(n))
	p.updateState()
}

// updateState publishes the port's state and emits the change; under mu.
func (p *Port) updateState() {
	s := StateListening
	p.connMu.Lock()
	connected := p.conn != nil
	p.connMu.Unlock()
	switch {
	case p.closed:
		s = StateClosed
	case !connected:
	case p.rings[0].broken.Load():
		s = StateBroken // broke stops every ring
	case p.rings[0].active && p.rings[1].active:
		s = StateRunning
	default:
		s = StateConnected
	}
	prev := State(p.state.Swap(int32(s)))
	switch {
	case s == prev:
	case s == StateRunning:
		p.plog.Info("vhost-user port running", "features", fmt.Sprintf("%#x", p.features))
		p.emit(Event{Kind: EventRunning})
	case prev == StateRunning && s == StateConnected:
		p.stats.resets.Add(1)
		p.emit(Event{Kind: EventStopped})
	}
}

// teardown releases everything the front-end gave: ring eventfds, memory
// mappings, negotiated state. Under the write lock.
func (p *Port) teardown() {
	for i := range p.rings {
		p.stopRing(i)
		r := &p.rings[i]
		setFd(&r.call, -1)
		setFd(&r.errFd, -1)
		r.reset()
	}
	p.retire(&p.mem, p.peer)
	p.peer = noPeer
	p.useFeatures(0)
	p.proto = 0
	p.refused = [len(p.refused)]uint64{}
	p.mtu.Store(0)
}
