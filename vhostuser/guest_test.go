package vhostuser_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

const (
	fNext     = 1
	fWrite    = 2
	fIndirect = 4
)

// postHead puts descriptor 0 of ring as given and makes it the next
// available head.
func postHead(d *vhostusertest.Driver, ring int, addr uint64, n uint32, flags, next uint16) {
	d.PutDesc(ring, 0, addr, n, flags, next)
	d.PushAvail(ring, 0)
}

// A guest that breaks the virtqueue rules stops its port: Read and Write
// say ErrBroken, the front-end hears it on the ring's error eventfd, the
// event says what was wrong, nothing outside guest memory is touched and the
// process goes on. Once the driver fixes its ring and the front-end
// restarts the rings, frames flow again.
func TestGuestBreaksRules(t *testing.T) {
	type tcase struct {
		name    string
		ring    int
		want    string
		breakIt func(d *vhostusertest.Driver, scratch int)
	}
	end := func(d *vhostusertest.Driver) uint64 { return d.GPA(len(d.Mem())) }
	tx, rx := vhostusertest.TX, vhostusertest.RX
	cases := []tcase{
		{"head beyond the ring", tx, "head index", func(d *vhostusertest.Driver, s int) { d.PushAvail(tx, 256) }},
		{"buffer past memory", tx, "outside guest memory", func(d *vhostusertest.Driver, s int) { postHead(d, tx, end(d), 100, 0, 0) }},
		{"buffer straddling the end of memory", tx, "outside guest memory", func(d *vhostusertest.Driver, s int) { postHead(d, tx, end(d)-50, 100, 0, 0) }},
		{"buffer below memory", tx, "outside guest memory", func(d *vhostusertest.Driver, s int) { postHead(d, tx, 0x1000, 100, 0, 0) }},
		{"length wraps", tx, "wraps", func(d *vhostusertest.Driver, s int) { postHead(d, tx, ^uint64(0)-10, 100, 0, 0) }},
		{"loop", tx, "loop", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, d.GPA(s), 20, fNext, 1)
			d.PutDesc(tx, 1, d.GPA(s), 20, fNext, 0)
			d.PushAvail(tx, 0)
		}},
		{"next beyond the table", tx, "next index", func(d *vhostusertest.Driver, s int) { postHead(d, tx, d.GPA(s), 20, fNext, 256) }},
		{"writable buffer to transmit", tx, "direction", func(d *vhostusertest.Driver, s int) { postHead(d, tx, d.GPA(s), 100, fWrite, 0) }},
		{"available index jumps", tx, "ahead", func(d *vhostusertest.Driver, s int) { d.SetAvailIdx(tx, 257) }},
		{"indirect with next", tx, "NEXT", func(d *vhostusertest.Driver, s int) { postHead(d, tx, d.GPA(s), 32, fIndirect|fNext, 1) }},
		{"indirect table length", tx, "multiple of 16", func(d *vhostusertest.Driver, s int) { postHead(d, tx, d.GPA(s), 20, fIndirect, 0) }},
		{"indirect table past memory", tx, "indirect table", func(d *vhostusertest.Driver, s int) { postHead(d, tx, end(d)-16, 32, fIndirect, 0) }},
		{"nested indirect", tx, "inside an indirect", func(d *vhostusertest.Driver, s int) {
			putRaw(d, s, 0, d.GPA(s), 32, fIndirect, 0)
			postHead(d, tx, d.GPA(s), 32, fIndirect, 0)
		}},
		{"loop in an indirect table", tx, "loop", func(d *vhostusertest.Driver, s int) {
			putRaw(d, s, 0, d.GPA(s+64), 20, fNext, 1)
			putRaw(d, s, 1, d.GPA(s+64), 20, fNext, 0)
			postHead(d, tx, d.GPA(s), 32, fIndirect, 0)
		}},
		{"indirect next beyond its table", tx, "next index", func(d *vhostusertest.Driver, s int) {
			putRaw(d, s, 0, d.GPA(s+64), 20, fNext, 2)
			postHead(d, tx, d.GPA(s), 32, fIndirect, 0)
		}},
		{"read-only buffer to receive", rx, "direction", func(d *vhostusertest.Driver, s int) { postHead(d, rx, d.GPA(s), 2048, 0, 0) }},
		{"receive buffer smaller than the header", rx, "smaller than the 12-byte header", func(d *vhostusertest.Driver, s int) { postHead(d, rx, d.GPA(s), 8, fWrite, 0) }},
		{"receive buffer past memory", rx, "outside guest memory", func(d *vhostusertest.Driver, s int) { postHead(d, rx, end(d)-100, 2048, fWrite, 0) }},
		{"receive available index jumps", rx, "ahead", func(d *vhostusertest.Driver, s int) { d.SetAvailIdx(rx, 300) }},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			p := newPort(t, vhostuser.Config{})
			d := p.dial(t, vhostusertest.Config{})
			readOne(p)
			_, _, _, used := d.Ring(vhostusertest.TX)
			scratch := used + 8192 // free memory between the rings and the buffers
			c.breakIt(d, scratch)
			var err error
			if c.ring == tx {
				_, err = readOne(p)
			} else {
				_, err = p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0)
			}
			if err != vhostuser.ErrBroken {
				t.Fatalf("got %v, want ErrBroken", err)
			}
			e := p.wait(t, vhostuser.EventBroken)
			if !isGuestErr(e.Err) || !strings.Contains(e.Err.Error(), c.want) {
				t.Fatalf("event error %v, want ErrGuest saying %q", e.Err, c.want)
			}
			if !d.ErrSignalled(c.ring) {
				t.Error("the front-end's error eventfd was not signalled")
			}
			if p.State() != vhostuser.StateBroken || p.Stats().GuestErrors != 1 {
				t.Errorf("state %v, stats %+v", p.State(), p.Stats())
			}
			// The whole port stops.
			if _, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); err != vhostuser.ErrBroken {
				t.Errorf("write after the break: %v", err)
			}
			if _, err := readOne(p); err != vhostuser.ErrBroken {
				t.Errorf("read after the break: %v", err)
			}
		})
	}
}

// putRaw writes descriptor i of a table at memory offset table.
func putRaw(d *vhostusertest.Driver, table, i int, addr uint64, n uint32, flags, next uint16) {
	b := d.Mem()[table+16*i:]
	for k := range 8 {
		b[k] = byte(addr >> (8 * k))
	}
	b[8], b[9], b[10], b[11] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	b[12], b[13], b[14], b[15] = byte(flags), byte(flags>>8), byte(next), byte(next>>8)
}

// After a break the guest's driver resets: the front-end stops the rings,
// the guest fixes its ring, the front-end starts them, frames flow.
func TestGuestRecoversAfterRestart(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	postHead(d, vhostusertest.TX, d.GPA(len(d.Mem())), 100, 0, 0)
	if _, err := readOne(p); err != vhostuser.ErrBroken {
		t.Fatal(err)
	}
	p.wait(t, vhostuser.EventBroken)
	base, err := d.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if base[vhostusertest.TX] != 0 {
		t.Fatalf("the bad entry was taken: base %d", base[vhostusertest.TX])
	}
	if p.State() != vhostuser.StateConnected {
		t.Fatalf("state after stop %v", p.State())
	}
	_, _, _, used := d.Ring(vhostusertest.TX)
	f := frame(100, 1, 1)
	copy(d.Mem()[used+8192+12:], f)
	d.PutDesc(vhostusertest.TX, 0, d.GPA(used+8192), uint32(12+len(f)), 0, 0)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, vhostuser.EventRunning)
	b, _ := readAll(t, p, 1)
	mustEqual(t, "frame", b[0][vnethdr.Len:vnethdr.Len+len(f)], f)
}

// A front-end that shrinks the memory file under the mapping makes the
// port's next access fault: the port stops, the process lives.
func TestShrunkMemoryFaults(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p)
	if err := d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat); err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(d.Memfd(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := readOne(p); err != vhostuser.ErrBroken {
		t.Fatalf("read: %v", err)
	}
	e := p.wait(t, vhostuser.EventBroken)
	if !isGuestErr(e.Err) || !strings.Contains(e.Err.Error(), "fault") {
		t.Fatal(e.Err)
	}
	d.Close()
	p.wait(t, vhostuser.EventDisconnected)
}

// Without EVENT_IDX the port honours VRING_AVAIL_F_NO_INTERRUPT.
func TestNoInterruptFlag(t *testing.T) {
	p := newPort(t, vhostuser.Config{Features: vhostuser.SupportedFeatures &^ (1 << vhostuser.FeatureRingEventIdx)})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p)
	d.SetNoInterrupt(vhostusertest.TX, true)
	d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
	readAll(t, p, 1)
	if n := d.Interrupts(vhostusertest.TX); n != 0 {
		t.Fatalf("%d interrupts with NO_INTERRUPT", n)
	}
	d.SetNoInterrupt(vhostusertest.TX, false)
	d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
	readAll(t, p, 1)
	if n := d.Interrupts(vhostusertest.TX); n != 1 {
		t.Fatalf("%d interrupts, want 1", n)
	}
}

// While the guest has the rings disabled (SET_VRING_ENABLE 0) its frames
// are taken and dropped and none are given to it.
func TestDisabledRings(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	// With need_reply, so that both rings are off before the guest sends:
	// EventStopped comes with the first.
	for i := range 2 {
		if err := d.Request(vhostusertest.ReqSetVringEnable, vhostusertest.FlagVersion|vhostusertest.FlagNeedReply, state(uint32(i), 0)); err != nil {
			t.Fatal(err)
		}
		if r, err := d.Reply(vhostusertest.ReqSetVringEnable); err != nil || le64(r) != 0 {
			t.Fatalf("SET_VRING_ENABLE %d 0: reply %x, %v", i, r, err)
		}
	}
	p.wait(t, vhostuser.EventStopped)
	d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
	deadline := time.Now().Add(2 * time.Second)
	for d.ReclaimTx() == 0 && time.Now().Before(deadline) {
		if n, _ := readOne(p); n != 0 {
			t.Fatal("a frame from a disabled ring")
		}
	}
	if st := p.Stats(); st.TxDropped != 1 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); err != unix.ENETDOWN {
		t.Fatal(err)
	}
}

func state(i, n uint32) []byte {
	b := make([]byte, 8)
	b[0], b[1], b[2], b[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
	b[4], b[5], b[6], b[7] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	return b
}

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
	postHead(d, vhostusertest.TX, d.GPA(table), 1023*16, fIndirect, 0)
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
