package vhostuser_test

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// A port slots into the forwarder as an endpoint.
var _ forward.Endpoint = (*vhostuser.Port)(nil)

func TestNegotiation(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	if s := p.State(); s != vhostuser.StateListening {
		t.Fatalf("state %v before a front-end", s)
	}
	d := p.dial(t, vhostusertest.Config{})
	if d.Offered != vhostuser.SupportedFeatures {
		t.Errorf("offered %#x, want %#x", d.Offered, vhostuser.SupportedFeatures)
	}
	if want := uint64(1<<vhostuser.ProtocolMQ | 1<<vhostuser.ProtocolReplyAck | 1<<vhostuser.ProtocolNetMTU); d.Proto != want {
		t.Errorf("protocol features %#x, want %#x", d.Proto, want)
	}
	if d.QueuePairs != 1 {
		t.Errorf("GET_QUEUE_NUM %d, want 1", d.QueuePairs)
	}
	if p.Features() != d.Acked || p.State() != vhostuser.StateRunning || d.HdrLen != 12 {
		t.Errorf("features %#x (driver acked %#x), state %v, header %d", p.Features(), d.Acked, p.State(), d.HdrLen)
	}
	want := vhostuser.Offloads{Csum: true, TSO4: true, TSO6: true, ECN: true, USO4: true, USO6: true}
	if o := p.GuestOffloads(); o != want {
		t.Errorf("offloads %+v", o)
	}
	// NET_SET_MTU with REPLY_ACK: in range accepted, out of range refused
	// without sending the front-end away.
	if err := d.Request(vhostusertest.ReqNetSetMTU, vhostusertest.FlagVersion|vhostusertest.FlagNeedReply, u64(9000)); err != nil {
		t.Fatal(err)
	}
	if r, err := d.Reply(vhostusertest.ReqNetSetMTU); err != nil || le64(r) != 0 || p.MTU() != 9000 {
		t.Fatalf("MTU 9000: reply %x, %v, MTU %d", r, err, p.MTU())
	}
	if err := d.Request(vhostusertest.ReqNetSetMTU, vhostusertest.FlagVersion|vhostusertest.FlagNeedReply, u64(20)); err != nil {
		t.Fatal(err)
	}
	if r, err := d.Reply(vhostusertest.ReqNetSetMTU); err != nil || le64(r) == 0 || p.MTU() != 9000 {
		t.Fatalf("MTU 20: reply %x, %v, MTU %d", r, err, p.MTU())
	}
	d.Close()
	p.wait(t, vhostuser.EventDisconnected)
	if p.State() != vhostuser.StateListening || p.Features() != 0 || p.MTU() != 0 {
		t.Fatalf("after disconnect: state %v features %#x MTU %d", p.State(), p.Features(), p.MTU())
	}
}

// Frames from the guest keep their bytes and header, in every descriptor
// layout; the 12-byte virtio 1.0 header becomes the 10-byte one.
func TestGuestTransmit(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	type sent struct{ h, f []byte }
	var all []sent
	for _, l := range []vhostusertest.Layout{vhostusertest.Flat, vhostusertest.Split, vhostusertest.Indirect} {
		for i, n := range []int{60, 1514, 9000, 65000} {
			h := hdr(0, 0, 0, 0, 0, 0)
			if n > 1514 {
				h = hdr(vnethdr.FlagNeedsCsum, vnethdr.GSOTCPv4, 54, 1448, 34, 16)
			}
			f := frame(n, byte(l), byte(i))
			if err := d.Send(h, f, l); err != nil {
				t.Fatal(err)
			}
			all = append(all, sent{h, f})
		}
	}
	const off = 32
	b, sizes := bufs(len(all), off+70000)
	n, err := p.Read(b, sizes, off)
	if err != nil || n != len(all) {
		t.Fatalf("read %d, %v; want %d", n, err, len(all))
	}
	for i, s := range all {
		mustEqual(t, fmt.Sprintf("frame %d header", i), b[i][off:off+vnethdr.Len], s.h)
		mustEqual(t, fmt.Sprintf("frame %d", i), b[i][off+vnethdr.Len:off+sizes[i]], s.f)
	}
	if d.ReclaimTx() != len(all) {
		t.Fatal("the port did not return every transmit buffer")
	}
	if mac, ok := p.MAC(); !ok || mac.String() != "02:00:00:00:00:02" {
		t.Errorf("learned MAC %v %v", mac, ok)
	}
	st := p.Stats()
	if st.TxFrames != uint64(len(all)) || st.TxDropped != 0 {
		t.Errorf("stats %+v", st)
	}
	// A frame larger than the buffer is reported with its whole size.
	if err := d.Send(hdr(0, 0, 0, 0, 0, 0), frame(3000, 1, 1), vhostusertest.Flat); err != nil {
		t.Fatal(err)
	}
	small, sz := bufs(1, 1000)
	if n, err := p.Read(small, sz, 0); n != 1 || err != nil || sz[0] != vnethdr.Len+3000 {
		t.Fatalf("oversize: %d %v size %d", n, err, sz[0])
	}
}

// Frames to the guest arrive whole, spread over 2 KiB buffers with
// num_buffers saying how many, headers as given.
func TestGuestReceive(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	d.FillRx()
	var in [][]byte
	var frames, hdrs [][]byte
	for i, n := range []int{60, 1514, 2036, 2037, 9000, 65000} {
		h := hdr(0, 0, 0, 0, 0, 0)
		if n > 9000 {
			h = hdr(vnethdr.FlagNeedsCsum, vnethdr.GSOTCPv6, 74, 1428, 54, 16)
		}
		f := frame(n, 7, byte(i))
		in = append(in, withHdr(16, h, f))
		frames, hdrs = append(frames, f), append(hdrs, h)
	}
	irqs := d.Interrupts(vhostusertest.RX)
	n, err := p.Write(in, 16)
	if err != nil || n != len(in) {
		t.Fatalf("write %d, %v", n, err)
	}
	if got := d.Interrupts(vhostusertest.RX) - irqs; got != 1 {
		t.Errorf("%d interrupts for one batch, want 1", got)
	}
	dst := make([]byte, 70000)
	for i := range in {
		h, k, ok, err := d.Recv(dst)
		if err != nil || !ok {
			t.Fatalf("frame %d: %v %v", i, ok, err)
		}
		mustEqual(t, "header", h[:vnethdr.Len], hdrs[i])
		if want := (12 + len(frames[i]) + 2047) / 2048; int(le16(h[10:])) != want {
			t.Errorf("frame %d: num_buffers %d, want %d", i, le16(h[10:]), want)
		}
		mustEqual(t, fmt.Sprintf("frame %d", i), dst[:k], frames[i])
	}
	if st := p.Stats(); st.RxFrames != uint64(len(in)) {
		t.Errorf("stats %+v", st)
	}
}

// Without MRG_RXBUF a frame takes one buffer; the legacy guest (no
// VERSION_1) has a 10-byte header.
func TestGuestReceiveOneBuffer(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		p := newPort(t, vhostuser.Config{})
		feat := vhostuser.SupportedFeatures &^ (1 << vhostuser.FeatureNetMrgRxbuf)
		if legacy {
			feat &^= 1 << vhostuser.FeatureVersion1
		}
		d := p.dial(t, vhostusertest.Config{Features: feat, RxBufSize: 3000})
		wantHdr := 12
		if legacy {
			wantHdr = 10
		}
		if d.HdrLen != wantHdr {
			t.Fatalf("legacy %v: header %d", legacy, d.HdrLen)
		}
		d.PostRx(2)
		f := frame(2900, 1, 1)
		if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), f)}, 0); n != 1 || err != nil {
			t.Fatalf("write: %d %v", n, err)
		}
		// Too big for a buffer: refused, the buffer stays for the next frame.
		if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(3000, 1, 1))}, 0); n != 0 || err != unix.EMSGSIZE {
			t.Fatalf("oversize write: %d %v", n, err)
		}
		if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), f)}, 0); n != 1 || err != nil {
			t.Fatalf("write after refusal: %d %v", n, err)
		}
		dst := make([]byte, 4000)
		for range 2 {
			h, k, ok, err := d.Recv(dst)
			if !ok || err != nil {
				t.Fatal(ok, err)
			}
			if !legacy && le16(h[10:]) != 1 {
				t.Errorf("num_buffers %d, want 1", le16(h[10:]))
			}
			mustEqual(t, "frame", dst[:k], f)
		}
	}
}

// A frame needing an offload the guest did not take is refused; flags are
// cleared for a guest without GUEST_CSUM.
func TestGuestOffloadsRefused(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	feat := vhostuser.SupportedFeatures &^ (1<<vhostuser.FeatureNetGuestCsum | 1<<vhostuser.FeatureNetGuestTSO4 |
		1<<vhostuser.FeatureNetGuestTSO6 | 1<<vhostuser.FeatureNetGuestECN | 1<<vhostuser.FeatureNetGuestUSO4 | 1<<vhostuser.FeatureNetGuestUSO6)
	d := p.dial(t, vhostusertest.Config{Features: feat})
	if o := p.GuestOffloads(); o != (vhostuser.Offloads{}) {
		t.Fatalf("offloads %+v", o)
	}
	d.FillRx()
	for _, h := range [][]byte{
		hdr(vnethdr.FlagNeedsCsum, 0, 0, 0, 34, 16),
		hdr(0, vnethdr.GSOTCPv4, 54, 1448, 0, 0),
		hdr(0, vnethdr.GSOECN, 0, 0, 0, 0),
		hdr(0, vnethdr.GSOUDP, 0, 1400, 0, 0),
	} {
		if n, err := p.Write([][]byte{withHdr(0, h, frame(100, 1, 1))}, 0); n != 0 || err != unix.EOPNOTSUPP {
			t.Errorf("header %x: %d %v", h, n, err)
		}
	}
	if n, err := p.Write([][]byte{withHdr(0, hdr(vnethdr.FlagDataValid, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	h, _, ok, err := d.Recv(make([]byte, 200))
	if !ok || err != nil || h[0] != 0 {
		t.Fatalf("flags %#x (%v %v), want 0", h[0], ok, err)
	}
	if st := p.Stats(); st.RxRefused != 4 {
		t.Errorf("refused %d, want 4", st.RxRefused)
	}
}

// With no receive buffer Write says EAGAIN and asks the guest to kick:
// Fd turns readable when the guest posts, and the next Write goes through.
func TestGuestReceiveNoRoom(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p) // consume the start-up wake
	w := [][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(1000, 1, 1)), withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(1000, 1, 2))}
	if n, err := p.Write(w, 0); n != 0 || err != unix.EAGAIN {
		t.Fatalf("write with no room: %d %v", n, err)
	}
	if pollFd(p.Fd(), 50*time.Millisecond) {
		t.Fatal("Fd readable with nothing posted")
	}
	d.PostRx(1)
	if !pollFd(p.Fd(), time.Second) {
		t.Fatal("Fd not readable after the guest posted a buffer")
	}
	// One buffer: the first frame goes, the second is short of room.
	if n, err := p.Write(w, 0); n != 1 || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	if n, err := p.Write(w[1:], 0); n != 0 || err != unix.EAGAIN {
		t.Fatalf("write: %d %v", n, err)
	}
	if _, err := readOne(p); err != unix.EAGAIN {
		t.Fatal(err)
	}
	if st := p.Stats(); st.RxNoRoom != 2 || st.RxFrames != 1 {
		t.Errorf("stats %+v", st)
	}
}

// EVENT_IDX: a burst costs one kick and one interrupt, not one per frame.
func TestNotificationSuppressionEventIdx(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p)
	for burst := range 3 {
		k0, i0 := d.Kicks(vhostusertest.TX), d.Interrupts(vhostusertest.TX)
		for i := range 60 {
			if err := d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, byte(i)), vhostusertest.Flat); err != nil {
				t.Fatal(err)
			}
		}
		if !pollFd(p.Fd(), time.Second) {
			t.Fatal("no kick")
		}
		b, s := bufs(64, 200)
		if n, err := p.Read(b, s, 0); n != 60 || err != nil {
			t.Fatalf("read %d %v", n, err)
		}
		k, irq := d.Kicks(vhostusertest.TX)-k0, d.Interrupts(vhostusertest.TX)-i0
		if k != 1 || irq != 1 {
			t.Errorf("burst %d: %d kicks and %d interrupts for 60 frames, want 1 and 1", burst, k, irq)
		}
		if pollFd(p.Fd(), 10*time.Millisecond) {
			t.Error("Fd still readable after Read drained the queue")
		}
		d.ReclaimTx()
	}
}

// Without EVENT_IDX the port sets VRING_USED_F_NO_NOTIFY while it drains
// and clears it when the queue runs empty.
func TestNotificationSuppressionFlags(t *testing.T) {
	p := newPort(t, vhostuser.Config{Features: vhostuser.SupportedFeatures &^ (1 << vhostuser.FeatureRingEventIdx)})
	d := p.dial(t, vhostusertest.Config{})
	readOne(p)
	send := func(n int) {
		for i := range n {
			if err := d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, byte(i)), vhostusertest.Flat); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(8)
	b, s := bufs(4, 200)
	if n, _ := p.Read(b, s, 0); n != 4 { // busy: NO_NOTIFY set
		t.Fatal(n)
	}
	k0 := d.Kicks(vhostusertest.TX)
	send(8)
	if k := d.Kicks(vhostusertest.TX) - k0; k != 0 {
		t.Errorf("%d kicks while the port was draining", k)
	}
	readAll(t, p, 12)
	// The last read filled its buffers: only a read that finds the queue
	// empty asks for kicks again.
	if _, err := readOne(p); err != unix.EAGAIN {
		t.Fatal(err)
	}
	d.ReclaimTx()
	k0 = d.Kicks(vhostusertest.TX)
	send(1)
	if k := d.Kicks(vhostusertest.TX) - k0; k != 1 {
		t.Errorf("%d kicks after the port went idle, want 1", k)
	}
}

// GET_VRING_BASE stops the rings where they are; the next start resumes
// there and frames flow again.
func TestStopAndRestart(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	for i := range 5 {
		d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, byte(i)), vhostusertest.Flat)
	}
	readAll(t, p, 5)
	d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 9), vhostusertest.Flat)
	base, err := d.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if base[vhostusertest.TX] != 5 || base[vhostusertest.RX] != 0 {
		t.Fatalf("bases %v, want [0 5]", base)
	}
	p.wait(t, vhostuser.EventStopped)
	if n, err := readOne(p); n != 0 || err != unix.EAGAIN {
		t.Fatalf("read on a stopped ring: %d %v", n, err)
	}
	if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); n != 0 || err != unix.ENETDOWN {
		t.Fatalf("write on a stopped ring: %d %v", n, err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, vhostuser.EventRunning)
	b, _ := readAll(t, p, 1)
	mustEqual(t, "frame after restart", b[0][vnethdr.Len:vnethdr.Len+100], frame(100, 1, 9))
	if st := p.Stats(); st.Resets != 1 || st.Connects != 1 || st.Disconnects != 0 {
		t.Errorf("stats %+v, want one reset", st)
	}
}

// A second front-end is turned away while one is served; once the first
// leaves, a new one gets the port.
func TestOneFrontEndAtATime(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	if _, err := vhostusertest.Dial(p.Path(), vhostusertest.Config{}); err == nil {
		t.Fatal("a second front-end was served")
	}
	d.Close()
	p.wait(t, vhostuser.EventDisconnected)
	d2 := p.dial(t, vhostusertest.Config{})
	d2.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
	readAll(t, p, 1)
	if st := p.Stats(); st.Connects != 2 || st.Disconnects != 1 || st.TurnedAway != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestClosedPort(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	p.Close()
	if _, err := readOne(p); err != unix.EBADFD {
		t.Fatal(err)
	}
	if _, err := p.Write([][]byte{make([]byte, 100)}, 0); err != unix.EBADFD {
		t.Fatal(err)
	}
	if _, err := d.Stop(); err == nil {
		t.Fatal("the front-end still talks to a closed port")
	}
	if e := p.wait(t, vhostuser.EventDisconnected); e.Err != nil {
		t.Fatal(e.Err)
	}
	if p.State() != vhostuser.StateClosed {
		t.Fatal(p.State())
	}
}

func u64(v uint64) []byte { b := make([]byte, 8); putLE64(b, v); return b }

func putLE64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func le64(b []byte) uint64 {
	if len(b) != 8 {
		return 1 << 63
	}
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// Read and Write run at once from two goroutines (two forwarder workers),
// while the front-end changes the rings' eventfds under them.
func TestConcurrentReadWrite(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dial(t, vhostusertest.Config{})
	d.FillRx()
	readOne(p)
	const rounds = 200
	done := make(chan error, 1)
	go func() {
		rb, sizes := bufs(batch, 2000)
		h, f := hdr(0, 0, 0, 0, 0, 0), frame(1000, 1, 1)
		for range rounds {
			for range 8 {
				if err := d.Send(h, f, vhostusertest.Split); err != nil {
					done <- err
					return
				}
			}
			for got := 0; got < 8; {
				n, err := p.Read(rb, sizes, 0)
				if err != nil && err != unix.EAGAIN {
					done <- err
					return
				}
				got += n
			}
			d.ReclaimTx()
		}
		done <- nil
	}()
	wb := [][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(1500, 2, 2))}
	dst := make([]byte, 2000)
	for i := range rounds {
		if n, err := p.Write(wb, 0); n != 1 || err != nil {
			t.Fatalf("write %d: %d %v", i, n, err)
		}
		if _, k, ok, err := d.Recv(dst); !ok || err != nil || k != 1500 {
			t.Fatalf("recv %d: %v %v %d", i, ok, err, k)
		}
		d.FillRx()
		if i%10 == 0 {
			// QEMU swaps the call eventfd when the guest masks an MSI-X
			// vector; a new kick fd for a running ring is taken too.
			ring := i / 10 % 2
			if err := d.SetVringFd(vhostusertest.ReqSetVringCall, ring, d.CallFd(ring)); err != nil {
				t.Fatal(err)
			}
			if err := d.SetVringFd(vhostusertest.ReqSetVringKick, ring, d.KickFd(ring)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.TxFrames != 8*rounds || st.RxFrames != rounds {
		t.Fatalf("stats %+v", st)
	}
}

// A burst as large as the guest's ring goes in one Write: all 256 frames
// of it, one used index moved by 256 and at most one notification, as
// EVENT_IDX (used_event) or VRING_AVAIL_F_NO_INTERRUPT ask.
func TestBurstWholeRing(t *testing.T) {
	for _, eventIdx := range []bool{true, false} {
		t.Run(fmt.Sprintf("event_idx=%v", eventIdx), func(t *testing.T) {
			c := vhostuser.Config{}
			if !eventIdx {
				c.Features = vhostuser.SupportedFeatures &^ (1 << vhostuser.FeatureRingEventIdx)
			}
			p := newPort(t, c)
			d := p.dial(t, vhostusertest.Config{QueueSize: 256})
			wb := make([][]byte, 256)
			for i := range wb {
				wb[i] = withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(60+i, 1, byte(i)))
			}
			dst := make([]byte, 2048)
			for round, noIrq := range []bool{false, true, false} {
				if !eventIdx {
					d.SetNoInterrupt(vhostusertest.RX, noIrq)
				} else if noIrq {
					continue // EVENT_IDX: the guest asks by used_event alone
				}
				if k := d.FillRx(); k != 256 {
					t.Fatalf("round %d: %d buffers posted", round, k)
				}
				used, irqs := d.UsedIdx(vhostusertest.RX), d.Interrupts(vhostusertest.RX)
				if n, err := p.Write(wb, 0); n != 256 || err != nil {
					t.Fatalf("round %d: one Write of 256 to 256 buffers took %d: %v", round, n, err)
				}
				want := uint64(1)
				if noIrq {
					want = 0
				}
				if u, i := d.UsedIdx(vhostusertest.RX)-used, d.Interrupts(vhostusertest.RX)-irqs; u != 256 || i != want {
					t.Fatalf("round %d: used index moved %d, %d interrupts (want 256, %d)", round, u, i, want)
				}
				for i := range wb {
					if _, n, ok, err := d.Recv(dst); !ok || err != nil || n != 60+i {
						t.Fatalf("round %d: frame %d: %d bytes %v %v", round, i, n, ok, err)
					}
				}
			}
		})
	}
}
