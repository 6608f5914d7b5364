package uring

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EXPERIMENT: multishot reads with a provided buffer ring against a batch
// of reads, on a socketpair; both copy into the caller's buffers as the
// Endpoint contract needs.

const (
	opReadMultishot  = 49
	sqeBufferSelect  = 1 << 5
	registerPbufRing = 22
	cqeFBuffer       = 1 << 0
	cqeFMore         = 1 << 1
)

type bufReg struct {
	ringAddr    uint64
	ringEntries uint32
	bgid        uint16
	flags       uint16
	_           [3]uint64
}

type ubuf struct {
	addr uint64
	len  uint32
	bid  uint16
	resv uint16
}

type multishot struct {
	r      *ring
	fd     int
	ringFd int
	bufs   []ubuf
	tail   *atomic.Uint32 // the u16 tail lives in bufs[0].resv: we store the u32 that holds it
	data   []byte
	size   int
	tailv  uint16
	armed  bool
}

func newMultishot(t testing.TB, fd, n, size int) *multishot {
	r, err := newRing(uint32(n), opRead)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(-1, 0, n*16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	data, err := unix.Mmap(-1, 0, n*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		t.Fatal(err)
	}
	m := &multishot{r: r, fd: fd, bufs: unsafe.Slice((*ubuf)(unsafe.Pointer(&mem[0])), n), data: data, size: size}
	m.tail = (*atomic.Uint32)(unsafe.Pointer(&mem[12]))
	reg := bufReg{ringAddr: uint64(uintptr(unsafe.Pointer(&mem[0]))), ringEntries: uint32(n), bgid: 1}
	m.ringFd = r.fd
	if _, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(m.ringFd), registerPbufRing, uintptr(unsafe.Pointer(&reg)), 1, 0, 0); e != 0 {
		t.Fatalf("IORING_REGISTER_PBUF_RING: %v", e)
	}
	for i := range n {
		m.provide(uint16(i))
	}
	m.publish()
	t.Cleanup(func() { r.close(); unix.Munmap(mem); unix.Munmap(data) })
	return m
}

func (m *multishot) provide(bid uint16) {
	b := &m.bufs[int(m.tailv)&(len(m.bufs)-1)]
	resv := b.resv // bufs[0].resv is the tail: keep it
	*b = ubuf{addr: uint64(uintptr(unsafe.Pointer(&m.data[int(bid)*m.size]))), len: uint32(m.size), bid: bid, resv: resv}
	m.tailv++
}

func (m *multishot) publish() {
	v := m.tail.Load()
	m.tail.Store(v&0xffff | uint32(m.tailv)<<16)
}

func (m *multishot) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if !m.armed {
		s := m.r.prepare()
		s.opcode, s.fd, s.flags, s.bufIndex = opReadMultishot, int32(m.fd), sqeBufferSelect, 1
		m.armed = true
	}
	if err := m.r.submit(0); err != nil {
		return 0, err
	}
	// with min_complete 0 submit passes no GETEVENTS: run task work too.
	if _, err := m.r.enter(0, 0, enterGetEvents); err != nil {
		return 0, err
	}
	n := 0
	ready := m.r.ready()
	var j uint32
	for j = 0; j < ready && n < len(bufs); j++ {
		c := m.r.completion(j)
		if c.flags&cqeFMore == 0 {
			m.armed = false
		}
		if c.res > 0 && c.flags&cqeFBuffer != 0 {
			bid := uint16(c.flags >> 16)
			k := copy(bufs[n][offset:], m.data[int(bid)*m.size:int(bid)*m.size+int(c.res)])
			sizes[n] = k
			n++
			m.provide(bid)
		}
	}
	m.r.advance(j)
	m.publish()
	if n == 0 {
		return 0, unix.EAGAIN
	}
	return n, nil
}

func BenchmarkReadMechanism(b *testing.B) {
	for _, size := range []int{1500, 65000} {
		for _, queued := range []int{1, 8, 64} {
			for _, mech := range []string{"batch", "multishot"} {
				b.Run(fmt.Sprintf("size=%d/queued=%d/%s", size, queued, mech), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK, 0)
					if err != nil {
						b.Fatal(err)
					}
					defer unix.Close(p[0])
					defer unix.Close(p[1])
					unix.SetsockoptInt(p[0], unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 16<<20)
					unix.SetsockoptInt(p[1], unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
					var rd interface {
						Read([][]byte, []int, int) (int, error)
					}
					if mech == "batch" {
						bt, err := NewBatch(p[1], 64)
						if err != nil {
							b.Fatal(err)
						}
						defer bt.Close()
						rd = batchReader{bt, queued + 1}
					} else {
						rd = newMultishot(b, p[1], 64, 65536)
					}
					msg := make([]byte, size)
					bufs, sizes := make([][]byte, 64), make([]int, 64)
					for i := range bufs {
						bufs[i] = make([]byte, 65536)
					}
					c := tcpu()
					b.ResetTimer()
					for range b.N {
						for range queued {
							if _, err := unix.Write(p[0], msg); err != nil {
								b.Fatal(err)
							}
						}
						got := 0
						for got < queued {
							n, err := rd.Read(bufs, sizes, 0)
							if err != nil && err != unix.EAGAIN {
								b.Fatal(err)
							}
							got += n
						}
					}
					b.ReportMetric(float64(tcpu()-c)/float64(b.N*queued), "cpu-ns/frame")
				})
			}
		}
	}
}

// batchReader reads want at a time, as URingQueue does in steady state.
type batchReader struct {
	b    *Batch
	want int
}

func (r batchReader) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	k := min(r.want, len(bufs))
	if err := r.b.Read(bufs[:k], offset); err != nil {
		return 0, err
	}
	n := 0
	for i := range k {
		if m, err := r.b.Result(i); err == nil {
			sizes[n] = m
			n++
		}
	}
	return n, nil
}

func tcpu() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}
