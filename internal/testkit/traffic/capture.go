package traffic

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Capture counts IPv4 frames on a device that match, and how many were
// larger than an MTU-sized frame: GSO super-frames, which the kernel hands
// a packet socket whole. Its counts are final after Finish.
type Capture struct {
	Frames, Big, MaxLen int

	fd    int
	match func(src, dst netip.Addr) bool
	stop  atomic.Bool
	done  chan struct{}
}

// StartCapture counts the frames received on dev in ns whose IPv4 source
// and destination match; it stops when t ends.
func StartCapture(t testing.TB, bed *testbed.Bed, ns, dev string, match func(src, dst netip.Addr) bool) *Capture {
	t.Helper()
	fd := OpenRaw(t, bed, ns, dev)
	// Large enough for a burst of GSO frames while this goroutine sleeps.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
	c := &Capture{fd: fd, match: match, done: make(chan struct{})}
	go c.run()
	t.Cleanup(c.Finish)
	return c
}

func (c *Capture) run() {
	defer close(c.done)
	buf := make([]byte, 64) // headers only: MSG_TRUNC reports the full length
	for !c.stop.Load() {
		n, from, err := unix.Recvfrom(c.fd, buf, unix.MSG_TRUNC)
		if err != nil {
			continue // EAGAIN from SO_RCVTIMEO: check stop
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n < 34 || buf[12] != 0x08 || buf[13] != 0x00 {
			continue
		}
		src, _ := netip.AddrFromSlice(buf[26:30])
		dst, _ := netip.AddrFromSlice(buf[30:34])
		if !c.match(src, dst) {
			continue
		}
		c.Frames++
		if n > 1514 {
			c.Big++
		}
		c.MaxLen = max(c.MaxLen, n)
	}
}

// Finish stops the capture; it may be called again.
func (c *Capture) Finish() {
	c.stop.Store(true)
	<-c.done
}

func (c *Capture) String() string {
	return fmt.Sprintf("%d frames, %d over 1514 bytes, largest %d", c.Frames, c.Big, c.MaxLen)
}
