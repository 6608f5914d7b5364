package vhostuser_test

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/syncbuf"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// A port of two queue pairs offers VIRTIO_NET_F_MQ and says so with
// GET_QUEUE_NUM; each pair is a Queue of its own: frames the guest sends
// on pair k come out of Queue k only, frames written to Queue k reach the
// guest's receive queue k, Fd k wakes for pair k's kicks alone, and the
// port's Stats add up the queues'.
func TestMultiqueue(t *testing.T) {
	p := newPort(t, vhostuser.Config{QueuePairs: 2})
	d := p.dial(t, vhostusertest.Config{QueuePairs: 2})
	if d.QueuePairs != 2 || d.Offered&(1<<vhostuser.FeatureNetMQ) == 0 || p.Features()&(1<<vhostuser.FeatureNetMQ) == 0 {
		t.Fatalf("GET_QUEUE_NUM %d, offered %#x, acked %#x", d.QueuePairs, d.Offered, p.Features())
	}
	qs := p.Queues()
	if len(qs) != 2 || qs[1].Index() != 1 || p.ActivePairs() != 2 {
		t.Fatalf("%d queues, %d active", len(qs), p.ActivePairs())
	}
	for k := range 2 {
		d.Pair(k).FillRx()
	}
	for _, q := range qs {
		readQueue(t, q, 0) // takes the start's wake-ups
	}
	for k := range 2 {
		for i := range 3 + k {
			if err := d.Pair(k).Send(hdr(0, 0, 0, 0, 0, 0), frame(100+k, 1, byte(10*k+i)), vhostusertest.Flat); err != nil {
				t.Fatal(err)
			}
		}
		other := qs[1-k]
		if pollFd(other.Fd(), 0) {
			t.Fatalf("queue %d's Fd readable for pair %d's kick", 1-k, k)
		}
		if !pollFd(qs[k].Fd(), time.Second) {
			t.Fatalf("queue %d's Fd not readable after its kick", k)
		}
		b, sizes := readQueue(t, qs[k], 3+k)
		for i := range 3 + k {
			mustEqual(t, fmt.Sprintf("pair %d frame %d", k, i), b[i][vnethdr.Len:sizes[i]], frame(100+k, 1, byte(10*k+i)))
		}
		readQueue(t, qs[k], 0) // a full batch leaves Fd readable: empty, it is quiet
		f := frame(200+k, 2, byte(k))
		if n, err := qs[k].Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), f)}, 0); n != 1 || err != nil {
			t.Fatalf("write to queue %d: %d %v", k, n, err)
		}
		dst := make([]byte, 2048)
		if _, _, ok, _ := d.Pair(1 - k).Recv(dst); ok {
			t.Fatalf("queue %d's frame on the guest's receive queue %d", k, 1-k)
		}
		if _, n, ok, err := d.Pair(k).Recv(dst); !ok || err != nil {
			t.Fatalf("guest's receive queue %d: %v %v", k, ok, err)
		} else {
			mustEqual(t, fmt.Sprintf("frame to pair %d", k), dst[:n], f)
		}
		if d.Interrupts(2*k+vhostusertest.RX) == 0 {
			t.Errorf("no interrupt on receive queue %d", k)
		}
	}
	s0, s1, all := qs[0].Stats(), qs[1].Stats(), p.Stats()
	if s0.TxFrames != 3 || s1.TxFrames != 4 || s0.RxFrames != 1 || s1.RxFrames != 1 ||
		all.TxFrames != 7 || all.RxFrames != 2 || all.TxBytes != s0.TxBytes+s1.TxBytes || all.Connects != 1 {
		t.Fatalf("stats: queue 0 %+v, queue 1 %+v, port %+v", s0, s1, all)
	}
}

// readQueue reads from q until n frames came or 2 s passed.
func readQueue(t testing.TB, q *vhostuser.Queue, n int) ([][]byte, []int) {
	t.Helper()
	b, sizes := bufs(max(n, 1), 70000)
	got := 0
	for deadline := time.Now().Add(2 * time.Second); ; {
		k, err := q.Read(b[got:], sizes[got:], 0)
		got += k
		if err != nil && err != unix.EAGAIN {
			t.Fatalf("queue %d: read: %v", q.Index(), err)
		}
		if got >= n && (n > 0 || err == unix.EAGAIN) || time.Now().After(deadline) {
			break
		}
	}
	if got != n {
		t.Fatalf("queue %d: read %d frames, want %d", q.Index(), got, n)
	}
	return b, sizes
}

// The guest chooses the pairs it uses (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET,
// which the front-end turns into SET_VRING_ENABLE per ring): a disabled
// pair takes no frames and gives none, ActivePairs counts the leading
// pairs that run, and the port runs while the first does.
func TestMultiqueuePairsEnabled(t *testing.T) {
	p := newPort(t, vhostuser.Config{QueuePairs: 3})
	d := p.dial(t, vhostusertest.Config{QueuePairs: 3})
	q := p.Queues()
	w := [][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}
	if p.ActivePairs() != 3 {
		t.Fatalf("%d active pairs, want 3", p.ActivePairs())
	}
	for k, want := range []int{2, 1} {
		if err := d.EnablePair(2-k, false); err != nil {
			t.Fatal(err)
		}
		if p.ActivePairs() != want {
			t.Fatalf("pairs from %d off: %d active, want %d", 2-k, p.ActivePairs(), want)
		}
	}
	if p.ActivePairs() != 1 || p.State() != vhostuser.StateRunning {
		t.Fatalf("pairs 1 and 2 off: %d active, state %v", p.ActivePairs(), p.State())
	}
	d.Pair(2).FillRx()
	if _, err := q[2].Write(w, 0); err != unix.ENETDOWN {
		t.Fatalf("write to a disabled pair: %v", err)
	}
	d.Pair(2).Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
	readQueue(t, q[2], 0)
	if st := q[2].Stats(); st.TxDropped != 1 || st.TxFrames != 0 {
		t.Fatalf("a disabled pair's frame: %+v", st)
	}
	// Pair 2 back without pair 1: only the leading pairs count.
	if err := d.EnablePair(2, true); err != nil {
		t.Fatal(err)
	}
	if p.ActivePairs() != 1 {
		t.Fatalf("pair 1 off, 2 on: %d active", p.ActivePairs())
	}
	if n, err := q[2].Write(w, 0); n != 1 || err != nil {
		t.Fatalf("write to pair 2, enabled again: %d %v", n, err)
	}
	if err := d.EnablePair(1, true); err != nil {
		t.Fatal(err)
	}
	if p.ActivePairs() != 3 {
		t.Fatalf("all on: %d active", p.ActivePairs())
	}
	if err := d.EnablePair(0, false); err != nil {
		t.Fatal(err)
	}
	p.wait(t, vhostuser.EventStopped)
	if p.ActivePairs() != 0 || p.State() != vhostuser.StateConnected {
		t.Fatalf("pair 0 off: %d active, state %v", p.ActivePairs(), p.State())
	}
}

// A front-end that sets up more rings than the port has (DPDK's
// virtio-user with queues=2 does so without asking GET_QUEUE_NUM, ring 2
// its control queue when VIRTIO_NET_F_MQ is not offered) is refused ring
// by ring, each logged and counted once, and keeps its connection: the
// rings the port has run, GET_VRING_BASE is answered for every ring, and
// the fds it sent for the others are closed.
func TestRingsBeyondThePort(t *testing.T) {
	var log syncbuf.Buffer
	p := newPort(t, vhostuser.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	kinds0 := fdKinds(t)
	d := p.dial(t, vhostusertest.Config{QueuePairs: 2})
	if d.QueuePairs != 1 || d.Offered&(1<<vhostuser.FeatureNetMQ) != 0 {
		t.Fatalf("a single-queue port: GET_QUEUE_NUM %d, offered %#x", d.QueuePairs, d.Offered)
	}
	d.FillRx()
	d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1), vhostusertest.Flat)
	readAll(t, p, 1)
	if n, err := p.Write([][]byte{withHdr(0, hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 1))}, 0); n != 1 || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	// The driver's 12 eventfds, memfd and socket; the port's six eventfds
	// of rings 0 and 1 and its connection, none of rings 2 and 3.
	if k := fdKinds(t); k != plus(kinds0, fdKind{Eventfds: 18, Sockets: 2, Memfds: 1}) {
		t.Fatalf("fds %+v, from %+v", k, kinds0)
	}
	if _, err := d.Stop(); err != nil {
		t.Fatalf("GET_VRING_BASE on every ring: %v", err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	lines := strings.Count(log.String(), "set up a ring beyond the port's")
	if st.ProtocolErrors != 2 || lines != 2 || st.Disconnects != 0 || p.State() != vhostuser.StateRunning {
		t.Fatalf("stats %+v, %d log lines, state %v:\n%s", st, lines, p.State(), log.String())
	}
	if !strings.Contains(log.String(), "ring=2") || !strings.Contains(log.String(), "ring=3") {
		t.Fatalf("log:\n%s", log.String())
	}
	// A new connection is told again.
	d.Close()
	p.wait(t, vhostuser.EventDisconnected)
	p.dial(t, vhostusertest.Config{QueuePairs: 2})
	if st := p.Stats(); st.ProtocolErrors != 4 {
		t.Fatalf("second connection: %+v", st)
	}
}

// A ring on memory another ring uses is refused: pair 1's transmit ring
// pointed at pair 0's (as a new ring started by its kick, as new addresses
// of a running ring, or through a second region mapping the same file
// range) made both queues take every frame pair 0 sent. The ring is
// stopped with a failed need_reply, logged and counted once, the
// connection kept; pair 0 goes on alone.
func TestRingOnAnotherRingsMemory(t *testing.T) {
	for _, how := range []string{"kick", "running", "alias"} {
		t.Run(how, func(t *testing.T) {
			var log syncbuf.Buffer
			p := newPort(t, vhostuser.Config{QueuePairs: 2, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			d := p.dial(t, vhostusertest.Config{QueuePairs: 2})
			if d.Proto&(1<<3) == 0 {
				t.Fatal("REPLY_ACK not negotiated")
			}
			_, desc, avail, used := d.Ring(1)
			base := d.UserAddr(0)
			if how == "alias" {
				base = aliasRegion(t, d)
			}
			if how != "running" {
				mustRequest(t, d, vhostusertest.ReqGetVringBase, state(3, 0), true)
			}
			a := binary.NativeEndian.AppendUint32(nil, 3)
			a = binary.NativeEndian.AppendUint32(a, 0)
			for _, off := range []int{desc, used, avail, 0} {
				a = binary.NativeEndian.AppendUint64(a, base+uint64(off))
			}
			ack := mustRequest(t, d, vhostusertest.ReqSetVringAddr, a, false)
			if how != "running" {
				ack = mustRequest(t, d, vhostusertest.ReqSetVringKick, binary.NativeEndian.AppendUint64(nil, 3), false, d.KickFd(3))
			}
			if ack != 1 {
				t.Errorf("need_reply status %d, want 1 (refused)", ack)
			}
			qs := p.Queues()
			for _, q := range qs {
				readQueue(t, q, 0)
			}
			if err := d.Send(hdr(0, 0, 0, 0, 0, 0), frame(100, 1, 7), vhostusertest.Flat); err != nil {
				t.Fatal(err)
			}
			readQueue(t, qs[0], 1)
			readQueue(t, qs[1], 0)
			st := p.Stats()
			lines := strings.Count(log.String(), "ring on memory another ring uses")
			if st.ProtocolErrors != 1 || lines != 1 || st.Disconnects != 0 || p.State() != vhostuser.StateRunning || p.ActivePairs() != 1 {
				t.Fatalf("stats %+v, %d log lines, state %v, %d pairs active:\n%s", st, lines, p.State(), p.ActivePairs(), log.String())
			}
		})
	}
}

// mustRequest sends a request: one with a reply of its own (hasReply)
// is sent as is and 0 returned, any other with need_reply, and the status
// the port acknowledged it with is returned.
func mustRequest(t *testing.T, d *vhostusertest.Driver, req uint32, payload []byte, hasReply bool, fds ...int) uint64 {
	t.Helper()
	flags := uint32(vhostusertest.FlagVersion)
	if !hasReply {
		flags |= vhostusertest.FlagNeedReply
	}
	if err := d.Request(req, flags, payload, fds...); err != nil {
		t.Fatal(err)
	}
	b, err := d.Reply(req)
	if err != nil {
		t.Fatal(err)
	}
	if hasReply {
		return 0
	}
	return binary.NativeEndian.Uint64(b)
}

// aliasRegion sends a memory table of two regions that both map all of
// the driver's memory, the second at guest and user addresses of its own,
// and returns the second's user address.
func aliasRegion(t *testing.T, d *vhostusertest.Driver) uint64 {
	t.Helper()
	size := uint64(len(d.Mem()))
	alias := d.UserAddr(0) + 2*size
	m := binary.NativeEndian.AppendUint32(nil, 2)
	m = binary.NativeEndian.AppendUint32(m, 0)
	for _, r := range [][2]uint64{{d.GPA(0), d.UserAddr(0)}, {d.GPA(0) + 2*size, alias}} {
		for _, v := range []uint64{r[0], size, r[1], 0} {
			m = binary.NativeEndian.AppendUint64(m, v)
		}
	}
	if ack := mustRequest(t, d, vhostusertest.ReqSetMemTable, m, false, d.Memfd(), d.Memfd()); ack != 0 {
		t.Fatalf("SET_MEM_TABLE of two regions: status %d", ack)
	}
	return alias
}
