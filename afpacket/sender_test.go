package afpacket

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// TestSender: on a veth of a test bed, a sender's frames reach the peer;
// it receives nothing itself, and the fanout group on the same device
// does not read them back. Frames from the peer reach the group only.
func TestSender(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	var snd *Socket
	var group []*Socket
	var peer int
	err := bed.Do(bed.FwdNS, func() error {
		var err error
		if snd, err = OpenSender(Config{Ifname: bed.NIC, Batch: 4}); err != nil {
			return err
		}
		group, err = Open(Config{Ifname: bed.NIC, Queues: 2, Batch: 4})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snd.Close(); closeAll(group) })
	if err := bed.Do(bed.WireNS, func() error {
		var err error
		peer, err = rawSocket(bed.WireIf)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(peer) })

	src := []byte{0x02, 0, 0, 0, 0x5e, 1}
	out := frame(t, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, src, 'S')
	if n, err := snd.Write([][]byte{append(make([]byte, 10), out...)}, 0); n != 1 || err != nil {
		t.Fatalf("sender Write = %d, %v", n, err)
	}
	if !seenOn(peer, out) {
		t.Fatal("the sender's frame did not reach the veth's peer")
	}
	in := frame(t, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte{0x02, 0, 0, 0, 0x5e, 2}, 'W')
	if _, err := unix.Write(peer, in); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048), make([]byte, 2048), make([]byte, 2048)}, make([]int, 4)
	if n, err := snd.Read(bufs, sizes, 0); n != 0 || err != unix.EAGAIN {
		t.Errorf("the sender received: Read = %d, %v; want EAGAIN", n, err)
	}
	var got [][]byte
	for _, s := range group {
		n, _ := s.Read(bufs, sizes, 0)
		for i := 0; i < n; i++ {
			got = append(got, append([]byte(nil), bufs[i][10:sizes[i]]...))
		}
	}
	var fromPeer, readBack int
	for _, g := range got {
		switch {
		case bytes.Equal(g, in):
			fromPeer++
		case bytes.Equal(g[6:12], src):
			readBack++
		}
	}
	if fromPeer != 1 || readBack != 0 {
		t.Errorf("the group read the peer's frame %d times (want 1) and the sender's %d times (want 0)", fromPeer, readBack)
	}
	if p, d, err := snd.Stats(); p != 0 || d != 0 || err != nil {
		t.Errorf("sender Stats = %d, %d, %v", p, d, err)
	}
}

// frame is a 60-byte Ethernet frame with an experimental EtherType,
// filled with b.
func frame(t *testing.T, dst, src []byte, b byte) []byte {
	f := bytes.Repeat([]byte{b}, 60)
	copy(f, dst)
	copy(f[6:], src)
	f[12], f[13] = 0x88, 0xb5
	return f
}

// rawSocket is a plain packet socket on ifname (no vnet header), bound to
// every protocol, with a receive timeout.
func rawSocket(ifname string) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return -1, err
	}
	ifi, err := interfaceIndex(ifname)
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi})
	}
	if err == nil {
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// seenOn reads fd until want arrives or a read times out.
func seenOn(fd int, want []byte) bool {
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == nil && bytes.Equal(buf[:n], want) {
			return true
		}
	}
	return false
}

func interfaceIndex(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

func closeAll(socks []*Socket) {
	for _, s := range socks {
		s.Close()
	}
}
