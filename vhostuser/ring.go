package vhostuser

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser/internal/shm"
)

// Ring flags and offsets (virtio 1.x 2.7.6-2.7.8; include/uapi/linux/virtio_ring.h).
const (
	availNoInterrupt = 1 // VRING_AVAIL_F_NO_INTERRUPT: the driver wants no used-buffer notification
	usedNoNotify     = 1 // VRING_USED_F_NO_NOTIFY: the device wants no available-buffer notification
	ringHdr          = 4 // flags and idx before each ring's entries
	usedElemSize     = 8 // struct vring_used_elem: id, len
)

// vring is one split virtqueue. Fields in the first group change only
// under the port's write lock (the control path); the data path reads them
// under the read lock. Fields in the second group belong to the data path
// and change under mu.
type vring struct {
	index   int // in the port: receiveq k is 2k, transmitq k 2k+1
	num     uint32
	addr    vringAddr
	addrSet bool
	base    uint16
	kick    int // eventfds from the front-end, -1 when none
	call    int
	errFd   int
	started bool // between SET_VRING_KICK and GET_VRING_BASE
	enabled bool // SET_VRING_ENABLE's last word
	active  bool // started, and enabled or enabling not negotiated
	// Host views of the guest's rings, set by setup.
	desc, avail, used []byte
	availOff          int  // offset of the aligned u32 holding avail->idx
	availShift        uint // and where the index sits in it
	eventIdx          bool // VIRTIO_RING_F_EVENT_IDX negotiated
	w                 walker

	mu          sync.Mutex
	broken      atomic.Bool // the guest broke the rules: the ring is not touched again until restarted
	lastAvail   uint16      // next entry of the available ring to take
	availLeft   uint16      // entries known available from the last read of avail->idx
	usedIdx     uint16      // next used->idx to publish
	usedFlags   uint16      // what the port keeps in used->flags
	published   uint16      // used->idx as last written
	signalled   uint16      // used->idx at the last notification decision (EVENT_IDX)
	signalledOK bool
	notifyOn    bool // the port asked for available-buffer notifications
	refused     refusal
	fenceWord   uint32
}

// name is how the guest's driver would name the ring, numbering queue
// pairs from 0 as Queue.Index does.
func (r *vring) name() string {
	if r.index%2 == 0 {
		return fmt.Sprintf("receive queue %d", r.index/2)
	}
	return fmt.Sprintf("transmit queue %d", r.index/2)
}

func (r *vring) reset() {
	r.num, r.addr, r.addrSet, r.base = 0, vringAddr{}, false, 0
	r.started, r.enabled, r.active = false, false, false
	r.desc, r.avail, r.used = nil, nil, nil
	r.w.mem, r.w.table = nil, nil
	r.broken.Store(false)
}

// setup derives the host views of the ring from its user addresses and
// checks that every byte of them is guest memory, with the alignment the
// atomic index accesses need.
func (r *vring) setup(mem *memTable, features uint64) error {
	if r.num == 0 || !r.addrSet || mem.n == 0 {
		return fmt.Errorf("ring not set up: size %d, addresses given %v, %d memory regions", r.num, r.addrSet, mem.n)
	}
	num := uint64(r.num)
	eventIdx := features&(1<<FeatureRingEventIdx) != 0
	ev := uint64(0)
	if eventIdx {
		ev = 2 // used_event after the available ring, avail_event after the used ring
	}
	desc := mem.uva(r.addr.desc, descSize*num)
	avail := mem.uva(r.addr.avail, ringHdr+2*num+ev)
	used := mem.uva(r.addr.used, ringHdr+usedElemSize*num+ev)
	switch {
	case desc == nil:
		return fmt.Errorf("descriptor table at %#x (%d bytes) is not inside one memory region", r.addr.desc, descSize*num)
	case avail == nil:
		return fmt.Errorf("available ring at %#x is not inside one memory region", r.addr.avail)
	case used == nil:
		return fmt.Errorf("used ring at %#x is not inside one memory region", r.addr.used)
	case shm.Addr(avail)%2 != 0 || shm.Addr(used)%4 != 0:
		return fmt.Errorf("rings misaligned in the mapping (the region's offset is odd)")
	}
	r.desc, r.avail, r.used, r.eventIdx = desc, avail, used, eventIdx
	r.availOff, r.availShift = 0, 16
	if shm.Addr(avail)%4 != 0 {
		// avail->idx starts a 4-byte word of its own; its upper half is
		// ring[0], which every ring has.
		r.availOff, r.availShift = 2, 0
	}
	r.w.mem, r.w.table, r.w.num = mem, desc, r.num
	r.w.indirect = features&(1<<FeatureRingIndirectDesc) != 0
	r.refused = refusal{}
	return nil
}

// start begins processing at the front-end's base: the port continues
// from used->idx as the guest left it (drivers/vhost/vhost.c:
// vhost_vq_init_access reads it the same way).
func (r *vring) start(rx bool) {
	r.lastAvail, r.availLeft = r.base, 0
	r.usedIdx = uint16(shm.Load32(r.used, 0) >> 16)
	r.published, r.signalledOK = r.usedIdx, false
	r.refused = refusal{}
	r.broken.Store(false)
	r.usedFlags, r.notifyOn = 0, true
	if rx {
		// Room notifications only when a write finds no buffer.
		r.setNotify(false)
	} else {
		r.setNotify(true)
	}
	r.started = true
}

// availIdx reads avail->idx.
func (r *vring) availIdx() uint16 { return uint16(shm.Load32(r.avail, r.availOff) >> r.availShift) }

// refill reads avail->idx and returns how many entries are newly
// available. An index more than a ring ahead of the port breaks the rules.
func (r *vring) refill() (uint16, error) {
	d := r.availIdx() - r.lastAvail
	if uint32(d) > r.num {
		return 0, fmt.Errorf("available index %d is %d entries ahead of %d on a ring of %d", r.lastAvail+d, d, r.lastAvail, r.num)
	}
	r.availLeft = d
	return d, nil
}

// nextHead takes the next available entry's head index; availLeft > 0.
func (r *vring) nextHead() uint32 {
	i := uint32(r.lastAvail) & (r.num - 1)
	r.lastAvail++
	r.availLeft--
	return uint32(binary.LittleEndian.Uint16(r.avail[ringHdr+2*i:]))
}

// pushUsed writes a used element; it is the guest's after publish.
func (r *vring) pushUsed(head uint32, n uint32) {
	o := ringHdr + usedElemSize*(uint32(r.usedIdx)&(r.num-1))
	binary.LittleEndian.PutUint32(r.used[o:], head)
	binary.LittleEndian.PutUint32(r.used[o+4:], n)
	r.usedIdx++
}

// publish writes used->flags and used->idx in one atomic store, after
// the used elements it covers.
func (r *vring) publish() {
	shm.Store32(r.used, 0, uint32(r.usedFlags)|uint32(r.usedIdx)<<16)
	r.published = r.usedIdx
}

// setNotify asks the guest for available-buffer notifications (kicks) or
// tells it none are needed. With EVENT_IDX the guest kicks when its index
// passes avail_event: the port's own index asks for the next entry, and
// half the index space ahead is never reached (a ring holds at most 32768
// entries), so the guest never kicks. Callers that enable must fence and
// re-read avail->idx before waiting.
func (r *vring) setNotify(on bool) {
	if r.eventIdx {
		ev := r.lastAvail
		if !on {
			ev += 0x8000
		}
		binary.LittleEndian.PutUint16(r.used[ringHdr+usedElemSize*r.num:], ev)
	} else {
		if on {
			r.usedFlags &^= usedNoNotify
		} else {
			r.usedFlags |= usedNoNotify
		}
		shm.Store32(r.used, 0, uint32(r.usedFlags)|uint32(r.published)<<16)
	}
	r.notifyOn = on
	shm.Fence(&r.fenceWord)
}

// needEvent is vring_need_event (include/uapi/linux/virtio_ring.h): has
// the index moved from old to new past event?
func needEvent(event, new, old uint16) bool { return new-event-1 < new-old }

// wantsCall reports whether the guest wants a used-buffer notification
// for the entries published since the last decision.
func (r *vring) wantsCall() bool {
	if r.call < 0 {
		return false
	}
	shm.Fence(&r.fenceWord) // the guest's flags/used_event are read after used->idx was written
	if r.eventIdx {
		ev := binary.LittleEndian.Uint16(r.avail[ringHdr+2*r.num:])
		old, ok := r.signalled, r.signalledOK
		r.signalled, r.signalledOK = r.published, true
		if ok && !needEvent(ev, r.published, old) {
			return false
		}
	} else if binary.LittleEndian.Uint16(r.avail)&availNoInterrupt != 0 {
		return false
	}
	return true
}

// setFd replaces one of the ring's eventfds, closing the old one. Its
// O_NONBLOCK flag is left as it is: the front-end shares the open file
// and may change it at any time, so the port never reads or writes it
// with a call that could wait (see eventfd.Signaller and drain).
func setFd(slot *int, fd int) {
	if *slot >= 0 {
		_ = unix.Close(*slot)
	}
	*slot = fd
}
