package traffic

import (
	mrand "math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Pinger sends ICMP echo requests from the wire to the lab over a raw
// socket made in the wire namespace, one at a time.
type Pinger struct {
	conn net.PacketConn
	dst  *net.IPAddr
	id   uint16
	seq  uint16
	sent time.Time
	buf  []byte
}

// NewPinger opens a Pinger from bed's wire to its lab; it is closed when t
// ends.
func NewPinger(t testing.TB, bed *testbed.Bed) *Pinger {
	t.Helper()
	var conn net.PacketConn
	if err := bed.Do(bed.WireNS, func() error {
		var err error
		conn, err = net.ListenPacket("ip4:icmp", bed.WireAddr.Addr().String())
		return err
	}); err != nil {
		t.Fatalf("ICMP socket in %s: %v", bed.WireNS, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Pinger{conn: conn, dst: &net.IPAddr{IP: bed.LabAddr.Addr().AsSlice()}, id: uint16(mrand.Uint32()), buf: make([]byte, 1500)}
}

// Answering is NewPinger's Pinger once the lab has answered it (one of
// three requests, a second each); t fails when it does not.
func Answering(t testing.TB, bed *testbed.Bed) *Pinger {
	t.Helper()
	p := NewPinger(t, bed)
	if p.Ping(3, time.Second) == 0 {
		t.Fatal("no ping reply before the test")
	}
	return p
}

// Send sends the next echo request.
func (p *Pinger) Send() error {
	p.seq++
	p.sent = time.Now()
	_, err := p.conn.WriteTo(testbed.EchoRequest(p.id, p.seq), p.dst)
	return err
}

// Await waits up to limit for the reply to the last request and returns
// the round-trip time.
func (p *Pinger) Await(limit time.Duration) (time.Duration, bool) {
	p.conn.SetReadDeadline(time.Now().Add(limit))
	for {
		n, from, err := p.conn.ReadFrom(p.buf)
		if err != nil {
			return 0, false
		}
		a, _ := from.(*net.IPAddr)
		id, seq, ok := testbed.EchoReply(p.buf[:n])
		if a != nil && a.IP.Equal(p.dst.IP) && ok && id == p.id && seq == p.seq {
			return time.Since(p.sent), true
		}
	}
}

// Ping sends requests until one is answered within wait, at most tries
// times, and returns how many it sent (0 if none was answered).
func (p *Pinger) Ping(tries int, wait time.Duration) int {
	for i := 1; i <= tries; i++ {
		if p.Send() == nil {
			if _, ok := p.Await(wait); ok {
				return i
			}
		}
	}
	return 0
}

// Answered waits up to wait for the reply to the request Send sent and,
// when none comes (a request may be lost in a burst), pings up to twice
// more: it returns how many more requests that took, and false when none
// of them was answered either.
func (p *Pinger) Answered(wait time.Duration) (retries int, ok bool) {
	if _, ok := p.Await(wait); ok {
		return 0, true
	}
	n := p.Ping(2, wait)
	return n, n > 0
}
