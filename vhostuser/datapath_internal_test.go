package vhostuser

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// A port of two queue pairs without a socket over one region of Go
// memory, its rings started at fixed places: for driving the data path
// with arbitrary ring contents.
const (
	fzGPA     = 0x40000
	fzSize    = 0x10000
	fzNum     = 16
	fzRings   = 0x2000 // the first pair's rings live below this offset
	fzRxDesc  = 0x0000
	fzRxAvail = 0x0400
	fzRxUsed  = 0x0800
	fzTxDesc  = 0x1000
	fzTxAvail = 0x1400
	fzTxUsed  = 0x1800
	fzPairs   = 2
	fzPair1   = 0x8000 // the second pair's, laid out the same from here
)

type memPort struct {
	*Port
	backing []byte
	mem     []byte
}

func newMemPort(t testing.TB, features uint64, rings []byte) *memPort {
	mp := &memPort{backing: bytes.Repeat([]byte{0xee}, fzSize+2*guard)}
	mp.mem = mp.backing[guard : guard+fzSize : guard+fzSize]
	clear(mp.mem)
	copy(mp.mem, rings)
	p := makePort(Config{QueuePairs: fzPairs})
	var err error
	if p.sig, err = signals(); err != nil {
		t.Fatal(err)
	}
	if err := p.openFds(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.closeFds)
	p.offered = SupportedFeatures
	p.useFeatures(features)
	p.mem.regions[0] = region{gpa: fzGPA, uaddr: 0x7f0000000000, size: fzSize, mem: mp.mem}
	p.mem.n = 1
	for i := range p.rings {
		a := [2][3]uint64{{fzRxDesc, fzRxAvail, fzRxUsed}, {fzTxDesc, fzTxAvail, fzTxUsed}}[i%2]
		at := 0x7f0000000000 + uint64(i/2)*fzPair1
		r := &p.rings[i]
		// The ring's eventfds, as setVringFd takes them.
		for _, fd := range []*int{&r.kick, &r.call, &r.errFd} {
			if *fd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Close(*fd) })
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(tagKick + i)}
		if err := unix.EpollCtl(p.queueOf(i).epfd, unix.EPOLL_CTL_ADD, r.kick, &ev); err != nil {
			t.Fatal(err)
		}
		r.num, r.enabled, r.addrSet = fzNum, true, true
		r.addr = vringAddr{desc: at + a[0], avail: at + a[1], used: at + a[2]}
		if err := r.setup(&p.mem, features); err != nil {
			t.Fatal(err)
		}
		r.start(i%2 == 0)
	}
	p.refreshActive()
	mp.Port = p
	return mp
}

func (mp *memPort) guardsIntact() bool {
	return bytes.Equal(mp.backing[:guard], bytes.Repeat([]byte{0xee}, guard)) &&
		bytes.Equal(mp.backing[guard+fzSize:], bytes.Repeat([]byte{0xee}, guard))
}

// The guest-written parts of the rings, in the order fuzz input fills
// them: descriptor tables, available rings (with used_event) and used
// rings (with avail_event; their index is where the port starts).
var fzParts = func() (parts [][2]int) {
	for _, at := range []int{0, fzPair1} {
		parts = append(parts,
			[2]int{at + fzTxDesc, descSize * fzNum}, [2]int{at + fzTxAvail, ringHdr + 2*fzNum + 2},
			[2]int{at + fzTxUsed, ringHdr + usedElemSize*fzNum + 2},
			[2]int{at + fzRxDesc, descSize * fzNum}, [2]int{at + fzRxAvail, ringHdr + 2*fzNum + 2},
			[2]int{at + fzRxUsed, ringHdr + usedElemSize*fzNum + 2})
	}
	return parts
}()

// ringsFrom lays compact fuzz input out over the ring memory.
func ringsFrom(in []byte) []byte {
	m := make([]byte, fzPair1+fzRings)
	for _, part := range fzParts {
		in = in[copy(m[part[0]:part[0]+part[1]], in):]
	}
	return m
}

// compact is ringsFrom's inverse, for seeds.
func compact(m []byte) []byte {
	var in []byte
	for _, part := range fzParts {
		in = append(in, m[part[0]:part[0]+part[1]]...)
	}
	return in
}

// A well-formed seed: on the first pair, transmit descriptors 0..3 each a
// frame, receive descriptors 0..7 each a 1 KiB buffer, all available; the
// second pair's rings empty.
func fuzzSeedRings() []byte {
	m := make([]byte, fzPair1+fzRings)
	for i := range 4 {
		putDesc(m[fzTxDesc:], i, fzGPA+0x2000+uint64(i)*0x800, 12+60+uint32(i)*100, 0, 0)
		binary.LittleEndian.PutUint16(m[fzTxAvail+4+2*i:], uint16(i))
	}
	binary.LittleEndian.PutUint16(m[fzTxAvail+2:], 4)
	for i := range 8 {
		putDesc(m[fzRxDesc:], i, fzGPA+0x6000+uint64(i)*0x400, 0x400, descFlagWrite, 0)
		binary.LittleEndian.PutUint16(m[fzRxAvail+4+2*i:], uint16(i))
	}
	binary.LittleEndian.PutUint16(m[fzRxAvail+2:], 8)
	return m
}

// FuzzDataPath: whatever the guest puts in its rings (descriptors,
// indices, flags, event indices) and whatever the frames, Read and Write
// never panic, never touch memory outside the guest's, return only the
// documented errnos, and stop the port exactly when they say ErrBroken. With
// the front-end's call and error eventfds blocking and full, nothing
// waits. A kick eventfd driven to the top of its counter (it polls in
// error) stops the port, and a stopped port's Fd goes quiet once read
// (no worker spins on it). A call that stops short, for want of frames,
// room or descriptors of its turn, leaves the guest asked to kick or Fd
// readable (no frame waits for ever). Bytes counted are bytes carried.
func FuzzDataPath(f *testing.F) {
	all := SupportedFeatures
	seed := compact(fuzzSeedRings())
	f.Add(seed, []byte{0, 1, 2, 3}, all, uint8(0))
	f.Add(seed, []byte{1, 1, 1, 0, 0}, all&^(1<<FeatureNetMrgRxbuf|1<<FeatureRingEventIdx), uint8(1))
	f.Add(seed, []byte{0x81, 0x42}, all&^(1<<FeatureRingIndirectDesc), uint8(0))
	f.Add(seed, []byte{0, opKickTx, 0, opSaturateRx, 0, 1, 0}, all, uint8(1))
	f.Fuzz(func(t *testing.T, rings []byte, ops []byte, features uint64, fds uint8) {
		features &= SupportedFeatures
		mp := newMemPort(t, features, ringsFrom(rings))
		if fds&1 != 0 {
			for i := range mp.rings {
				fill(t, mp.rings[i].call)
				fill(t, mp.rings[i].errFd)
			}
		}
		for i, op := range ops {
			wasBroken := mp.State() == StateBroken
			var err error
			switch op {
			case opKickTx, opKickRx:
				err = mp.sig.Signal(mp.rings[1-int(op-opKickTx)].kick)
			case opSaturateTx, opSaturateRx:
				fill(t, mp.rings[1-int(op-opSaturateTx)].kick)
				err = mp.sig.Signal(mp.rings[1-int(op-opSaturateTx)].kick)
				if err == nil && mp.State() != StateBroken && !pollFd(mp.Fd()) {
					t.Fatalf("op %d: a kick in error, Fd not readable", i)
				}
			default:
				err = mp.fuzzOp(t, op)
			}
			switch err {
			case nil, unix.EAGAIN, unix.EOPNOTSUPP, unix.EMSGSIZE, unix.ENETDOWN:
			case ErrBroken:
				if mp.State() != StateBroken || !mp.allBroken() {
					t.Fatalf("op %d: ErrBroken without the port stopped", i)
				}
			default:
				t.Fatalf("op %d: unexpected error %v", i, err)
			}
			if q := mp.queueFor(op); wasBroken && op&1 == 0 && op < opKickTx && pollFd(q.Fd()) {
				t.Fatalf("op %d: Fd of a stopped port readable after a Read", i)
			}
			if !mp.guardsIntact() {
				t.Fatalf("op %d: memory outside the guest's changed", i)
			}
		}
	})
}

// Fuzz ops other than reads (even) and writes (odd).
const (
	opKickTx     = 0xfc // the guest kicks its transmit queue
	opKickRx     = 0xfd // and its receive queue
	opSaturateTx = 0xfe // the front-end drives the transmit kick eventfd to the top
	opSaturateRx = 0xff
)

func (mp *memPort) allBroken() bool {
	for i := range mp.rings {
		if !mp.rings[i].broken.Load() {
			return false
		}
	}
	return true
}

// queueFor is the queue pair op reads or writes: bit 6 chooses.
func (mp *memPort) queueFor(op byte) *Queue { return mp.queues[int(op>>6)&1] }

// fuzzOp reads (even op) or writes (odd op) a batch shaped by op, and
// checks what comes back.
func (mp *memPort) fuzzOp(t *testing.T, op byte) error {
	q := mp.queueFor(op)
	if op&1 == 0 {
		return mp.fuzzRead(t, q, 1+int(op>>1)%8)
	}
	h := vnethdr.Hdr{Flags: op >> 5 & 3, GSOType: []uint8{0, 1, 4, 5, 0x81}[int(op>>2)%5]}
	w := make([]byte, vnethdr.Len+14+int(op)*37)
	h.Encode(w)
	w[vnethdr.Len+12], w[vnethdr.Len+13] = 0x86, 0xdd
	before := q.Stats().RxBytes
	n, err := q.Write([][]byte{w, w}, 0)
	if got := q.Stats().RxBytes - before; got != uint64(n*(len(w)-vnethdr.Len)) {
		t.Fatalf("wrote %d frames of %d bytes, counted %d bytes", n, len(w)-vnethdr.Len, got)
	}
	if err == unix.EAGAIN && !q.rx.notifyOn && !pollFd(q.Fd()) {
		t.Fatal("Write said EAGAIN with the guest not asked to kick and Fd not readable")
	}
	return err
}

func (mp *memPort) fuzzRead(t *testing.T, q *Queue, k int) error {
	const off = 16
	rb := make([][]byte, k)
	for i := range rb {
		rb[i] = make([]byte, off+700)
	}
	sizes := make([]int, k)
	before := q.Stats().TxBytes
	n, err := q.Read(rb, sizes, off)
	var carried uint64
	for _, s := range sizes[:n] {
		if s < vnethdr.Len || s > vnethdr.Len+maxFrame {
			t.Fatalf("frame size %d", s)
		}
		carried += uint64(min(s, 700) - vnethdr.Len)
	}
	if got := q.Stats().TxBytes - before; got != carried {
		t.Fatalf("read %d frames carrying %d bytes, counted %d", n, carried, got)
	}
	r := q.tx
	idle := r.availIdx() == r.lastAvail && r.notifyOn
	if (err == unix.EAGAIN || err == nil && n < k) && !idle && !pollFd(q.Fd()) {
		t.Fatalf("read %d of %d (%v) with frames waiting, the guest not asked to kick and Fd not readable", n, k, err)
	}
	return err
}

// fill puts eventfd fd in blocking mode with its counter at
// 0xfffffffffffffffe, where a write(2) of it waits.
func fill(t testing.TB, fd int) {
	var b [8]byte
	unix.SetNonblock(fd, true)
	unix.Read(fd, b[:])
	binary.NativeEndian.PutUint64(b[:], 0xfffffffffffffffe)
	if _, err := unix.Write(fd, b[:]); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
}

func pollFd(fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err == nil && n == 1
}

// The data path allocates nothing, also when the guest breaks nothing
// but runs out of room or sends oversize frames.
func TestDataPathNoAllocs(t *testing.T) {
	mp := newMemPort(t, SupportedFeatures, fuzzSeedRings())
	rb := [][]byte{make([]byte, 100), make([]byte, 2000)}
	sizes := make([]int, 2)
	w := make([]byte, vnethdr.Len+500)
	n := testing.AllocsPerRun(100, func() {
		mp.Read(rb, sizes, 0)
		mp.Write([][]byte{w}, 0)
	})
	if n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

// Issue 22, item 3: a refused frame costs bounded work, and a frame as
// long or longer, at the same place with nothing newly posted, costs
// none: the port remembers the refusal. Every receive entry names one
// chain of 1024 descriptors, all empty but a last of 2 KiB.
func TestRefusalRemembered(t *testing.T) {
	const table, data = 0x4000, 0x9000
	mp := newMemPort(t, SupportedFeatures, nil)
	for i := range 1022 {
		putDesc(mp.mem[table:], i, fzGPA+data, 0, descFlagWrite|descFlagNext, uint16(i+1))
	}
	putDesc(mp.mem[table:], 1022, fzGPA+data, 2048, descFlagWrite, 0)
	putDesc(mp.mem[fzRxDesc:], 0, fzGPA+table, 1023*descSize, descFlagIndirect, 0)
	post := func(n int) {
		idx := le16(mp.mem[fzRxAvail+2:])
		for range n {
			binary.LittleEndian.PutUint16(mp.mem[fzRxAvail+4+2*int(idx%fzNum):], 0)
			idx++
		}
		binary.LittleEndian.PutUint16(mp.mem[fzRxAvail+2:], idx)
	}
	post(fzNum)
	r := &mp.rings[0]
	write := func(size int) (walked int, err error) {
		w := make([]byte, vnethdr.Len+size)
		_, err = mp.Write([][]byte{w}, 0)
		return turnDescs - r.w.budget, err
	}
	for i, c := range []struct {
		size, walked int
		err          error
		post         int
	}{
		{9000, 2048, unix.EMSGSIZE, 0}, // two chains, then refused
		{9000, 0, unix.EMSGSIZE, 0},    // remembered
		{20000, 0, unix.EMSGSIZE, 0},   // longer: remembered
		{2000, 1024, nil, 0},           // shorter: walked, and it fits
		{9000, 2048, unix.EMSGSIZE, 0}, // another entry: walked again
		{9000, 2048, unix.EMSGSIZE, 1}, // the guest posted: walked again
	} {
		post(c.post)
		walked, err := write(c.size)
		if err != c.err || walked != c.walked {
			t.Errorf("%d: %d bytes: %v after %d descriptors, want %v after %d", i, c.size, err, walked, c.err, c.walked)
		}
	}
}

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
