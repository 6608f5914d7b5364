package xdp

import (
	"bytes"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
)

// l2Frames are frames the wire must carry unchanged: 802.1Q (the VLAN
// case), QinQ, an IPv4 fragment, an odd EtherType, the 60-byte minimum and
// the maximum for the MTU. Each carries a marker naming it.
func l2Frames(src, dst net.HardwareAddr, mtu int) map[string][]byte {
	frame := func(kind string, n int, hdr ...byte) []byte {
		f := append(append(append([]byte(nil), dst...), src...), hdr...)
		f = append(f, "tfw-xdp-"+kind...)
		for len(f) < n {
			f = append(f, byte(len(f)))
		}
		return f
	}
	// An IPv4 header with MF set, offset 0, protocol UDP; its checksum is
	// not checked by anyone on the way (no stack looks at a frame to
	// another MAC's raw socket).
	frag := []byte{0x08, 0x00, 0x45, 0, 0, 100, 0, 1, 0x20, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2}
	return map[string][]byte{
		"dot1q":     frame("dot1q", 100, 0x81, 0x00, 0x20, 0x64, 0x88, 0xb5),
		"qinq":      frame("qinq", 100, 0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14, 0x88, 0xb5),
		"fragment":  frame("fragment", 114, frag...),
		"ethertype": frame("ethertype", 80, 0x88, 0xb6),
		"minimum":   frame("min", 60, 0x88, 0xb5),
		"maximum":   frame("max", 14+mtu, 0x88, 0xb5),
	}
}

// TestL2Frames sends each l2Frames frame from the wire to the TAP's MAC
// and from the lab to the wire's, and wants it byte for byte on the other
// side (a tag the receiving device moved into the skb put back from
// PACKET_AUXDATA).
func TestL2Frames(t *testing.T) {
	bed, fw := start(t)
	checkL2(t, bed, fw)
}

func checkL2(t *testing.T, bed *testbed.Bed, fw *testbed.Process) {
	for _, dir := range traffic.Directions(t, bed) {
		for kind, f := range l2Frames(dir.Src, dir.Dst, bed.MTU) {
			if _, err := unix.Write(dir.From, f); err != nil {
				t.Fatalf("%s %s: send: %v", dir.Name, kind, err)
			}
			if got := traffic.RecvFrame(dir.To, dir.Src, "tfw-xdp-"); !bytes.Equal(got, f) {
				t.Errorf("%s %s (%d B): got %d B %x\nwant %x", dir.Name, kind, len(f), len(got), head(got), head(f))
			}
		}
	}
	if fw.Exited() {
		t.Fatalf("tapfwd exited:\n%s", fw.Output())
	}
}

func head(b []byte) []byte { return b[:min(len(b), 40)] }

// TestMTU9000: on a bed with MTU 9000 the maximum frame (9014 B, three
// UMEM chunks) and the other L2 frames cross both ways, and TCP moves.
func TestMTU9000(t *testing.T) {
	testkit.NeedRoot(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder, MTU: 9000})
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), xdpArgs...)
	checkL2(t, bed, fw)
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit: %v\n%s", err, fw.Output())
	}
}
