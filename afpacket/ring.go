package afpacket

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// DefaultBufBytes is the socket buffer asked for with SO_RCVBUFFORCE and
// SO_SNDBUFFORCE: the ~208 KiB default holds only about three 64 KiB GSO
// frames.
const DefaultBufBytes = 8 << 20

// Config describes the sockets of one NIC.
type Config struct {
	Ifname  string
	Queues  int                // sockets in the fanout group; 0 means 1
	Batch   int                // frames per recvmmsg/sendmmsg, 1 or more: the caller's (its workers' batch)
	BufSize int                // SO_RCVBUF/SO_SNDBUF bytes; 0 means DefaultBufBytes
	MACs    []net.HardwareAddr // unicast addresses to receive (PACKET_MR_UNICAST)
	Promisc bool               // PACKET_MR_PROMISC instead of unicast membership
	// FilterMACs, when set, attaches a classic BPF filter that accepts only
	// frames to these addresses, broadcast and multicast, so instances that
	// share a NIC each see only their own unicast.
	FilterMACs []net.HardwareAddr
}

// resolve checks Batch, fills in the default of BufSize and looks
// c.Ifname up.
func (c *Config) resolve() (*net.Interface, error) {
	if c.Batch < 1 {
		return nil, fmt.Errorf("ring: batch of %d frames: want 1 or more", c.Batch)
	}
	if c.BufSize <= 0 {
		c.BufSize = DefaultBufBytes
	}
	ifi, err := net.InterfaceByName(c.Ifname)
	if err != nil {
		return nil, fmt.Errorf("ring: NIC %q not found: %w", c.Ifname, err)
	}
	return ifi, nil
}

// Socket is one packet socket of the group. Every frame it reads or
// writes starts with a virtio_net_hdr (PACKET_VNET_HDR: vnethdr.Len bytes).
// Read and Write belong to one goroutine each; Stats may be called from any
// goroutine.
type Socket struct {
	fd      int
	ifindex int

	rx   mmsg
	tx   mmsg
	tags []tag // of the frames of the last Read

	statsMu sync.Mutex
	packets uint64 // accumulated tp_packets (includes drops)
	drops   uint64 // accumulated tp_drops
}

// Open creates c.Queues sockets bound to c.Ifname in one fanout group. On
// error nothing is left open.
func Open(c Config) (_ []*Socket, err error) {
	if c.Queues <= 0 {
		c.Queues = 1
	}
	ifi, err := c.resolve()
	if err != nil {
		return nil, err
	}
	var socks []*Socket
	defer func() {
		if err != nil {
			for _, s := range socks {
				s.Close()
			}
		}
	}()
	fanoutID := 0
	for q := 0; q < c.Queues; q++ {
		s, err := open(ifi.Index, c)
		if err != nil {
			return nil, err
		}
		socks = append(socks, s)
		// Fanout after bind (before is EINVAL). The first socket asks
		// the kernel for a unique id; the rest join it. IGNORE_OUTGOING
		// at group level: per-socket PACKET_IGNORE_OUTGOING is not
		// consulted inside a fanout group (net/packet/af_packet.c:
		// packet_rcv_fanout uses the group's hook).
		flags := unix.PACKET_FANOUT_FLAG_IGNORE_OUTGOING
		if q == 0 {
			flags |= unix.PACKET_FANOUT_FLAG_UNIQUEID
		}
		arg := fanoutID | (unix.PACKET_FANOUT_HASH|flags)<<16
		if err := unix.SetsockoptInt(s.fd, unix.SOL_PACKET, unix.PACKET_FANOUT, arg); err != nil {
			e := fmt.Errorf("ring: PACKET_FANOUT on %s: %w", c.Ifname, os.NewSyscallError("setsockopt", err))
			if errors.Is(err, unix.EINVAL) {
				e = fmt.Errorf("%w: PACKET_FANOUT_FLAG_IGNORE_OUTGOING needs Linux 6.2 or later", e)
			}
			return nil, e
		}
		if q == 0 {
			v, err := unix.GetsockoptInt(s.fd, unix.SOL_PACKET, unix.PACKET_FANOUT)
			if err != nil {
				return nil, fmt.Errorf("ring: read fanout id: %w", os.NewSyscallError("getsockopt", err))
			}
			fanoutID = v & 0xffff
		}
	}
	return socks, nil
}

func open(ifindex int, c Config) (_ *Socket, err error) {
	// Protocol 0: nothing is queued until bind names ETH_P_ALL.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("ring: packet socket: %w: tapfwd needs CAP_NET_RAW (run as root)", err)
		}
		return nil, fmt.Errorf("ring: packet socket: %w", os.NewSyscallError("socket", err))
	}
	s := &Socket{fd: fd, ifindex: ifindex}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	opts := []struct {
		level, opt, val int
		name            string
	}{
		// Without a vnet header GSO size and partial-checksum offsets
		// are lost; it must come before any ring or bind (else EBUSY).
		{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR"},
		// The 802.1Q tag is stripped before packet sockets see the
		// frame; PACKET_AUXDATA carries it back.
		{unix.SOL_PACKET, unix.PACKET_AUXDATA, 1, "PACKET_AUXDATA"},
		{unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS"},
		{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, c.BufSize, "SO_RCVBUFFORCE"},
		{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, c.BufSize, "SO_SNDBUFFORCE"},
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
			return nil, fmt.Errorf("ring: %s: %w", o.name, os.NewSyscallError("setsockopt", err))
		}
	}
	if c.FilterMACs != nil {
		// Before bind: nothing is queued until then.
		if err := attachMACFilter(fd, c.FilterMACs); err != nil {
			return nil, err
		}
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, fmt.Errorf("ring: bind to ifindex %d: %w", ifindex, os.NewSyscallError("bind", err))
	}
	if c.Promisc {
		if err := addMembership(fd, ifindex, unix.PACKET_MR_PROMISC, nil); err != nil {
			return nil, err
		}
	} else {
		// A real NIC filters unicast by MAC: ask for the TAP's, and all
		// multicast (IPv6 neighbour discovery needs it).
		for _, mac := range c.MACs {
			if err := addMembership(fd, ifindex, unix.PACKET_MR_UNICAST, mac); err != nil {
				return nil, err
			}
		}
		if err := addMembership(fd, ifindex, unix.PACKET_MR_ALLMULTI, nil); err != nil {
			return nil, err
		}
	}
	s.init(c.Batch)
	return s, nil
}

func addMembership(fd, ifindex, typ int, mac net.HardwareAddr) error {
	mr := unix.PacketMreq{Ifindex: int32(ifindex), Type: uint16(typ)}
	if mac != nil {
		mr.Alen = uint16(len(mac))
		copy(mr.Address[:], mac)
	}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mr); err != nil {
		return fmt.Errorf("ring: PACKET_ADD_MEMBERSHIP type %d: %w", typ, os.NewSyscallError("setsockopt", err))
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Fd is the socket's descriptor, for polling.
func (s *Socket) Fd() int { return s.fd }

// Duplex says that Read and Write may run at once on two threads
// (forward.Duplex): each has its own mmsghdrs and iovecs (rx, tx), and the
// kernel takes a packet socket's receives and sends at once.
func (s *Socket) Duplex() {}

// Stats returns the kernel's counts since the socket opened: frames that
// reached the socket (drops included) and frames dropped because its
// receive queue was full. PACKET_STATISTICS resets on read, so they are
// accumulated here.
func (s *Socket) Stats() (packets, drops uint64, err error) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if s.fd >= 0 {
		st, err := unix.GetsockoptTpacketStats(s.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
		if err != nil {
			return s.packets, s.drops, os.NewSyscallError("getsockopt", err)
		}
		s.packets += uint64(st.Packets)
		s.drops += uint64(st.Drops)
	}
	return s.packets, s.drops, nil
}

// Close closes the socket.
func (s *Socket) Close() error {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}

// NewSocketFd wraps fd, which must speak datagrams that begin with a vnet
// header (a socketpair standing in for a packet socket in tests, say),
// moving up to batch frames per call (below 1: 1). The Socket owns fd.
func NewSocketFd(fd, batch int) *Socket {
	batch = max(batch, 1)
	s := &Socket{fd: fd, ifindex: -1}
	s.init(batch)
	return s
}

func (s *Socket) init(batch int) {
	s.rx.init(batch, true)
	s.tx.init(batch, false)
	s.tags = make([]tag, batch)
}

// exists reports whether the interface the socket is bound to is still
// there: af_packet.c (packet_notifier) reports ENETDOWN both when the NIC
// goes down and when it is unregistered.
func (s *Socket) exists() bool {
	if s.ifindex < 0 {
		return true
	}
	_, err := net.InterfaceByIndex(s.ifindex)
	return err == nil
}

// macFilter is a classic BPF program accepting frames whose destination is
// one of macs or a group address (the I/G bit: broadcast and multicast).
// Packet sockets run it on the frame from its Ethernet header
// (af_packet.c: packet_rcv pushes back to the MAC header first). Each
// address takes five instructions with jumps that stay within them, so no
// count of addresses overflows a jump's 8-bit offset.
func macFilter(macs []net.HardwareAddr) []bpf.Instruction {
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 1},                       // first byte of the destination
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 1, SkipFalse: 1}, // unicast -> the addresses
		bpf.RetConstant{Val: 0xffffffff},                        // group address: accept the whole frame
	}
	for _, mac := range macs {
		hi := uint32(mac[0])<<8 | uint32(mac[1])
		lo := uint32(mac[2])<<24 | uint32(mac[3])<<16 | uint32(mac[4])<<8 | uint32(mac[5])
		prog = append(prog,
			bpf.LoadAbsolute{Off: 2, Size: 4},                      // destination bytes 2..5
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: lo, SkipFalse: 3}, // no match -> the next address
			bpf.LoadAbsolute{Off: 0, Size: 2},                      // destination bytes 0..1
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: hi, SkipFalse: 1}, // no match -> the next address
			bpf.RetConstant{Val: 0xffffffff},                       // this address: accept
		)
	}
	return append(prog, bpf.RetConstant{Val: 0}) // none of them: drop
}

func attachMACFilter(fd int, macs []net.HardwareAddr) error {
	for _, mac := range macs {
		if len(mac) != 6 {
			return fmt.Errorf("ring: filter MAC %s is not an Ethernet address", mac)
		}
	}
	raw, err := bpf.Assemble(macFilter(macs))
	if err != nil {
		return fmt.Errorf("ring: MAC filter: %w", err)
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp); err != nil {
		return fmt.Errorf("ring: SO_ATTACH_FILTER: %w", os.NewSyscallError("setsockopt", err))
	}
	return nil
}
