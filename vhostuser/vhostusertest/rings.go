package vhostusertest

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser/internal/shm"
)

const (
	descNext     = 1
	descWrite    = 2
	descIndirect = 4
	txDescs      = 4   // descriptors per transmit slot: header and up to three pieces
	indirectRoom = 512 // bytes at the start of a transmit slot for its indirect table
)

// vring is the guest's view of one ring.
type vring struct {
	num               uint16
	desc, avail, used int // offsets in memory
	eventIdx          bool
	mem               []byte
	availIdx          uint16
	availFlags        uint16
	lastUsed          uint16
	free              []uint16 // transmit: free slots; receive: free descriptors
	kicks, irqs       uint64
	fenceWord         uint32
}

func (r *vring) init(mem []byte, base uint16, slots int) {
	r.mem = mem
	if r.free != nil {
		return // a restart: the rings go on as they are
	}
	r.availIdx, r.lastUsed = base, base
	shm.Store32(mem, r.used, uint32(base)<<16)
	binary.LittleEndian.PutUint16(mem[r.avail+4+2*int(r.num):], base) // used_event: interrupt on the next one
	shm.Store32(mem, r.avail, uint32(base)<<16)
	r.free = make([]uint16, slots, r.num)
	for i := range r.free {
		r.free[i] = uint16(slots - 1 - i)
	}
}

// publish makes n new available entries visible and kicks the port if it
// asked for it (virtio 1.x 2.7.13: fence, then avail_event or NO_NOTIFY).
func (d *Driver) publish(ring int, old uint16) {
	r := &d.r[ring]
	shm.Store32(d.mem, r.avail, uint32(r.availFlags)|uint32(r.availIdx)<<16)
	shm.Fence(&r.fenceWord)
	var kick bool
	if r.eventIdx {
		ev := binary.LittleEndian.Uint16(d.mem[r.used+4+8*int(r.num):])
		kick = r.availIdx-ev-1 < r.availIdx-old
	} else {
		kick = binary.LittleEndian.Uint16(d.mem[r.used:])&1 == 0
	}
	if kick {
		if _, err := unix.Write(d.kick[ring], d.one[:]); err == nil {
			r.kicks++
		}
	}
}

// Layout is how a transmitted frame sits in descriptors.
type Layout int

const (
	Flat     Layout = iota // one descriptor: header and frame
	Split                  // the header, then the frame in up to three descriptors
	Indirect               // one descriptor pointing at a table laid out like Split
)

// Pair is the guest's queue pair k: its transmit slots and receive
// buffers. The Driver's own Send, ReclaimTx, PostRx, Recv and FillRx are
// the first pair's.
type Pair struct {
	d *Driver
	k int
}

// Pair is queue pair k, below Config.QueuePairs.
func (d *Driver) Pair(k int) Pair { return Pair{d, k} }

// Send is the first pair's Pair.Send.
func (d *Driver) Send(hdr, frame []byte, l Layout) error { return d.Pair(0).Send(hdr, frame, l) }

// ReclaimTx is the first pair's Pair.ReclaimTx.
func (d *Driver) ReclaimTx() int { return d.Pair(0).ReclaimTx() }

// PostRx is the first pair's Pair.PostRx.
func (d *Driver) PostRx(n int) int { return d.Pair(0).PostRx(n) }

// Recv is the first pair's Pair.Recv.
func (d *Driver) Recv(dst []byte) (hdr [12]byte, n int, ok bool, err error) {
	return d.Pair(0).Recv(dst)
}

// FillRx is the first pair's Pair.FillRx.
func (d *Driver) FillRx() int { return d.Pair(0).FillRx() }

// Send transmits a frame with hdr (vnethdr.Len bytes, the guest's header
// without num_buffers) in front. It returns ErrFull when every transmit
// slot is in flight even after reclaiming.
func (q Pair) Send(hdr, frame []byte, l Layout) error {
	d, ring := q.d, 2*q.k+TX
	if d.HdrLen+len(frame) > d.txSlot-indirectRoom {
		return fmt.Errorf("vhostusertest: frame of %d bytes does not fit a slot", len(frame))
	}
	s, err := q.takeSlot()
	if err != nil {
		return err
	}
	slot := d.txOff[q.k] + s*d.txSlot
	data := slot + indirectRoom
	n := copy(d.mem[data:data+d.HdrLen], hdr)
	clear(d.mem[data+n : data+d.HdrLen])
	copy(d.mem[data+d.HdrLen:], frame)
	head, r := uint16(s*txDescs), &d.r[ring]
	switch l {
	case Flat:
		d.putDesc(r.desc, int(head), d.GPA(data), uint32(d.HdrLen+len(frame)), 0, 0)
	case Split:
		d.chain(r.desc, int(head), data, len(frame))
	case Indirect:
		k := d.chain(slot, 0, data, len(frame))
		d.putDesc(r.desc, int(head), d.GPA(slot), uint32(16*k), descIndirect, 0)
	}
	d.PushAvail(ring, head)
	return nil
}

// SendRunt transmits a chain of n zero bytes, fewer than the header's
// HdrLen: a frame the back-end must drop without passing it on.
func (q Pair) SendRunt(n int) error {
	d, ring := q.d, 2*q.k+TX
	if n >= d.HdrLen {
		return fmt.Errorf("vhostusertest: a runt of %d bytes is no shorter than the %d-byte header", n, d.HdrLen)
	}
	s, err := q.takeSlot()
	if err != nil {
		return err
	}
	data := d.txOff[q.k] + s*d.txSlot + indirectRoom
	clear(d.mem[data : data+n])
	head := uint16(s * txDescs)
	d.putDesc(d.r[ring].desc, int(head), d.GPA(data), uint32(n), 0, 0)
	d.PushAvail(ring, head)
	return nil
}

// takeSlot takes a free transmit slot, reclaiming used ones when none is
// free; ErrFull when every one is in flight.
func (q Pair) takeSlot() (int, error) {
	r := &q.d.r[2*q.k+TX]
	if len(r.free) == 0 {
		q.ReclaimTx()
		if len(r.free) == 0 {
			return 0, ErrFull
		}
	}
	s := int(r.free[len(r.free)-1])
	r.free = r.free[:len(r.free)-1]
	return s, nil
}

// chain writes the header and up to three frame pieces as a descriptor
// chain at table[first:] and returns its length.
func (d *Driver) chain(table, first, data, n int) int {
	piece := (n + 2) / 3
	idx := first
	d.putDesc(table, idx, d.GPA(data), uint32(d.HdrLen), descNext, uint16(idx+1))
	for off := 0; off < n; off += piece {
		idx++
		l := min(piece, n-off)
		flags := uint16(0)
		if off+l < n {
			flags = descNext
		}
		d.putDesc(table, idx, d.GPA(data+d.HdrLen+off), uint32(l), flags, uint16(idx+1))
	}
	if idx == first {
		d.putDesc(table, idx, d.GPA(data), uint32(d.HdrLen), 0, 0)
	}
	return idx - first + 1
}

// PutDesc writes descriptor i of ring's descriptor table.
func (d *Driver) PutDesc(ring, i int, addr uint64, n uint32, flags, next uint16) {
	d.putDesc(d.r[ring].desc, i, addr, n, flags, next)
}

func (d *Driver) putDesc(table, i int, addr uint64, n uint32, flags, next uint16) {
	b := d.mem[table+16*i:]
	binary.LittleEndian.PutUint64(b, addr)
	binary.LittleEndian.PutUint32(b[8:], n)
	binary.LittleEndian.PutUint16(b[12:], flags)
	binary.LittleEndian.PutUint16(b[14:], next)
}

// PushAvail makes descriptor head available on ring and kicks if asked.
func (d *Driver) PushAvail(ring int, head uint16) {
	r := &d.r[ring]
	binary.LittleEndian.PutUint16(d.mem[r.avail+4+2*int(r.availIdx%r.num):], head)
	old := r.availIdx
	r.availIdx++
	d.publish(ring, old)
}

// SetAvailIdx publishes an arbitrary avail->idx (for tests of a guest
// that breaks the rules).
func (d *Driver) SetAvailIdx(ring int, idx uint16) {
	r := &d.r[ring]
	old := r.availIdx
	r.availIdx = idx
	d.publish(ring, old)
}

// ReclaimTx takes back the transmit slots the port used and returns how
// many.
func (q Pair) ReclaimTx() int {
	d := q.d
	r := &d.r[2*q.k+TX]
	u := uint16(shm.Load32(d.mem, r.used) >> 16)
	n := 0
	for ; r.lastUsed != u; r.lastUsed++ {
		id := binary.LittleEndian.Uint32(d.mem[r.used+4+8*int(r.lastUsed%r.num):])
		if int(id)/txDescs < d.num/txDescs && len(r.free) < cap(r.free) {
			r.free = append(r.free, uint16(id/txDescs))
		}
		n++
	}
	d.wantIrq(r)
	return n
}

// wantIrq asks for an interrupt when the port uses the next buffer.
func (d *Driver) wantIrq(r *vring) {
	binary.LittleEndian.PutUint16(d.mem[r.avail+4+2*int(r.num):], r.lastUsed)
}

// PostRx makes up to n free receive buffers available and returns how many.
func (q Pair) PostRx(n int) int {
	d := q.d
	r := &d.r[2*q.k+RX]
	old := r.availIdx
	k := 0
	for ; k < n && len(r.free) > 0; k++ {
		i := int(r.free[len(r.free)-1])
		r.free = r.free[:len(r.free)-1]
		d.putDesc(r.desc, i, d.GPA(d.rxOff[q.k]+i*d.rxBuf), uint32(d.rxBuf), descWrite, 0)
		binary.LittleEndian.PutUint16(d.mem[r.avail+4+2*int(r.availIdx%r.num):], uint16(i))
		r.availIdx++
	}
	if k > 0 {
		d.publish(2*q.k+RX, old)
	}
	return k
}

// Recv takes the next received frame: its header (HdrLen bytes; with
// MRG_RXBUF num_buffers says how many buffers it took) and the frame,
// copied to dst. ok is false when none is there.
func (q Pair) Recv(dst []byte) (hdr [12]byte, n int, ok bool, err error) {
	d := q.d
	r := &d.r[2*q.k+RX]
	u := uint16(shm.Load32(d.mem, r.used) >> 16)
	if u == r.lastUsed {
		d.wantIrq(r)
		return hdr, 0, false, nil
	}
	nb := 1
	for k := 0; k < nb; k++ {
		if r.lastUsed == u {
			return hdr, n, false, fmt.Errorf("vhostusertest: frame of %d buffers, only %d used", nb, k)
		}
		e := d.mem[r.used+4+8*int(r.lastUsed%r.num):]
		id, l := binary.LittleEndian.Uint32(e), int(binary.LittleEndian.Uint32(e[4:]))
		if id >= uint32(r.num) || l > d.rxBuf {
			return hdr, n, false, fmt.Errorf("vhostusertest: used element id %d len %d", id, l)
		}
		buf := d.mem[d.rxOff[q.k]+int(id)*d.rxBuf:][:l]
		r.lastUsed++
		r.free = append(r.free, uint16(id))
		if k == 0 {
			if l < d.HdrLen {
				return hdr, 0, false, fmt.Errorf("vhostusertest: first buffer of %d bytes", l)
			}
			copy(hdr[:], buf[:d.HdrLen])
			if d.Acked&(1<<featMrgRxbuf) != 0 {
				nb = int(binary.LittleEndian.Uint16(hdr[10:]))
			}
			buf = buf[d.HdrLen:]
		}
		n += copy(dst[n:], buf)
	}
	d.wantIrq(r)
	return hdr, n, true, nil
}

// FillRx makes every free receive buffer available.
func (q Pair) FillRx() int { return q.PostRx(q.d.num) }

// SetNoInterrupt sets or clears VRING_AVAIL_F_NO_INTERRUPT on ring (it
// only means something without EVENT_IDX).
func (d *Driver) SetNoInterrupt(ring int, on bool) {
	r := &d.r[ring]
	r.availFlags = 0
	if on {
		r.availFlags = 1
	}
	shm.Store32(d.mem, r.avail, uint32(r.availFlags)|uint32(r.availIdx)<<16)
}

// Interrupts reads ring's call eventfd and returns the notifications the
// port sent so far.
func (d *Driver) Interrupts(ring int) uint64 {
	var b [8]byte
	if n, err := unix.Read(d.call[ring], b[:]); err == nil && n == 8 {
		d.r[ring].irqs += binary.NativeEndian.Uint64(b[:])
	}
	return d.r[ring].irqs
}

// Kicks is how many times the guest notified the port on ring.
func (d *Driver) Kicks(ring int) uint64 { return d.r[ring].kicks }

// ErrSignalled reads ring's error eventfd: did the port report the ring
// broken?
func (d *Driver) ErrSignalled(ring int) bool {
	var b [8]byte
	n, err := unix.Read(d.errFd[ring], b[:])
	return err == nil && n == 8
}

// Ring describes ring i: its size and the memory offsets of its
// descriptor table, available ring and used ring.
func (d *Driver) Ring(i int) (num, desc, avail, used int) {
	r := &d.r[i]
	return int(r.num), r.desc, r.avail, r.used
}

// UsedIdx is the port's used->idx of ring i.
func (d *Driver) UsedIdx(i int) uint16 { return uint16(shm.Load32(d.mem, d.r[i].used) >> 16) }

// KickFd is ring i's kick eventfd.
func (d *Driver) KickFd(i int) int { return d.kick[i] }

// CallFd is ring i's call eventfd.
func (d *Driver) CallFd(i int) int { return d.call[i] }

// ErrFd is ring i's error eventfd.
func (d *Driver) ErrFd(i int) int { return d.errFd[i] }

// SetKickFd makes fd ring i's kick, sent by the next Start; the driver
// owns it from then on and closes the one it had.
func (d *Driver) SetKickFd(i, fd int) {
	_ = unix.Close(d.kick[i])
	d.kick[i] = fd
}
