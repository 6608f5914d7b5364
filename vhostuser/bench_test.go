package vhostuser_test

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// batch is the frames of one round: a forwarder's batch; the x256
// benchmarks use a whole ring's.
const batch = 64

// guestTx is one round of the guest transmitting len(rb) frames and the
// port reading them as a forwarder's worker does: until a read finds the
// queue empty (which re-arms the guest's kick).
func guestTx(tb testing.TB, p *testPort, d *vhostusertest.Driver, h, f []byte, rb [][]byte, sizes []int) {
	for range rb {
		if err := d.Send(h, f, vhostusertest.Flat); err != nil {
			tb.Fatal(err)
		}
	}
	got := 0
	for {
		n, err := p.Read(rb, sizes, 0)
		got += n
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	if got != len(rb) {
		tb.Fatalf("read %d frames, want %d", got, len(rb))
	}
	d.ReclaimTx()
}

// guestRx is one round of the port writing a batch and the guest taking
// it and posting the buffers again.
func guestRx(tb testing.TB, p *testPort, d *vhostusertest.Driver, wb [][]byte, dst []byte) {
	if n, err := p.Write(wb, 0); n != len(wb) || err != nil {
		tb.Fatalf("wrote %d, %v", n, err)
	}
	for range wb {
		if _, _, ok, err := d.Recv(dst); !ok || err != nil {
			tb.Fatalf("recv: %v %v", ok, err)
		}
	}
	d.FillRx()
}

// rxFrames is how many frames of size fit the guest's 256 posted 2 KiB
// buffers at once, at most n.
func rxFrames(size, n int) int { return min(n, 256/((12+size+2047)/2048)) }

// writeBufs makes the frames of one Write, at most n.
func writeBufs(size, n int, h, f []byte) [][]byte {
	wb := make([][]byte, rxFrames(size, n))
	for i := range wb {
		wb[i] = withHdr(0, h, f)
	}
	return wb
}

// benchSetup connects a guest whose rings have room for n frames in
// flight: the fake guest has a transmit slot per four descriptors.
func benchSetup(tb testing.TB, size, n int) (*testPort, *vhostusertest.Driver, []byte, []byte) {
	p := newPort(tb, vhostuser.Config{})
	d := p.dial(tb, vhostusertest.Config{QueueSize: max(256, 4*n)})
	d.FillRx()
	readOne(p)
	return p, d, hdr(0, 0, 0, 0, 0, 0), frame(size, 1, 1)
}

// The data path allocates nothing per frame, in either direction, with
// the guest's side included.
func TestZeroAllocs(t *testing.T) {
	for _, size := range []int{60, 1514, 9000} {
		p, d, h, f := benchSetup(t, size, batch)
		rb, sizes := bufs(batch, 9100)
		wb := writeBufs(size, batch, h, f)
		dst := make([]byte, 9100)
		if n := testing.AllocsPerRun(50, func() { guestTx(t, p, d, h, f, rb, sizes) }); n != 0 {
			t.Errorf("%d bytes, guest to port: %v allocations per batch", size, n)
		}
		if n := testing.AllocsPerRun(50, func() { guestRx(t, p, d, wb, dst) }); n != 0 {
			t.Errorf("%d bytes, port to guest: %v allocations per batch", size, n)
		}
	}
}

// benchCases are the frame sizes and batches: a forwarder's 64, and for
// small frames bursts of 256 (Read and Write take as many as the guest
// has, with one used-index update and one notification each).
var benchCases = []struct{ size, n int }{{60, batch}, {1514, batch}, {9000, batch}, {65000, batch}, {60, 256}, {1514, 256}}

func benchName(size, n int) string {
	if n == batch {
		return fmt.Sprint(size)
	}
	return fmt.Sprintf("%dx%d", size, n)
}

// BenchmarkGuestToPort: frames per second the guest transmits and Read
// delivers, in batches with a kick and an interrupt per batch (the fake
// guest's work included, which is a part of the figure).
func BenchmarkGuestToPort(b *testing.B) {
	for _, c := range benchCases {
		b.Run(benchName(c.size, c.n), func(b *testing.B) {
			p, d, h, f := benchSetup(b, c.size, c.n)
			rb, sizes := bufs(c.n, c.size+100)
			b.SetBytes(int64(c.n * c.size))
			b.ReportAllocs()
			for b.Loop() {
				guestTx(b, p, d, h, f, rb, sizes)
			}
			b.ReportMetric(float64(c.n*b.N)/b.Elapsed().Seconds(), "pps")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(c.n*b.N), "ns/frame")
		})
	}
}

// BenchmarkPortToGuest: frames per second Write puts on the guest's
// receive queue (2 KiB mergeable buffers) and the guest takes.
func BenchmarkPortToGuest(b *testing.B) {
	for _, c := range benchCases {
		b.Run(benchName(c.size, c.n), func(b *testing.B) {
			p, d, h, f := benchSetup(b, c.size, c.n)
			if c.size == 65000 {
				h = hdr(vnethdr.FlagNeedsCsum, vnethdr.GSOTCPv4, 54, 1448, 34, 16)
			}
			wb := writeBufs(c.size, c.n, h, f)
			dst := make([]byte, 65100)
			b.SetBytes(int64(len(wb) * c.size))
			b.ReportAllocs()
			for b.Loop() {
				guestRx(b, p, d, wb, dst)
			}
			b.ReportMetric(float64(len(wb)*b.N)/b.Elapsed().Seconds(), "pps")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(wb)*b.N), "ns/frame")
		})
	}
}
