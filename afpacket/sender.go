package afpacket

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenSender opens a packet socket on c.Ifname that only sends: it is bound
// with protocol 0, so the kernel queues nothing for it
// (net/packet/af_packet.c: packet_do_bind hooks no protocol for 0), and it
// joins no fanout group and asks for no address. Its frames start with a
// vnet header, bypass the qdisc and, as those of the group's sockets, are
// not read back by a group Open made (PACKET_FANOUT_FLAG_IGNORE_OUTGOING).
// Only c.Ifname, c.Batch and c.BufSize apply. Read always returns EAGAIN;
// Stats counts nothing.
func OpenSender(c Config) (*Socket, error) {
	ifi, err := c.resolve()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ring: packet socket: %w", os.NewSyscallError("socket", err))
	}
	s := &Socket{fd: fd, ifindex: ifi.Index}
	for _, o := range []struct {
		level, opt, val int
		name            string
	}{
		{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR"},
		{unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS"},
		{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, c.BufSize, "SO_SNDBUFFORCE"},
		{unix.SOL_SOCKET, unix.SO_RCVBUF, 0, "SO_RCVBUF"}, // nothing comes; the kernel's minimum
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
			s.Close()
			return nil, fmt.Errorf("ring: %s: %w", o.name, os.NewSyscallError("setsockopt", err))
		}
	}
	// Protocol 0 binds the device for sending and hooks nothing: no frame
	// is ever queued on the socket.
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: 0, Ifindex: ifi.Index}); err != nil {
		s.Close()
		return nil, fmt.Errorf("ring: bind to %s: %w", c.Ifname, os.NewSyscallError("bind", err))
	}
	s.init(c.Batch)
	return s, nil
}
