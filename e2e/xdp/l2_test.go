package xdp

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
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
	tapHW := kernel.LinkMAC(t, bed.LabNS, bed.LabIf)
	wireHW := kernel.LinkMAC(t, bed.WireNS, bed.WireIf)
	wire := traffic.OpenRaw(t, bed, bed.WireNS, bed.WireIf)
	lab := traffic.OpenRaw(t, bed, bed.LabNS, bed.LabIf)
	for _, dir := range []struct {
		name     string
		from, to int
		src, dst net.HardwareAddr
	}{{"wire->lab", wire, lab, wireHW, tapHW}, {"lab->wire", lab, wire, tapHW, wireHW}} {
		for kind, f := range l2Frames(dir.src, dir.dst, bed.MTU) {
			if _, err := unix.Write(dir.from, f); err != nil {
				t.Fatalf("%s %s: send: %v", dir.name, kind, err)
			}
			if got := recvFrame(dir.to, dir.src, "tfw-xdp-"); !bytes.Equal(got, f) {
				t.Errorf("%s %s (%d B): got %d B %x\nwant %x", dir.name, kind, len(f), len(got), head(got), head(f))
			}
		}
	}
	if fw.Exited() {
		t.Fatalf("tapfwd exited:\n%s", fw.Output())
	}
}

func head(b []byte) []byte { return b[:min(len(b), 40)] }

// recvFrame waits up to 3 s on fd (an OpenRaw socket) for a frame from src
// carrying marker, and returns it with the VLAN tag the receiving device
// took into the skb put back in front of its EtherType; nil: none came.
func recvFrame(fd int, src net.HardwareAddr, marker string) []byte {
	buf := make([]byte, 16<<10)
	oob := make([]byte, 256)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil || n < 14 || !bytes.Equal(buf[6:12], src) || !bytes.Contains(buf[:n], []byte(marker)) {
			continue
		}
		f := append([]byte(nil), buf[:n]...)
		if tpid, tci, ok := auxTag(oob[:oobn]); ok {
			tag := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, tpid), tci)
			f = append(f[:12:12], append(tag, f[12:]...)...)
		}
		return f
	}
	return nil
}

// auxTag is the VLAN tag of a frame's struct tpacket_auxdata (tp_status,
// tp_len, tp_snaplen: u32; tp_mac, tp_net, tp_vlan_tci, tp_vlan_tpid: u16).
func auxTag(oob []byte) (tpid, tci uint16, ok bool) {
	msgs, _ := unix.ParseSocketControlMessage(oob)
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_PACKET || m.Header.Type != unix.PACKET_AUXDATA || len(m.Data) < 20 {
			continue
		}
		status := binary.NativeEndian.Uint32(m.Data)
		if status&unix.TP_STATUS_VLAN_VALID == 0 {
			return 0, 0, false
		}
		tpid = 0x8100
		if status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
			tpid = binary.NativeEndian.Uint16(m.Data[18:])
		}
		return tpid, binary.NativeEndian.Uint16(m.Data[16:]), true
	}
	return 0, 0, false
}

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
