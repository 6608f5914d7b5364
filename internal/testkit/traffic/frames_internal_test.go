package traffic

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

var (
	macWire = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	macLab  = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
	bed7    = &testbed.Bed{WireAddr: netip.MustParsePrefix("198.18.7.1/24"), LabAddr: netip.MustParsePrefix("198.18.7.2/24"), MTU: 1500}
)

// TestUDPFrames: each frame is byte for byte what gopacket serializes
// with its own checksums for the same headers and payload.
func TestUDPFrames(t *testing.T) {
	frames := UDPFrames(bed7, macWire, macLab, 5201, 101, 3)
	for i, f := range frames {
		payload := make([]byte, 101)
		for j := range payload {
			payload[j] = byte(i + 8 + j)
		}
		eth := &layers.Ethernet{SrcMAC: macWire, DstMAC: macLab, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Id: uint16(i), Protocol: layers.IPProtocolUDP,
			SrcIP: net.IP{198, 18, 7, 1}, DstIP: net.IP{198, 18, 7, 2}}
		udp := &layers.UDP{SrcPort: layers.UDPPort(10000 + i), DstPort: 5201}
		udp.SetNetworkLayerForChecksum(ip)
		b := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			eth, ip, udp, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f, b.Bytes()) {
			t.Errorf("frame %d:\n%x\nwant\n%x", i, f, b.Bytes())
		}
	}
}

// garbler is a Garbler for bed7 with a fixed seed.
func garbler(seed uint64) *Garbler { return newGarbler(bed7, macLab, seed) }

// kindOf is the kind of the frame g made last, from its counts before.
func kindOf(t *testing.T, g *Garbler, before map[string]int) string {
	t.Helper()
	for k, n := range g.Kinds() {
		if n != before[k] {
			before[k] = n
			return k
		}
	}
	t.Fatal("Frame counted no kind")
	return ""
}

// TestGarbler: every frame a packet socket can send (14 to MTU+14 bytes)
// from the garbler's MAC to the TAP's or broadcast, no ARP and no VLAN
// tag but a vlan-tagged kind's 802.1Q one (of at least 20 bytes), and each
// kind malformed the way it says; every kind comes up.
func TestGarbler(t *testing.T) {
	g := garbler(1)
	buf := make([]byte, 1514)
	before := map[string]int{}
	for i := range 5000 {
		f := g.Frame(buf)
		kind := kindOf(t, g, before)
		if len(f) < 14 || len(f) > 1514 || !bytes.Equal(f[6:12], g.src) ||
			!bytes.Equal(f[:6], g.dst[0]) && !bytes.Equal(f[:6], g.dst[1]) {
			t.Fatalf("frame %d (%s): %d bytes %x", i, kind, len(f), f[:min(len(f), 14)])
		}
		et := binary.BigEndian.Uint16(f[12:])
		if kind == "vlan-tagged" {
			if et != 0x8100 || len(f) < 20 {
				t.Errorf("frame %d: vlan-tagged, EtherType %#x, %d bytes", i, et, len(f))
			}
			continue
		}
		if et == 0x0806 || et == 0x8100 || et == 0x88a8 {
			t.Errorf("frame %d (%s): EtherType %#x", i, kind, et)
		}
		checkKind(t, i, kind, f)
	}
	if len(g.Kinds()) != len(garbleKinds) {
		t.Errorf("kinds made: %v", g.Kinds())
	}
}

// checkKind checks frame i of the given kind.
func checkKind(t *testing.T, i int, kind string, f []byte) {
	t.Helper()
	et := binary.BigEndian.Uint16(f[12:])
	ipLen := func() int { return int(binary.BigEndian.Uint16(f[16:])) }
	csumOK := func(ihl int) bool { return testbed.Checksum(f[14:14+4*ihl]) == 0 }
	var ok bool
	switch kind {
	case "max-size":
		ok = len(f) == 1514 && et == 0x0800 && ipLen() == 1500 && csumOK(5)
	case "tiny":
		ok = len(f) <= 20
	case "zero-ethertype":
		ok = et < 0x600
	case "ipv6-garbled":
		ok = et == 0x86dd && (len(f) < 15 || f[14]>>4 == 6)
	case "ip-truncated":
		ok = et == 0x0800 && len(f) < 34
	case "ip-len-long":
		ok = et == 0x0800 && ipLen() > len(f)-14 && csumOK(5)
	case "ip-len-short":
		ok = et == 0x0800 && ipLen() < len(f)-14 && csumOK(5)
	case "ip-bad-ihl":
		ihl := int(f[14] & 0x0f)
		ok = et == 0x0800 && (ihl < 5 || 14+4*ihl > len(f))
	case "l4-truncated", "ip-options":
		ihl := int(f[14] & 0x0f)
		ok = et == 0x0800 && ihl >= 5 && 14+4*ihl <= len(f) && ipLen() == len(f)-14 && csumOK(ihl)
	default:
		ok = true
	}
	if !ok {
		t.Errorf("frame %d is no %s frame: %d bytes %x", i, kind, len(f), f[:min(len(f), 40)])
	}
}

// auxdata is a control message with a struct tpacket_auxdata of status,
// tci and tpid.
func auxdata(status uint32, tci, tpid uint16) []byte {
	b := make([]byte, unix.CmsgSpace(20))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.SOL_PACKET, unix.PACKET_AUXDATA
	h.SetLen(unix.CmsgLen(20))
	d := b[unix.CmsgLen(0):]
	binary.NativeEndian.PutUint32(d, status)
	binary.NativeEndian.PutUint16(d[16:], tci)
	binary.NativeEndian.PutUint16(d[18:], tpid)
	return b
}

// TestRetag: the tag PACKET_AUXDATA reports goes back behind the MACs
// (802.1Q when the TPID is not valid), and a frame without one is left
// as it was.
func TestRetag(t *testing.T) {
	f := append(append(append([]byte{}, macLab...), macWire...), 0x08, 0x00, 0x45)
	for _, c := range []struct {
		name string
		oob  []byte
		want []byte
	}{
		{"no tag", auxdata(0, 5, 0x8100), f},
		{"no auxdata", nil, f},
		{"802.1Q, no TPID", auxdata(unix.TP_STATUS_VLAN_VALID, 0x2005, 0x88a8), append(append(append([]byte{}, f[:12]...), 0x81, 0x00, 0x20, 0x05), f[12:]...)},
		{"802.1ad", auxdata(unix.TP_STATUS_VLAN_VALID|unix.TP_STATUS_VLAN_TPID_VALID, 7, 0x88a8), append(append(append([]byte{}, f[:12]...), 0x88, 0xa8, 0, 7), f[12:]...)},
	} {
		if got := Retag(append([]byte{}, f...), c.oob); !bytes.Equal(got, c.want) {
			t.Errorf("%s: %x, want %x", c.name, got, c.want)
		}
	}
}

// TestTagged: the tag sits between the MACs and the IPv4 EtherType, with
// the TCI's priority and VLAN id; a short frame is padded with zeros to
// Ethernet's 60 bytes.
func TestTagged(t *testing.T) {
	inner := bytes.Repeat([]byte{0x45, 1, 2}, 20)
	got := Tagged(t, macWire, macLab, 0xa00f, inner)
	want := append(append(append([]byte{}, macLab...), macWire...), 0x81, 0x00, 0xa0, 0x0f, 0x08, 0x00)
	if !bytes.Equal(got, append(want, inner...)) {
		t.Errorf("Tagged: %x, want %x", got, append(want, inner...))
	}
	got = Tagged(t, macWire, macLab, 5, []byte{0x45})
	if len(got) != 60 || got[15] != 5 || got[18] != 0x45 || !bytes.Equal(got[19:], make([]byte, 41)) {
		t.Errorf("Tagged, short: %x", got)
	}
}

// TestFlood: the flood writes the frames in turn until End, and its
// counts add up: what the peer read was taken, and a full socket's
// refusals are counted by error.
func TestFlood(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	frames := [][]byte{[]byte("zero"), []byte("one"), []byte("two")}
	fl := StartFlood([]int{fds[0]}, frames)
	buf := make([]byte, 64)
	var read []string
	for len(read) < 6 {
		unix.Poll([]unix.PollFd{{Fd: int32(fds[1]), Events: unix.POLLIN}}, 1000)
		if n, err := unix.Read(fds[1], buf); err == nil {
			read = append(read, string(buf[:n]))
		}
	}
	// the peer reads no more: the socket's queue fills and the writes
	// that find it full are refused, while the flood goes on
	time.Sleep(300 * time.Millisecond)
	fl.End()
	fl.End()
	attempts, ok, errs := fl.Stats()
	if got := read[0] + " " + read[1] + " " + read[2] + " " + read[3]; got != "zero one two zero" {
		t.Errorf("the peer read %q", got)
	}
	var refused uint64
	for _, n := range errs {
		refused += n
	}
	if ok < 6 || attempts != ok+refused || refused == 0 || errs[unix.EAGAIN.Error()] != refused {
		t.Errorf("attempts %d, taken %d, refused %v", attempts, ok, errs)
	}
}
