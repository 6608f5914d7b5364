package procfs

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestParseTCP reads the lines of /proc/net/tcp and tcp6 as a
// little-endian kernel prints them.
func TestParseTCP(t *testing.T) {
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2456 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000026d8c20d 100 0 0 10 0
   1: 0100007F:2456 0100007F:D6DA 01 00000000:00000000 00:00000000 00000000 65534        0 4343 1 00000000f6273582 20 4 30 10 -1
`
	const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:2456 0000000000000000FFFF00000100007F:D6DB 01 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 20 4 30 10 -1
   1: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 78 1 0000000000000000 100 0 0 10 0
`
	for _, c := range []struct {
		text string
		want []TCPSocket
	}{
		{tcp, []TCPSocket{
			{netip.MustParseAddrPort("127.0.0.1:9302"), netip.MustParseAddrPort("0.0.0.0:0"), 4242},
			{netip.MustParseAddrPort("127.0.0.1:9302"), netip.MustParseAddrPort("127.0.0.1:55002"), 4343}}},
		{tcp6, []TCPSocket{
			{netip.MustParseAddrPort("[::ffff:127.0.0.1]:9302"), netip.MustParseAddrPort("[::ffff:127.0.0.1]:55003"), 77},
			{netip.MustParseAddrPort("[::1]:22"), netip.MustParseAddrPort("[::]:0"), 78}}},
	} {
		got, err := ParseTCP(c.text)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseTCP: %v, %v; want %v", got, err, c.want)
		}
	}
	if _, err := ParseTCP("sl local_address\n 0: x\n"); err == nil {
		t.Error("ParseTCP took a header without inode")
	}
	head := "sl local_address rem_address st tx_queue rx_queue tr tm->when retrnsmt uid timeout inode\n"
	for _, bad := range []string{head + " 0: 0100007F:2456\n", head + " 0: 0100007F:2456 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 x\n"} {
		if got, err := ParseTCP(bad); err == nil || got != nil || !strings.Contains(err.Error(), "/proc/net/tcp: line") {
			t.Errorf("ParseTCP(%q) = %v, %v; want the line refused", bad, got, err)
		}
	}
}

// TestTCPSockets finds a loopback connection of its own, both ends, and
// its listener, each with an inode.
func TestTCPSockets(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	local, remote := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	socks, err := TCPSockets()
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]netip.AddrPort]bool{{local, remote}: true, {remote, local}: true, {remote, netip.MustParseAddrPort("0.0.0.0:0")}: true}
	for _, s := range socks {
		if s.Inode != 0 {
			delete(want, [2]netip.AddrPort{s.Local, s.Remote})
		}
	}
	if len(want) != 0 {
		t.Errorf("not among the %d sockets read, with an inode: %v", len(socks), want)
	}
}
