package afxdp

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// bed is a wire namespace (w0) joined by a veth to a forwarder namespace
// (w1), where the AF_XDP side opens.
type bed struct {
	*testbed.Bed
	t testing.TB
}

func newBed(t testing.TB, mtu int) *bed {
	t.Helper()
	return &bed{Bed: testbed.NewForTest(t, testbed.Config{MTU: mtu}), t: t}
}

// run runs a command in ns and fails the test when it fails.
func (b *bed) run(ns, name string, arg ...string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := b.Run(ctx, ns, name, arg...)
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}

// open opens the AF_XDP side on dev in the forwarder namespace; it is
// closed when the test ends.
func (b *bed) open(c Config) *NIC {
	b.t.Helper()
	var n *NIC
	err := b.Do(b.FwdNS, func() (err error) {
		n, err = Open(c)
		return err
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { n.Close() })
	return n
}

// mac is dev's MAC address in ns.
func (b *bed) mac(ns, dev string) net.HardwareAddr {
	b.t.Helper()
	var hw net.HardwareAddr
	err := b.Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err == nil {
			hw = ifi.HardwareAddr
		}
		return err
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return hw
}

// ethtoolFeature is the state ethtool -k gives for feature on dev in ns
// ("on", "off", "off [fixed]", ...).
func (b *bed) ethtoolFeature(ns, dev, feature string) string {
	b.t.Helper()
	for _, l := range strings.Split(b.run(ns, "ethtool", "-k", dev), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ": "); ok && k == feature {
			return v
		}
	}
	b.t.Fatalf("ethtool -k %s has no %s", dev, feature)
	return ""
}

// frame is one frame Read gave: its vnet header and the frame.
type frame struct {
	hdr  vnethdr.Hdr
	data []byte
}

// readFrames reads from s until it has want frames that keep accepts (nil:
// every frame) or timeout passes.
func readFrames(t testing.TB, s *Socket, want int, timeout time.Duration, keep func([]byte) bool) []frame {
	t.Helper()
	bufs := make([][]byte, 64)
	sizes := make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 32+65536)
	}
	var got []frame
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		n, err := s.Read(bufs, sizes, 22)
		if err == unix.EAGAIN {
			p := []unix.PollFd{{Fd: int32(s.Fd()), Events: unix.POLLIN}}
			unix.Poll(p, 20)
			continue
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		for i := 0; i < n; i++ {
			b := bufs[i][22:]
			if sizes[i] > len(b) {
				t.Fatalf("frame %d of %d bytes did not fit", i, sizes[i])
			}
			if keep != nil && !keep(b[vnethdr.Len:sizes[i]]) {
				continue
			}
			var h vnethdr.Hdr
			h.Decode(b)
			got = append(got, frame{hdr: h, data: append([]byte(nil), b[vnethdr.Len:sizes[i]]...)})
		}
	}
	return got
}

// fromWire sends l2Frames for mtu from w0 to w1 on the wire and returns
// them and what s read from w0 in up to 3 s.
func (b *bed) fromWire(s *Socket, w0, w1 net.HardwareAddr, mtu int) (in [][]byte, got []frame) {
	in = l2Frames(b.t, w0, w1, mtu)
	wire := traffic.WireSocket(b.t, b.Bed, false)
	for _, f := range in {
		if _, err := unix.Write(wire, f); err != nil {
			b.t.Fatal(err)
		}
	}
	return in, readFrames(b.t, s, len(in), 3*time.Second, from(w0))
}

// wireFrames collects the frames from src that w0 receives on fd (an
// OpenRaw socket), for up to timeout or until want came, with any VLAN tag
// the kernel stripped put back where it was. IPv6 frames (the veth's own
// router solicitations and MLD reports) are left out.
func wireFrames(t testing.TB, fd int, src net.HardwareAddr, want int, timeout time.Duration) [][]byte {
	t.Helper()
	buf := make([]byte, 65536)
	oob := make([]byte, 256)
	var got [][]byte
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		n, oobn, _, sa, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			continue
		}
		if ll, ok := sa.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f := append([]byte(nil), buf[:n]...)
		if !from(src)(f) {
			continue
		}
		got = append(got, traffic.Retag(f, oob[:oobn]))
	}
	return got
}

// writeAll writes frames (each behind a vnet header) to s, waiting for
// room when the socket says EAGAIN.
func writeAll(t testing.TB, s *Socket, frames [][]byte) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(frames) > 0 && time.Now().Before(deadline) {
		n, err := s.Write(frames, 0)
		frames = frames[n:]
		if err == unix.EAGAIN {
			p := []unix.PollFd{{Fd: int32(s.Fd()), Events: unix.POLLOUT}}
			unix.Poll(p, 10)
		} else if err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	if len(frames) > 0 {
		t.Fatalf("%d frames not taken within 5 s", len(frames))
	}
}

// from accepts frames with source src that are not IPv6.
func from(src net.HardwareAddr) func([]byte) bool {
	return func(f []byte) bool {
		return len(f) >= 14 && bytes.Equal(f[6:12], src) && !(f[12] == 0x86 && f[13] == 0xdd)
	}
}
