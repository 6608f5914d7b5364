package afxdp

import (
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/offload"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// maxDescs bounds the descriptors of one frame: the kernel builds an skb of
// at most 1 + MAX_SKB_FRAGS (17) parts (net/xdp/xsk.c: xsk_build_skb,
// EOVERFLOW past that), and never hands out longer RX chains.
const maxDescs = 18

// queue is what Read and Write do to one socket's memory: its UMEM, its four
// rings and the ownership of every chunk. It makes no system call, so tests
// and the fuzz targets run it over Go memory with a fake kernel.
//
// Chunks [0, rxChunks) cycle fill ring -> RX ring -> fill ring; the others
// are TX's: free list -> TX ring -> completion ring -> free list. state[c]
// says where chunk c is: with userspace, on a ring the kernel has not yet
// consumed it from, or consumed by the kernel (only such a chunk may come
// back). Every address and length the kernel hands back is checked against
// that before it is used; what fails is counted in refused and otherwise
// ignored.
type queue struct {
	mem      []byte
	chunk    uint64 // chunk size: a power of two (aligned mode)
	rxChunks uint32
	state    []chunkState
	fillPos  []uint32 // RX chunk c's fill ring index (not masked), while on the ring
	free     []uint32 // TX chunks in userspace (a stack)
	sg       bool     // frames may span chunks (XDP_USE_SG)
	partial  bool     // SocketConfig.PartialChecksums

	fill, comp addrRing
	rx, tx     descRing
	// How far the kernel's consumer index of the fill and TX rings has
	// been followed: the chunks behind it are the kernel's.
	fillSeen, txSeen uint32

	txQueued uint32 // TX descriptors written but not submitted
	txRoom   uint32 // TX ring entries free when the batch began

	// For GSO frames whose segments do not fit a chunk: segmented here
	// first, allocated on first use.
	scratch  []byte
	segOut   [][]byte
	segSizes []int

	refused Refused

	// rxTaken, when set (tests only), runs after each RX descriptor was
	// checked and before its data is copied: where a kernel writing the
	// shared ring could change it.
	rxTaken func()
}

type chunkState uint8

const (
	chunkUser   chunkState = iota // userspace's
	chunkRing                     // on the fill or TX ring, not yet consumed
	chunkKernel                   // consumed by the kernel: it may hand it back
)

// Refused counts what the kernel handed back that failed the checks.
type Refused struct {
	RXDescs   uint64 // RX descriptors: address outside the RX chunks or not the kernel's, length past the chunk, broken multi-buffer chain
	CompAddrs uint64 // completion addresses: outside the TX chunks or not the kernel's
	RingIndex uint64 // ring indexes claiming more entries than the ring has
	FillFull  uint64 // RX chunks the fill ring had no room for (lost to the socket)
	Oversize  uint64 // frames longer than the Read buffer (also counted by the caller as oversize)
}

// init lays out n chunks, the first rxChunks of them for RX, and hands all
// RX chunks to the fill ring. The rings must already point at their memory.
func (q *queue) init(mem []byte, chunk uint64, rxChunks uint32, sg bool) {
	q.mem, q.chunk, q.rxChunks, q.sg = mem, chunk, rxChunks, sg
	n := uint32(uint64(len(mem)) / chunk)
	q.state = make([]chunkState, n)
	q.fillPos = make([]uint32, rxChunks)
	q.free = make([]uint32, 0, n-rxChunks)
	for c := n; c > rxChunks; c-- {
		q.free = append(q.free, c-1)
	}
	q.segOut = make([][]byte, 0, n-rxChunks)
	q.segSizes = make([]int, n-rxChunks)
	room, _ := q.fill.room()
	k := min(room, rxChunks)
	for c := uint32(0); c < k; c++ {
		*q.fill.at(c) = uint64(c) * chunk
		q.state[c], q.fillPos[c] = chunkRing, q.fill.cached+c
	}
	q.fill.submit(k)
}

// consumed marks the chunks of ring entries the kernel's consumer index
// has passed since seen as the kernel's. An index beyond what was produced
// is corrupt and followed only up to the producer's; one behind seen is
// the fill ring's, which an RX descriptor took further (takeRX).
func (q *queue) consumed(r *ring, seen *uint32, chunkAt func(i uint32) uint64) {
	cons := r.cons.Load()
	if *seen-cons <= r.size && cons != *seen {
		return
	}
	if cons-*seen > r.cached-*seen {
		q.refused.RingIndex++
		cons = r.cached
	}
	q.consumedTo(seen, cons, r.mask, chunkAt)
}

// consumedTo marks the chunks of the entries from seen to cons as the
// kernel's.
func (q *queue) consumedTo(seen *uint32, cons, mask uint32, chunkAt func(i uint32) uint64) {
	for ; *seen != cons; *seen++ {
		if c := chunkAt(*seen & mask); c < uint64(len(q.state)) && q.state[c] == chunkRing {
			q.state[c] = chunkKernel
		}
	}
}

func (q *queue) fillConsumed() { q.consumed(&q.fill.ring, &q.fillSeen, q.fillChunk) }

func (q *queue) fillChunk(i uint32) uint64 { return q.fill.addrs[i] / q.chunk }

func (q *queue) txConsumed() {
	q.consumed(&q.tx.ring, &q.txSeen, func(i uint32) uint64 { return q.tx.descs[i].Addr / q.chunk })
}

// takeRX checks an RX descriptor: its chunk must be an RX chunk the kernel
// holds (owned), and the data must lie within that chunk (ok). An owned
// chunk is the caller's again, to give back to the fill ring. d is the
// caller's copy of the ring entry, the one it then copies from: the ring
// is shared memory the kernel may write meanwhile, so it is read once.
func (q *queue) takeRX(d unix.XDPDesc) (c uint32, owned, ok bool) {
	if d.Addr >= uint64(q.rxChunks)*q.chunk {
		return 0, false, false
	}
	c = uint32(d.Addr / q.chunk)
	if q.state[c] == chunkRing {
		// The kernel consumes the fill ring in order but publishes its
		// consumer index lazily (net/xdp/xsk_queue.h: the index is
		// written when its cached view runs out), so a chunk can come
		// back before the index passes it: its coming back proves the
		// kernel consumed every entry up to its own.
		q.consumedTo(&q.fillSeen, q.fillPos[c]+1, q.fill.mask, q.fillChunk)
	}
	if q.state[c] != chunkKernel {
		return 0, false, false
	}
	q.state[c] = chunkUser
	off := d.Addr & (q.chunk - 1)
	ok = uint64(d.Len) <= q.chunk-off && (d.Options == 0 || q.sg && d.Options == unix.XDP_PKT_CONTD)
	return c, true, ok
}

// receive copies up to len(bufs) frames from the RX ring into
// bufs[i][offset+vnethdr.Len:], each behind a vnet header: zero, or, where
// partial checksums are taken (SocketConfig.PartialChecksums),
// FlagNeedsCsum where vnethdr.RecoverPartial finds one.
// sizes[i] is header plus frame; larger than len(bufs[i])-offset when the
// frame did not fit (nothing past the header is then copied). Chunks go
// back to the fill ring as soon as they are copied. It returns the number
// of frames and whether the RX ring still held entries afterwards.
func (q *queue) receive(bufs [][]byte, sizes []int, offset int) (n int, more bool) {
	q.fillConsumed()
	avail, corrupt := q.rx.peek(q.rx.size)
	if corrupt {
		q.refused.RingIndex++
	}
	// fillConsumed counted a fill consumer index past the producer's.
	var used, filled uint32
	for used < avail && n < len(bufs) {
		k := q.chain(used, avail)
		if q.frame(used, k, bufs[n][offset:], &sizes[n], &filled) {
			n++
		}
		used += k
	}
	q.rx.release(used)
	for i := uint32(0); i < filled; i++ {
		c := *q.fill.at(i) / q.chunk
		q.state[c], q.fillPos[c] = chunkRing, q.fill.cached+i
	}
	q.fill.submit(filled)
	return n, used < avail
}

// chain is how many descriptors from the used-th on make one frame: up to
// the first without XDP_PKT_CONTD, at most maxDescs, at most what is
// available (a chain the kernel left open is cut there and then refused).
func (q *queue) chain(used, avail uint32) uint32 {
	k := uint32(1)
	for q.sg && k < maxDescs && used+k < avail && q.rx.at(used+k-1).Options&unix.XDP_PKT_CONTD != 0 {
		k++
	}
	return k
}

// frame handles the k descriptors of one RX frame: every one is checked and
// its chunk refilled; the data is copied behind a vnet header into dst when
// all are good and the chain is closed. It reports whether dst holds a frame.
// Each descriptor is read from the ring once, into d: what was checked is
// what is copied, whatever the ring's memory says by then.
func (q *queue) frame(first, k uint32, dst []byte, size *int, filled *uint32) bool {
	good, total := true, 0
	for j := uint32(0); j < k; j++ {
		d := *q.rx.at(first + j)
		c, owned, ok := q.takeRX(d)
		if q.rxTaken != nil {
			q.rxTaken()
		}
		if !ok {
			good = false
		}
		if ok && vnethdr.Len+total+int(d.Len) <= len(dst) {
			copy(dst[vnethdr.Len+total:], q.mem[d.Addr:d.Addr+uint64(d.Len)])
		}
		if ok {
			total += int(d.Len)
		}
		if owned {
			q.refill(c, filled)
		}
		if j == k-1 && d.Options&unix.XDP_PKT_CONTD != 0 {
			good = false // open chain: maxDescs reached, or the ring ended inside it
		}
	}
	if !good {
		q.refused.RXDescs += uint64(k)
		return false
	}
	*size = vnethdr.Len + total
	if *size > len(dst) {
		q.refused.Oversize++
		return true
	}
	if !q.partial {
		clear(dst[:vnethdr.Len]) // a zero header
		return true
	}
	h, _ := vnethdr.RecoverPartial(dst[vnethdr.Len:*size])
	h.Encode(dst)
	return true
}

// refill gives RX chunk c back to the fill ring. The ring has room up to what the kernel is known to have consumed
// (fillSeen), which may be past its published consumer index.
func (q *queue) refill(c uint32, filled *uint32) {
	if q.fill.cached+*filled-q.fillSeen >= q.fill.size {
		q.refused.FillFull++
		return
	}
	*q.fill.at(*filled) = uint64(c) * q.chunk
	*filled++
}

// reclaim takes the chunks of completed TX frames back.
func (q *queue) reclaim() {
	q.txConsumed()
	n, corrupt := q.comp.peek(q.comp.size)
	if corrupt {
		q.refused.RingIndex++
	}
	for i := uint32(0); i < n; i++ {
		a := *q.comp.at(i)
		c := uint32(a / q.chunk)
		if a < uint64(q.rxChunks)*q.chunk || a >= uint64(len(q.mem)) || q.state[c] != chunkKernel {
			q.refused.CompAddrs++
			continue
		}
		q.state[c] = chunkUser
		q.free = append(q.free, c)
	}
	q.comp.release(n)
}

// beginTX starts a batch of TX descriptors.
func (q *queue) beginTX() {
	room, corrupt := q.tx.room()
	if corrupt {
		q.refused.RingIndex++
	}
	q.txRoom, q.txQueued = room, 0
}

// submitTX publishes the batch's descriptors; it reports whether there were any.
func (q *queue) submitTX() bool {
	k := q.txQueued
	q.tx.submit(k)
	q.txRoom -= k
	q.txQueued = 0
	return k > 0
}

// capacity is how many TX chunks the frames being queued may still take.
func (q *queue) capacity() int { return min(len(q.free), int(q.txRoom-q.txQueued)) }

// put queues b, a vnet header and an Ethernet frame, for transmission:
// a GSO frame as its segments, any other frame with its checksum completed
// (in b, whose header then says so). It queues all of the frame or none:
// EAGAIN when the free chunks or the TX ring lack room now, EMSGSIZE when
// they never could, EINVAL for a header or frame that cannot be sent.
func (q *queue) put(b []byte) error {
	var h vnethdr.Hdr
	if h.Decode(b) != nil || len(b) == vnethdr.Len {
		return unix.EINVAL
	}
	frame := b[vnethdr.Len:]
	if h.IsGSO() {
		return q.putGSO(h, frame)
	}
	if h.Flags&vnethdr.FlagNeedsCsum != 0 {
		if vnethdr.CompleteChecksum(&h, frame) != nil {
			return unix.EINVAL
		}
		h.Encode(b) // a retry of this frame must not complete it again
	}
	return q.putFrame(frame)
}

// chunks is how many chunks a frame of n bytes takes, or an error when it
// cannot be sent at all.
func (q *queue) chunks(n int) (int, error) {
	k := int((uint64(n) + q.chunk - 1) / q.chunk)
	if k > maxDescs || k > 1 && !q.sg || k > cap(q.free) {
		return 0, unix.EMSGSIZE
	}
	return k, nil
}

// putFrame copies frame into as many TX chunks as it needs and queues their
// descriptors, all but the last marked XDP_PKT_CONTD.
func (q *queue) putFrame(frame []byte) error {
	k, err := q.chunks(len(frame))
	if err != nil {
		return err
	}
	if k > q.capacity() {
		return unix.EAGAIN
	}
	for j := 0; j < k; j++ {
		part := frame[j*int(q.chunk) : min((j+1)*int(q.chunk), len(frame))]
		c := q.pop()
		copy(q.mem[uint64(c)*q.chunk:], part)
		opts := uint32(0)
		if j < k-1 {
			opts = unix.XDP_PKT_CONTD
		}
		q.queueDesc(c, len(part), opts)
	}
	return nil
}

func (q *queue) pop() uint32 {
	c := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.state[c] = chunkRing
	return c
}

func (q *queue) queueDesc(c uint32, n int, opts uint32) {
	*q.tx.at(q.txQueued) = unix.XDPDesc{Addr: uint64(c) * q.chunk, Len: uint32(n), Options: opts}
	q.txQueued++
}

// putGSO segments a GSO frame (offload.Segment: finished checksums) and
// queues the segments: straight into TX chunks when a segment fits one,
// else through the scratch buffer and putFrame's chunk chains.
func (q *queue) putGSO(h vnethdr.Hdr, frame []byte) error {
	hdrLen, mss := int(h.HdrLen), int(h.GSOSize)
	if mss == 0 || hdrLen >= len(frame) {
		return unix.EINVAL
	}
	need := (len(frame) - hdrLen + mss - 1) / mss
	if need > cap(q.free) {
		return unix.EMSGSIZE
	}
	if hdrLen+mss <= int(q.chunk) {
		if need > q.capacity() {
			return unix.EAGAIN
		}
		out := q.segOut[:0]
		for j := 1; j <= need; j++ {
			c := uint64(q.free[len(q.free)-j])
			out = append(out, q.mem[c*q.chunk:(c+1)*q.chunk])
		}
		n, err := offload.Segment(h, frame, out, q.segSizes)
		if err != nil {
			return unix.EINVAL
		}
		for j := 0; j < n; j++ {
			q.queueDesc(q.pop(), q.segSizes[j], 0)
		}
		return nil
	}
	return q.putJumboGSO(h, frame, need, hdrLen+mss)
}

// putJumboGSO is putGSO for segments larger than a chunk (MTU 9000 TCP):
// each segment spans chunks, so it is built in scratch and copied.
func (q *queue) putJumboGSO(h vnethdr.Hdr, frame []byte, need, segLen int) error {
	// need*segLen is below twice the frame: segments are larger than a
	// chunk, so there are few of them. Allocated once, grown rarely.
	if len(q.scratch) < need*segLen {
		q.scratch = make([]byte, max(need*segLen, 128<<10))
	}
	out := q.segOut[:0]
	for j := 0; j < need; j++ {
		out = append(out, q.scratch[j*segLen:(j+1)*segLen])
	}
	n, err := offload.Segment(h, frame, out, q.segSizes)
	if err != nil {
		return unix.EINVAL
	}
	total := 0
	for j := 0; j < n; j++ {
		k, err := q.chunks(q.segSizes[j])
		if err != nil {
			return err
		}
		total += k
	}
	if total > q.capacity() {
		return unix.EAGAIN
	}
	for j := 0; j < n; j++ {
		q.putFrame(out[j][:q.segSizes[j]]) // room checked above
	}
	return nil
}
