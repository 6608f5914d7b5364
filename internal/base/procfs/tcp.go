package procfs

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// TCPSocket is a line of /proc/net/tcp or /proc/net/tcp6
// (net/ipv4/tcp_ipv4.c get_tcp4_sock, net/ipv6/tcp_ipv6.c get_tcp6_sock):
// a TCP socket of the reader's network namespace. Addresses are as the
// kernel holds them: an IPv4 peer of an IPv6 socket is IPv4-mapped.
type TCPSocket struct {
	Local, Remote netip.AddrPort
	Inode         uint64 // 0: no file holds it (TIME_WAIT, an orphan)
}

// ParseTCP parses the text of /proc/net/tcp or /proc/net/tcp6.
func ParseTCP(text string) ([]TCPSocket, error) {
	var out []TCPSocket
	// The header's "tx_queue rx_queue" and "tr tm->when" are one field
	// each in a line: a line's inode is its tenth.
	err := parseNetTable("tcp", text, func(head []string) bool {
		return len(head) >= 12 && strings.HasPrefix(head[1], "local") && head[11] == "inode"
	}, "local_address second and inode twelfth", 10, func(f []string) bool {
		local, err1 := parseTCPAddr(f[1])
		remote, err2 := parseTCPAddr(f[2])
		inode, err3 := strconv.ParseUint(f[9], 10, 64)
		out = append(out, TCPSocket{Local: local, Remote: remote, Inode: inode})
		return err1 == nil && err2 == nil && err3 == nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parseTCPAddr parses ADDR:PORT as /proc/net/tcp{,6} print it: the
// address as 32-bit words in the host's byte order, each in hex (%08X),
// the port in hex.
func parseTCPAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || (len(a) != 8 && len(a) != 32) {
		return netip.AddrPort{}, fmt.Errorf("/proc/net/tcp: address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("/proc/net/tcp: address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(raw[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// TCPSockets reads the TCP sockets, IPv4 and IPv6, of the calling
// thread's network namespace (/proc/thread-self/net/tcp and tcp6).
func TCPSockets() ([]TCPSocket, error) {
	var out []TCPSocket
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/thread-self/net/" + name)
		if os.IsNotExist(err) && name == "tcp6" {
			continue // no IPv6
		}
		if err != nil {
			return nil, fmt.Errorf("read the TCP sockets: %w", err)
		}
		s, err := ParseTCP(string(b))
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
	}
	return out, nil
}
