package traffic

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
)

// Direction is one way across a bed: the OpenRaw socket a frame is
// written to, the one it should arrive on, and the MACs it goes between.
type Direction struct {
	Name     string
	From, To int
	Src, Dst net.HardwareAddr
}

// Directions opens a raw socket on bed's wire veth and one on its TAP and
// returns wire->lab (to the TAP's MAC) and lab->wire, in that order.
func Directions(t testing.TB, bed *testbed.Bed) [2]Direction {
	t.Helper()
	tapHW, wireHW := kernel.LinkMAC(t, bed.LabNS, bed.LabIf), kernel.LinkMAC(t, bed.WireNS, bed.WireIf)
	wire, lab := OpenRaw(t, bed, bed.WireNS, bed.WireIf), OpenRaw(t, bed, bed.LabNS, bed.LabIf)
	return [2]Direction{{"wire->lab", wire, lab, wireHW, tapHW}, {"lab->wire", lab, wire, tapHW, wireHW}}
}

// RecvFrame waits up to 3 s on fd (an OpenRaw socket) for a frame from src
// carrying marker, and returns it with the VLAN tag the receiving device
// took into the skb put back (Retag); nil: none came.
func RecvFrame(fd int, src net.HardwareAddr, marker string) []byte {
	buf := make([]byte, 16<<10)
	oob := make([]byte, 256)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil || n < 14 || !bytes.Equal(buf[6:12], src) || !bytes.Contains(buf[:n], []byte(marker)) {
			continue
		}
		return Retag(append([]byte(nil), buf[:n]...), oob[:oobn])
	}
	return nil
}

// Retag puts the VLAN tag that oob (a packet socket's control messages)
// says the receiving device took out of frame f back in front of its
// EtherType; f as it was when there is none.
func Retag(f, oob []byte) []byte {
	tpid, tci, ok := AuxTag(oob)
	if !ok || len(f) < 12 {
		return f
	}
	tag := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, tpid), tci)
	return append(f[:12:12], append(tag, f[12:]...)...)
}

// AuxTag is the VLAN tag in a frame's struct tpacket_auxdata (tp_status,
// tp_len, tp_snaplen: u32; tp_mac, tp_net, tp_vlan_tci, tp_vlan_tpid:
// u16); ok false: the frame had none.
func AuxTag(oob []byte) (tpid, tci uint16, ok bool) {
	msgs, _ := unix.ParseSocketControlMessage(oob)
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_PACKET || m.Header.Type != unix.PACKET_AUXDATA || len(m.Data) < 20 {
			continue
		}
		status := binary.NativeEndian.Uint32(m.Data)
		if status&unix.TP_STATUS_VLAN_VALID == 0 {
			return 0, 0, false
		}
		tpid = unix.ETH_P_8021Q
		if status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
			tpid = binary.NativeEndian.Uint16(m.Data[18:])
		}
		return tpid, binary.NativeEndian.Uint16(m.Data[16:]), true
	}
	return 0, 0, false
}
