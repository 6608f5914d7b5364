package vhostuser_test

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// longChain puts at memory offset table an indirect table of 1023
// descriptors, all empty but the last (n bytes at data), and makes ring's
// descriptor 0 point at it: 1024 descriptors in all, the most a chain may
// have.
func longChain(d *vhostusertest.Driver, ring, table, data int, n uint32) {
	flags := uint16(0)
	if ring == vhostusertest.RX {
		flags = fWrite
	}
	for i := range 1022 {
		putRaw(d, table, i, d.GPA(data), 0, flags|fNext, uint16(i+1))
	}
	putRaw(d, table, 1022, d.GPA(data), n, flags, 0)
	d.PutDesc(ring, 0, d.GPA(table), 1023*16, fIndirect, 0)
}

// rxArea is the memory of the driver's receive buffers, for tests that
// post none.
func rxArea(d *vhostusertest.Driver) int { return len(d.Mem()) - 256*2048 }

// Issue 22, item 3: every available entry names one legal chain of 1024
// descriptors. A Read walks at most 4096 descriptors, zero-length ones
// included: it takes 4 frames and makes Fd readable for the rest, which
// the next Reads take.
func TestReadBoundsDescriptorWalk(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p)
	table := rxArea(d)
	data := table + 1023*16
	f := frame(100, 1, 1)
	copy(d.Mem()[data+d.HdrLen:], f)
	longChain(d, vhostusertest.TX, table, data, uint32(d.HdrLen+len(f)))
	for range 64 {
		d.PushAvail(vhostusertest.TX, 0)
	}
	b, s := bufs(64, 2000)
	if n, err := p.Read(b, s, 0); n != 4 || err != nil {
		t.Fatalf("read %d, %v; want 4 frames of 1024 descriptors", n, err)
	}
	if !pollFd(p.Fd(), 0) {
		t.Fatal("Fd not readable with frames left")
	}
	got, _ := readAll(t, p, 60)
	for i := range got {
		mustEqual(t, fmt.Sprint("frame ", i), got[i][vnethdr.Len:vnethdr.Len+len(f)], f)
	}
}

// Issue 22, item 3: every receive entry names one chain of 1024
// descriptors, all empty but a last of 2 KiB. A frame that needs more
// than one such chain is refused after two chains (a frame may use 1024
// descriptors), not after walking every entry of the ring; a frame that
// fits one goes; and a Write walks at most 4096 descriptors: it takes 4
// frames, then says EAGAIN with Fd readable.
func TestWriteBoundsDescriptorWalk(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p)
	_, _, _, used := d.Ring(vhostusertest.TX)
	table := used + 8192 // the transmit slots, unused here
	longChain(d, vhostusertest.RX, table, table+1023*16, 2048)
	for range 256 {
		d.PushAvail(vhostusertest.RX, 0)
	}
	big := [][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(9000, 1, 1))}
	for range 2 {
		if n, err := p.Write(big, 0); n != 0 || err != unix.EMSGSIZE {
			t.Fatalf("a frame needing 5 chains of 1024 descriptors: %d %v, want EMSGSIZE", n, err)
		}
	}
	small := make([][]byte, 64)
	for i := range small {
		small[i] = withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(1000, 1, byte(i)))
	}
	for _, from := range []int{0, 4} {
		if n, err := p.Write(small[from:], 0); n != 4 || err != unix.EAGAIN {
			t.Fatalf("write from frame %d: %d %v, want 4 and EAGAIN", from, n, err)
		}
		if !pollFd(p.Fd(), 0) {
			t.Fatal("Fd not readable after a Write that did its share")
		}
		readOne(p)
	}
	if st := p.Stats(); st.RxFrames != 8 || st.RxRefused != 2 || st.RxNoRoom != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Issue 22, item 4: descriptors that overlap in guest memory claim more
// than the guest has: 1023 descriptors each naming all of its 4.8 MB
// claim 4.9 GB. No virtio-net driver sends a frame longer than 64 KiB and
// its headers: the chain is dropped and no byte of it counted. A frame
// cut short by the caller's buffer counts the bytes copied.
func TestTxBytesCarried(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p)
	table, mem := rxArea(d), d.Mem()
	for i := range 1022 {
		putRaw(d, table, i, d.GPA(0), uint32(len(mem)), fNext, uint16(i+1))
	}
	putRaw(d, table, 1022, d.GPA(0), uint32(len(mem)), 0, 0)
	d.PutDesc(vhostusertest.TX, 0, d.GPA(table), 1023*16, fIndirect, 0)
	d.PushAvail(vhostusertest.TX, 0)
	b, s := bufs(1, 70000)
	if n, err := p.Read(b, s, 0); n != 0 || err != unix.EAGAIN {
		t.Fatalf("read %d (size %d), %v; want the chain dropped", n, s[0], err)
	}
	if st := p.Stats(); st.TxFrames != 0 || st.TxBytes != 0 || st.TxDropped != 1 {
		t.Fatalf("stats %+v", st)
	}
	d.ReclaimTx()
	if err := d.Send(hdr(0, 0, 0, 0, 0, 0), frame(3000, 1, 1), vhostusertest.Flat); err != nil {
		t.Fatal(err)
	}
	small, sz := bufs(1, 1000)
	if n, err := p.Read(small, sz, 0); n != 1 || err != nil || sz[0] != vnethdr.Len+3000 {
		t.Fatalf("read %d, %v, size %d", n, err, sz[0])
	}
	if st := p.Stats(); st.TxFrames != 1 || st.TxBytes != 1000-vnethdr.Len {
		t.Fatalf("a frame cut to 1000 bytes: stats %+v, want %d bytes", st, 1000-vnethdr.Len)
	}
}
