package vhostusertest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser/internal/shm"
)

// Config describes the front-end and guest a Driver plays.
type Config struct {
	// QueueSize is the entries of each ring; 0 means 256.
	QueueSize int
	// Features are the virtio features to acknowledge, among those
	// offered; 0 acknowledges those offered that the guest knows (split
	// rings, the offloads, MRG_RXBUF, EVENT_IDX, indirect descriptors, MQ).
	Features uint64
	// RxBufSize is the size of each receive buffer; 0 means 2048 (like
	// Linux's mergeable buffers). Without MRG_RXBUF it must hold a frame.
	RxBufSize int
	// TxSlot is the room for one transmitted frame with its header; 0
	// means 64 KiB plus headers.
	TxSlot int
	// GPA is the guest physical address of the memory; 0 means 1 GiB.
	GPA uint64
	// NoStart negotiates and stops before SET_FEATURES: no memory table,
	// no rings (for protocol tests, which send the rest by hand).
	NoStart bool
	// QueuePairs is how many queue pairs the guest sets up and enables
	// (0 means 1), whatever GET_QUEUE_NUM says, as DPDK's virtio-user
	// does (Features says whether VIRTIO_NET_F_MQ is acknowledged).
	QueuePairs int
	// MemSize, when larger than the rings and buffers take, is the size
	// of the guest's memory file: the rest is holes no one touched.
	MemSize int
}

// Ring indices of the first virtio-net queue pair; pair k's are 2k+RX and
// 2k+TX.
const (
	RX = 0 // receiveq1: the port writes, the guest receives
	TX = 1 // transmitq1: the guest transmits, the port reads
)

// Driver is a front-end connected to a port and the guest behind it. Its
// data-path methods allocate nothing.
type Driver struct {
	cfg  Config
	conn *net.UnixConn
	// Offered and Proto are what the port offered and what protocol
	// features were negotiated; Acked the features acknowledged.
	Offered, Proto, Acked uint64
	// HdrLen is the guest's virtio-net header: 12 or 10 bytes.
	HdrLen int
	// QueuePairs is GET_QUEUE_NUM's answer.
	QueuePairs uint64

	memfd int
	mem   []byte
	gpa   uint64
	num   int
	r     []vring // 2k+RX, 2k+TX: pair k
	// eventfds: kick (guest to port), call (port to guest), err.
	kick, call, errFd []int
	base              []uint32
	txOff, rxOff      []int // pair k's transmit slots and receive buffers
	txSlot, rxBuf     int
	one               [8]byte // what a kick writes; a field, so that no write allocates
}

// guestFeatures are the virtio features the driver's guest takes when
// Config.Features leaves it to it: split rings only (no packed ring, no
// in-order), no dirty logging; offloads, MRG_RXBUF, EVENT_IDX, indirect
// descriptors, MQ, VERSION_1.
const guestFeatures uint64 = 1<<0 | 1<<1 | 1<<3 | 1<<7 | 1<<8 | 1<<9 | 1<<11 | 1<<12 | 1<<13 |
	1<<featMrgRxbuf | 1<<22 | 1<<27 | 1<<28 | 1<<featEventIdx | 1<<featProtocol | 1<<featVersion1 |
	1<<54 | 1<<55 | 1<<56

// Dial connects to the port at path and sets up the device as QEMU 7.2
// does when a virtio-net guest's driver starts.
func Dial(path string, c Config) (*Driver, error) {
	d, err := newDriver(c)
	if err != nil {
		return nil, err
	}
	d.conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("vhostusertest: connect to %s: %w", path, err)
	}
	if err := d.negotiate(); err != nil {
		d.Close()
		return nil, err
	}
	if c.NoStart {
		return d, nil
	}
	if err := d.Start(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// newDriver creates the guest's memory (a memfd, as QEMU's
// memory-backend-memfd) and its eventfds and lays out the rings.
func newDriver(c Config) (*Driver, error) {
	d := &Driver{cfg: c, memfd: -1, num: c.QueueSize, gpa: c.GPA, rxBuf: c.RxBufSize, txSlot: c.TxSlot}
	pairs := max(c.QueuePairs, 1)
	d.r, d.base = make([]vring, 2*pairs), make([]uint32, 2*pairs)
	d.txOff, d.rxOff = make([]int, pairs), make([]int, pairs)
	d.kick, d.call, d.errFd = make([]int, 2*pairs), make([]int, 2*pairs), make([]int, 2*pairs)
	for i := range d.kick {
		d.kick[i], d.call[i], d.errFd[i] = -1, -1, -1
	}
	binary.NativeEndian.PutUint64(d.one[:], 1)
	if d.num == 0 {
		d.num = 256
	}
	if d.gpa == 0 {
		d.gpa = 1 << 30
	}
	if d.rxBuf == 0 {
		d.rxBuf = 2048
	}
	if d.txSlot == 0 {
		d.txSlot = 65536 + 1024
	}
	if d.num < 4 || d.num&(d.num-1) != 0 || d.num > 32768 {
		return nil, fmt.Errorf("vhostusertest: queue size %d", d.num)
	}
	size := max(d.layout(), c.MemSize)
	var err error
	if d.memfd, err = unix.MemfdCreate("vhostusertest", unix.MFD_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	if err = unix.Ftruncate(d.memfd, int64(size)); err != nil {
		d.Close()
		return nil, os.NewSyscallError("ftruncate", err)
	}
	if d.mem, err = unix.Mmap(d.memfd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		d.Close()
		return nil, os.NewSyscallError("mmap", err)
	}
	for i := range d.r {
		for _, fd := range []*int{&d.kick[i], &d.call[i], &d.errFd[i]} {
			if *fd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
				d.Close()
				return nil, os.NewSyscallError("eventfd", err)
			}
		}
	}
	return d, nil
}

func align(v, a int) int { return (v + a - 1) &^ (a - 1) }

// layout places every ring (descriptors, available ring, used ring on its
// own page), then for each pair one transmit slot per four descriptors and
// one receive buffer per descriptor. It returns the memory size.
func (d *Driver) layout() int {
	off := 0
	for i := range d.r {
		r := &d.r[i]
		r.num = uint16(d.num)
		r.desc = off
		r.avail = off + 16*d.num
		r.used = align(r.avail+6+2*d.num, 4096)
		off = align(r.used+6+8*d.num, 4096)
	}
	for k := range d.txOff {
		d.txOff[k] = off
		off += d.num / 4 * d.txSlot
		d.rxOff[k] = align(off, 4096)
		off = align(d.rxOff[k]+d.num*d.rxBuf, 4096)
	}
	return off
}

// negotiate is QEMU's vhost_user_backend_init and vhost_dev_init:
// features, protocol features, queue count, owner, call and error
// eventfds, and the early SET_VRING_ENABLE of virtio-net's peer_attach.
func (d *Driver) negotiate() error {
	var err error
	if d.Offered, err = d.getU64(ReqGetFeatures); err != nil {
		return err
	}
	if d.Offered&(1<<featProtocol) != 0 {
		p, err := d.getU64(ReqGetProtocolFeatures)
		if err != nil {
			return err
		}
		d.Proto = p & (1<<protoMQ | 1<<protoReplyAck | 1<<protoNetMTU)
		if err := d.set(ReqSetProtocolFeatures, u64(d.Proto), false); err != nil {
			return err
		}
		d.QueuePairs = 1
		if d.Proto&(1<<protoMQ) != 0 {
			if d.QueuePairs, err = d.getU64(ReqGetQueueNum); err != nil {
				return err
			}
		}
	}
	if err := d.set(ReqSetOwner, nil, false); err != nil {
		return err
	}
	if _, err := d.getU64(ReqGetFeatures); err != nil {
		return err
	}
	for i := range d.r {
		if err := d.SetVringFd(ReqSetVringCall, i, d.call[i]); err != nil {
			return err
		}
		if err := d.SetVringFd(ReqSetVringErr, i, d.errFd[i]); err != nil {
			return err
		}
	}
	return d.enableAll()
}

// enableAll sends SET_VRING_ENABLE 1 for every ring.
func (d *Driver) enableAll() error {
	for k := range d.txOff {
		if err := d.EnablePair(k, true); err != nil {
			return err
		}
	}
	return nil
}

// EnablePair sends SET_VRING_ENABLE for both rings of pair k (with
// protocol features), as the front-end does for
// VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET. It waits for the REPLY_ACK, when
// negotiated, for a pair GET_QUEUE_NUM said the port has, as QEMU does;
// not for others, as DPDK's virtio-user does (it never asks).
func (d *Driver) EnablePair(k int, on bool) error {
	if d.Offered&(1<<featProtocol) == 0 {
		return nil
	}
	v := uint32(0)
	if on {
		v = 1
	}
	for _, i := range []int{2*k + RX, 2*k + TX} {
		if err := d.set(ReqSetVringEnable, state(uint32(i), v), uint64(k) < d.QueuePairs); err != nil {
			return err
		}
	}
	return nil
}

// SetVringFd sends SET_VRING_KICK/CALL/ERR for ring i; fd < 0 sends the
// no-fd flag.
func (d *Driver) SetVringFd(req uint32, i, fd int) error {
	if fd < 0 {
		return d.set(req, u64(uint64(i)|vringNoFd), false)
	}
	return d.set(req, u64(uint64(i)), false, fd)
}

// Start is QEMU's vhost_dev_start: features, memory table, then each ring
// (size, base, addresses, kick, call) and enabling. After Stop it resumes
// at the bases GET_VRING_BASE answered.
func (d *Driver) Start() error {
	want := d.cfg.Features
	if want == 0 {
		want = d.Offered & guestFeatures
	}
	d.Acked = want & d.Offered
	if d.Offered&(1<<featProtocol) != 0 {
		d.Acked |= 1 << featProtocol
	}
	d.HdrLen = 10
	if d.Acked&(1<<featVersion1|1<<featMrgRxbuf) != 0 {
		d.HdrLen = 12
	}
	if err := d.set(ReqSetFeatures, u64(d.Acked), false); err != nil {
		return err
	}
	if err := d.SendMemTable(); err != nil {
		return err
	}
	for i := range d.r {
		if err := d.startRing(i); err != nil {
			return err
		}
	}
	return d.enableAll()
}

func (d *Driver) startRing(i int) error {
	r := &d.r[i]
	if err := d.set(ReqSetVringNum, state(uint32(i), uint32(d.num)), false); err != nil {
		return err
	}
	if err := d.set(ReqSetVringBase, state(uint32(i), d.base[i]), false); err != nil {
		return err
	}
	a := binary.NativeEndian.AppendUint32(nil, uint32(i))
	a = binary.NativeEndian.AppendUint32(a, 0)
	for _, off := range []int{r.desc, r.used, r.avail, 0} {
		a = binary.NativeEndian.AppendUint64(a, d.UserAddr(off))
	}
	if err := d.set(ReqSetVringAddr, a, false); err != nil {
		return err
	}
	r.eventIdx = d.Acked&(1<<featEventIdx) != 0
	slots := d.num // receive: one buffer per descriptor
	if i%2 == TX {
		slots = d.num / txDescs
	}
	r.init(d.mem, uint16(d.base[i]), slots)
	if err := d.SetVringFd(ReqSetVringKick, i, d.kick[i]); err != nil {
		return err
	}
	return d.SetVringFd(ReqSetVringCall, i, d.call[i])
}

// SendMemTable sends SET_MEM_TABLE with the memory as one region (waiting
// for the REPLY_ACK when negotiated, as QEMU does).
func (d *Driver) SendMemTable() error {
	p := binary.NativeEndian.AppendUint32(nil, 1)
	p = binary.NativeEndian.AppendUint32(p, 0)
	p = binary.NativeEndian.AppendUint64(p, d.gpa)
	p = binary.NativeEndian.AppendUint64(p, uint64(len(d.mem)))
	p = binary.NativeEndian.AppendUint64(p, d.UserAddr(0))
	p = binary.NativeEndian.AppendUint64(p, 0)
	return d.set(ReqSetMemTable, p, true, d.memfd)
}

// Stop is QEMU's vhost_dev_stop: GET_VRING_BASE on each ring, whose
// answer the next Start resumes from.
func (d *Driver) Stop() ([]uint32, error) {
	for i := range d.r {
		if err := d.Request(ReqGetVringBase, FlagVersion, state(uint32(i), 0)); err != nil {
			return d.base, err
		}
		p, err := d.Reply(ReqGetVringBase)
		if err != nil {
			return d.base, err
		}
		if len(p) != 8 || binary.NativeEndian.Uint32(p) != uint32(i) {
			return d.base, fmt.Errorf("vhostusertest: GET_VRING_BASE reply %x", p)
		}
		d.base[i] = binary.NativeEndian.Uint32(p[4:])
	}
	return d.base, nil
}

// Close hangs up and releases the memory and eventfds, like a QEMU that
// exits.
func (d *Driver) Close() {
	if d.conn != nil {
		_ = d.conn.Close()
		d.conn = nil
	}
	if d.mem != nil {
		_ = unix.Munmap(d.mem)
		d.mem = nil
	}
	fds := []*int{&d.memfd}
	for i := range d.kick {
		fds = append(fds, &d.kick[i], &d.call[i], &d.errFd[i])
	}
	for _, fd := range fds {
		if *fd >= 0 {
			_ = unix.Close(*fd)
			*fd = -1
		}
	}
}

// Conn is the socket to the port.
func (d *Driver) Conn() *net.UnixConn { return d.conn }

// Memfd is the guest memory's file.
func (d *Driver) Memfd() int { return d.memfd }

// Mem is the guest's memory; Mem()[off] is guest physical address GPA(off).
func (d *Driver) Mem() []byte { return d.mem }

// GPA is the guest physical address of memory offset off.
func (d *Driver) GPA(off int) uint64 { return d.gpa + uint64(off) }

// UserAddr is the front-end's user address of memory offset off.
func (d *Driver) UserAddr(off int) uint64 { return uint64(shm.Addr(d.mem)) + uint64(off) }

// ErrFull: no transmit slot or receive buffer is free.
var ErrFull = errors.New("vhostusertest: ring full")
