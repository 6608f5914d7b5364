package afpacket

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

func socketpair(t *testing.T) (*Socket, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSocketFd(fds[0], 4)
	t.Cleanup(func() {
		s.Close()
		unix.Close(fds[1])
	})
	return s, fds[1]
}

// TestReadSizes: Read reports each frame's length, and a length beyond
// the buffer for a frame that did not fit.
func TestReadSizes(t *testing.T) {
	s, peer := socketpair(t)
	frames := [][]byte{bytes.Repeat([]byte{1}, 60), bytes.Repeat([]byte{2}, 1500), bytes.Repeat([]byte{3}, 3000)}
	for _, f := range frames {
		if _, err := unix.Write(peer, f); err != nil {
			t.Fatal(err)
		}
	}
	bufs := [][]byte{make([]byte, 2000), make([]byte, 2000), make([]byte, 2000), make([]byte, 2000)}
	sizes := make([]int, 4)
	n, err := s.Read(bufs, sizes, 16)
	if err != nil || n != 3 {
		t.Fatalf("Read = %d, %v; want 3", n, err)
	}
	if sizes[0] != 60 || sizes[1] != 1500 || !bytes.Equal(bufs[1][16:16+1500], frames[1]) {
		t.Errorf("sizes %v, or frame 1 not at the offset", sizes[:3])
	}
	if sizes[2] <= 2000-16 {
		t.Errorf("a 3000-byte frame in a %d-byte buffer has size %d: truncation not reported", 2000-16, sizes[2])
	}
	if n, err := s.Read(bufs, sizes, 16); n != 0 || err != unix.EAGAIN {
		t.Errorf("empty Read = %d, %v; want EAGAIN", n, err)
	}
}

func TestWrite(t *testing.T) {
	s, peer := socketpair(t)
	a, b := []byte("xxheader-a"), []byte("xxheader-bb")
	if n, err := s.Write([][]byte{a, b}, 2); n != 2 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	buf := make([]byte, 64)
	for _, want := range [][]byte{a[2:], b[2:]} {
		n, err := unix.Read(peer, buf)
		if err != nil || !bytes.Equal(buf[:n], want) {
			t.Errorf("peer read %q, %v; want %q", buf[:n], err, want)
		}
	}
}

// auxMsg builds a control message holding one PACKET_AUXDATA.
func auxMsg(a unix.TpacketAuxdata) []byte {
	b := make([]byte, auxSpace)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.SOL_PACKET, unix.PACKET_AUXDATA
	h.SetLen(unix.CmsgLen(sizeofAuxdata))
	*(*unix.TpacketAuxdata)(unsafe.Pointer(&b[unix.SizeofCmsghdr])) = a
	return b
}

func TestParseAux(t *testing.T) {
	var tg tag
	if parseAux(auxMsg(unix.TpacketAuxdata{Status: unix.TP_STATUS_VLAN_VALID, Vlan_tci: 42, Len: 100, Snaplen: 100}), &tg) ||
		!tg.ok || tg.tci != 42 || tg.tpid != unix.ETH_P_8021Q {
		t.Errorf("802.1Q: %+v", tg)
	}
	parseAux(auxMsg(unix.TpacketAuxdata{Status: unix.TP_STATUS_VLAN_VALID | unix.TP_STATUS_VLAN_TPID_VALID, Vlan_tci: 7, Vlan_tpid: unix.ETH_P_8021AD, Len: 60, Snaplen: 60}), &tg)
	if !tg.ok || tg.tpid != unix.ETH_P_8021AD {
		t.Errorf("802.1ad: %+v", tg)
	}
	if !parseAux(auxMsg(unix.TpacketAuxdata{Len: 9000, Snaplen: 100}), &tg) || tg.ok {
		t.Errorf("snaplen below len must report truncation and no tag: %+v", tg)
	}
	if parseAux(auxMsg(unix.TpacketAuxdata{Len: 60, Snaplen: 60})[:5], &tg) || tg.ok {
		t.Error("a short control message must yield nothing")
	}
}

// TestMACFilter runs the classic BPF program in x/net's interpreter: it
// takes frames to any of its addresses and to group addresses, and no
// other unicast; the kernel takes the program for as many addresses as a
// TAP with 64 guests and a few more has.
func TestMACFilter(t *testing.T) {
	macs := []net.HardwareAddr{{0x02, 0, 0, 0, 0, 9}, {0x02, 0, 0, 0, 0x40, 1}, {0x0a, 0xbb, 0xcc, 0xdd, 0xee, 0xff}}
	vm, err := bpf.NewVM(macFilter(macs))
	if err != nil {
		t.Fatal(err)
	}
	frame := func(dst []byte) []byte {
		return append(append(append([]byte{}, dst...), 0x02, 0, 0, 0, 0, 1), make([]byte, 50)...)
	}
	for _, tc := range []struct {
		dst    []byte
		accept bool
	}{
		{macs[0], true},
		{macs[1], true},
		{macs[2], true},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true},
		{[]byte{0x33, 0x33, 0, 0, 0, 1}, true},
		{[]byte{0x02, 0, 0, 0, 0, 8}, false},
		{[]byte{0x02, 0, 0, 1, 0, 9}, false},
		{[]byte{0x06, 0, 0, 0, 0, 9}, false},
		{[]byte{0x02, 0, 0, 0, 0x40, 9}, false},
		{[]byte{0x0a, 0xbb, 0, 0, 0, 9}, false}, // macs[2]'s first two bytes, macs[0]'s last four
	} {
		n, err := vm.Run(frame(tc.dst))
		if err != nil || (n > 0) != tc.accept {
			t.Errorf("dst % x: kept %d bytes (%v), want accept=%v", tc.dst, n, err, tc.accept)
		}
	}
	many := make([]net.HardwareAddr, 70)
	for i := range many {
		many[i] = net.HardwareAddr{0x02, 0, 0, 0, 1, byte(i)}
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err == unix.EPERM {
		t.Skip("skipping the filter's attachment: a packet socket needs CAP_NET_RAW (run as root)")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := attachMACFilter(fd, many); err != nil {
		t.Errorf("%d addresses: %v", len(many), err)
	}
	vm, err = bpf.NewVM(macFilter(many))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := vm.Run(frame(many[69])); n == 0 {
		t.Error("the 70th address was not accepted")
	}
}

// TestBatchFromCaller: the package has no batch of its own: Open and
// OpenSender refuse a Config without one before any socket or device
// look-up, so the sockets' batch is always the caller's.
func TestBatchFromCaller(t *testing.T) {
	for _, b := range []int{0, -1} {
		c := Config{Ifname: "lo", Batch: b}
		if socks, err := Open(c); err == nil || !strings.Contains(err.Error(), "want 1 or more") {
			closeAll(socks)
			t.Errorf("Open with batch %d: %v, want a refusal", b, err)
		}
		if s, err := OpenSender(c); err == nil || !strings.Contains(err.Error(), "want 1 or more") {
			if s != nil {
				s.Close()
			}
			t.Errorf("OpenSender with batch %d: %v, want a refusal", b, err)
		}
	}
}
