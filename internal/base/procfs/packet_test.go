package procfs

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParsePacket(t *testing.T) {
	text := `sk               RefCnt Type Proto  Iface R Rmem   User   Inode
ffff8f0a45c7e000 3      3    0003   2     1 0      0      41522
ffff8f0a45c7f800 3      2    0000   0     0 0      0      41523
`
	got, err := ParsePacket(text)
	want := []PacketSocket{{Inode: 41522, Ifindex: 2}, {Inode: 41523, Ifindex: 0}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ParsePacket = %v, %v; want %v", got, err, want)
	}
	if got, err := ParsePacket("sk RefCnt Type Proto Iface R Rmem User Inode\n"); err != nil || len(got) != 0 {
		t.Errorf("no sockets: %v, %v", got, err)
	}
	for _, bad := range []string{"", "sk RefCnt Type\n", "sk RefCnt Type Proto Iface R Rmem User Inode\nffff 3 3 0003 x 1 0 0 1\n"} {
		if _, err := ParsePacket(bad); err == nil {
			t.Errorf("ParsePacket(%q) took it", bad)
		}
	}
}

// TestSocketOwners: a packet socket this process opens is listed with the
// loopback device's index and found to be this process's.
func TestSocketOwners(t *testing.T) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err == unix.EPERM {
		t.Skip("skipping privileged test: a packet socket needs CAP_NET_RAW (run as root)")
	}
	if err != nil {
		t.Fatalf("a packet socket: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: 1}); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	socks, err := PacketSockets()
	if err != nil || !slices.Contains(socks, PacketSocket{Inode: st.Ino, Ifindex: 1}) {
		t.Fatalf("PacketSockets = %v, %v; want inode %d on ifindex 1", socks, err, st.Ino)
	}
	owners := SocketOwners(map[uint64]bool{st.Ino: true})
	if !slices.Equal(owners[st.Ino], []int{os.Getpid()}) {
		t.Errorf("SocketOwners = %v, want this process %d", owners, os.Getpid())
	}
	args, err := Cmdline(os.Getpid())
	if err != nil || !slices.Equal(args, os.Args) {
		t.Errorf("Cmdline = %q, %v; want %q", args, err, os.Args)
	}
}
