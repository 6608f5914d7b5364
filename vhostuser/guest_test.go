package vhostuser_test

import (
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
		{"head beyond the ring", tx, "head index", func(d *vhostusertest.Driver, s int) {
			d.PushAvail(tx, 256)
		}},
		{"buffer past memory", tx, "outside guest memory", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, end(d), 100, 0, 0)
			d.PushAvail(tx, 0)
		}},
		{"buffer straddling the end of memory", tx, "outside guest memory", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, end(d)-50, 100, 0, 0)
			d.PushAvail(tx, 0)
		}},
		{"buffer below memory", tx, "outside guest memory", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, 0x1000, 100, 0, 0)
			d.PushAvail(tx, 0)
		}},
		{"length wraps", tx, "wraps", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, ^uint64(0)-10, 100, 0, 0)
			d.PushAvail(tx, 0)
		}},
		{"loop", tx, "loop", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, d.GPA(s), 20, fNext, 1)
			d.PutDesc(tx, 1, d.GPA(s), 20, fNext, 0)
			d.PushAvail(tx, 0)
		}},
		{"next beyond the table", tx, "next index", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, d.GPA(s), 20, fNext, 256)
			d.PushAvail(tx, 0)
		}},
		{"writable buffer to transmit", tx, "direction", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, d.GPA(s), 100, fWrite, 0)
			d.PushAvail(tx, 0)
		}},
		{"available index jumps", tx, "ahead", func(d *vhostusertest.Driver, s int) {
			d.SetAvailIdx(tx, 257)
		}},
		{"indirect with next", tx, "NEXT", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, d.GPA(s), 32, fIndirect|fNext, 1)
			d.PushAvail(tx, 0)
		}},
		{"indirect table length", tx, "multiple of 16", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, d.GPA(s), 20, fIndirect, 0)
			d.PushAvail(tx, 0)
		}},
		{"indirect table past memory", tx, "indirect table", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(tx, 0, end(d)-16, 32, fIndirect, 0)
			d.PushAvail(tx, 0)
		}},
		{"nested indirect", tx, "inside an indirect", func(d *vhostusertest.Driver, s int) {
			putRaw(d, s, 0, d.GPA(s), 32, fIndirect, 0)
			d.PutDesc(tx, 0, d.GPA(s), 32, fIndirect, 0)
			d.PushAvail(tx, 0)
		}},
		{"loop in an indirect table", tx, "loop", func(d *vhostusertest.Driver, s int) {
			putRaw(d, s, 0, d.GPA(s+64), 20, fNext, 1)
			putRaw(d, s, 1, d.GPA(s+64), 20, fNext, 0)
			d.PutDesc(tx, 0, d.GPA(s), 32, fIndirect, 0)
			d.PushAvail(tx, 0)
		}},
		{"indirect next beyond its table", tx, "next index", func(d *vhostusertest.Driver, s int) {
			putRaw(d, s, 0, d.GPA(s+64), 20, fNext, 2)
			d.PutDesc(tx, 0, d.GPA(s), 32, fIndirect, 0)
			d.PushAvail(tx, 0)
		}},
		{"read-only buffer to receive", rx, "direction", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(rx, 0, d.GPA(s), 2048, 0, 0)
			d.PushAvail(rx, 0)
		}},
		{"receive buffer smaller than the header", rx, "smaller than the 12-byte header", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(rx, 0, d.GPA(s), 8, fWrite, 0)
			d.PushAvail(rx, 0)
		}},
		{"receive buffer past memory", rx, "outside guest memory", func(d *vhostusertest.Driver, s int) {
			d.PutDesc(rx, 0, end(d)-100, 2048, fWrite, 0)
			d.PushAvail(rx, 0)
		}},
		{"receive available index jumps", rx, "ahead", func(d *vhostusertest.Driver, s int) {
			d.SetAvailIdx(rx, 300)
		}},
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
	d.PutDesc(vhostusertest.TX, 0, d.GPA(len(d.Mem())), 100, 0, 0)
	d.PushAvail(vhostusertest.TX, 0)
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
