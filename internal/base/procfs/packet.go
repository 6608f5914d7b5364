package procfs

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// PacketSocket is a line of /proc/net/packet (net/packet/af_packet.c:
// packet_seq_show): a packet socket of the reader's network namespace,
// and the device it is bound to.
type PacketSocket struct {
	Inode   uint64
	Ifindex int // 0: bound to no device (every device)
}

// ParsePacket parses the text of /proc/net/packet.
func ParsePacket(text string) ([]PacketSocket, error) {
	var out []PacketSocket
	err := parseNetTable("packet", text, func(head []string) bool {
		return len(head) >= 9 && head[4] == "Iface" && head[8] == "Inode"
	}, "Iface fifth and Inode ninth", 9, func(f []string) bool {
		ifindex, err1 := strconv.Atoi(f[4])
		inode, err2 := strconv.ParseUint(f[8], 10, 64)
		out = append(out, PacketSocket{Inode: inode, Ifindex: ifindex})
		return err1 == nil && err2 == nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parseNetTable parses the text of /proc/net/NAME, a table: head checks
// the header's fields (want says what it wants, for the error), and line
// takes each line's fields, at least n, false when one does not parse.
func parseNetTable(name, text string, head func([]string) bool, want string, n int, line func(f []string) bool) error {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if !head(strings.Fields(lines[0])) {
		return fmt.Errorf("/proc/net/%s: header %q, want %s", name, lines[0], want)
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) < n || !line(f) {
			return fmt.Errorf("/proc/net/%s: line %q", name, l)
		}
	}
	return nil
}

// PacketSockets reads the packet sockets of the calling thread's network
// namespace (/proc/thread-self/net/packet: the process's may be another).
func PacketSockets() ([]PacketSocket, error) {
	b, err := os.ReadFile("/proc/thread-self/net/packet")
	if err != nil {
		return nil, fmt.Errorf("read the packet sockets: %w", err)
	}
	return ParsePacket(string(b))
}

// SocketOwners finds which processes hold the sockets of inodes, from
// their open files (/proc/PID/fd/N links to "socket:[INODE]"): process id
// by inode. Processes that end meanwhile, or whose files this process may
// not read, are left out.
func SocketOwners(inodes map[uint64]bool) map[uint64][]int {
	out := map[uint64][]int{}
	eachFd(func(pid int, fd string) {
		link, err := os.Readlink(fd)
		inode, ok := strings.CutPrefix(link, "socket:[")
		if err != nil || !ok {
			return
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(inode, "]"), 10, 64)
		if err == nil && inodes[n] && !slices.Contains(out[n], pid) {
			out[n] = append(out[n], pid)
		}
	})
	return out
}

// Cmdline is the command line of process pid (/proc/PID/cmdline).
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	var args []string
	for a := range bytes.SplitSeq(bytes.TrimSuffix(b, []byte{0}), []byte{0}) {
		args = append(args, string(a))
	}
	return args, nil
}
