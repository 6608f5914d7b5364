package afxdp

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Config describes the AF_XDP side of one NIC.
type Config struct {
	Ifname string
	// Queues: sockets on NIC queues 0..Queues-1; 0 means 1. Frames the
	// NIC receives on other queues go up the host's stack (XDP_PASS), so
	// this should be the NIC's RX queue count.
	Queues    int
	Mode      Mode
	Bind      Bind
	Frames    int // per socket and direction; 0 means DefaultFrames
	ChunkSize int // 0 means DefaultChunkSize
	BusyPoll  *BusyPoll
}

// NIC is the XDP program on a device and one socket per queue.
type NIC struct {
	prog    *Program
	socks   []*Socket
	sg      bool
	ifindex int
	partial bool // the sockets take partial checksums (a veth)
}

// Open loads and attaches the program (multi-buffer where the kernel has
// it), then opens c.Queues sockets and puts them in its XSKMAP. The program
// comes first so that a veth has its NAPI instances when the sockets bind
// and each socket is marked with its queue's NAPI id. On error nothing is
// left attached or open.
func Open(c Config) (_ *NIC, err error) {
	ifi, err := net.InterfaceByName(c.Ifname)
	if err != nil {
		return nil, fmt.Errorf("NIC %q: %w: %w", c.Ifname, ErrNoDevice, err)
	}
	queues := max(c.Queues, 1)
	n := &NIC{sg: true, ifindex: ifi.Index, partial: isVeth(c.Ifname)}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	n.prog, err = LoadProgram(ifi.Index, queues, c.Mode, true)
	if errors.Is(err, unix.EINVAL) && !errors.Is(err, ErrMode) {
		// Before 5.18 the kernel knows no BPF_F_XDP_HAS_FRAGS.
		n.sg = false
		n.prog, err = LoadProgram(ifi.Index, queues, c.Mode, false)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (on %s)", err, c.Ifname)
	}
	for q := 0; q < queues; q++ {
		sc := SocketConfig{Ifindex: ifi.Index, Queue: q, Bind: c.Bind, Frames: c.Frames, ChunkSize: c.ChunkSize,
			MultiBuffer: n.sg, BusyPoll: c.BusyPoll, PartialChecksums: n.partial}
		s, err := OpenSocket(sc)
		if err != nil && n.sg && errors.Is(err, ErrQueue) {
			// EINVAL from bind: a kernel before 6.6 does not know
			// XDP_USE_SG; a bad queue id fails again below.
			sc.MultiBuffer = false
			if s, err = OpenSocket(sc); err == nil {
				n.sg = false
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w (on %s)", err, c.Ifname)
		}
		n.socks = append(n.socks, s)
		if err := n.prog.Insert(s); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// Sockets are the queues' sockets, socket i on queue i: each a forward.NIC.
func (n *NIC) Sockets() []*Socket { return n.socks }

// Mode is the mode the program was attached in.
func (n *NIC) Mode() Mode { return n.prog.Mode() }

// MultiBuffer reports whether frames longer than a chunk are carried
// (XDP_USE_SG and an xdp.frags program); without it the kernel drops them
// on receive, counted in XDP_STATISTICS rx_dropped.
func (n *NIC) MultiBuffer() bool { return n.sg }

// Ifindex is the index of the device the program and sockets are on: a
// device of the same name made later has another.
func (n *NIC) Ifindex() int { return n.ifindex }

// PartialChecksums reports whether the sockets take a check field holding
// the pseudo-header sum for a partial checksum (SocketConfig): on a veth,
// whose peer's stack leaves checksums partial, and on no other device.
func (n *NIC) PartialChecksums() bool { return n.partial }

// isVeth reports whether the driver of device ifname is veth (ethtool's
// driver information; false where it cannot be read).
func isVeth(ifname string) bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	info, err := unix.IoctlGetEthtoolDrvinfo(fd, ifname)
	return err == nil && unix.ByteSliceToString(info.Driver[:]) == "veth"
}

// Program is the attached XDP program.
func (n *NIC) Program() *Program { return n.prog }

// Close closes the sockets and detaches the program. Call it after the
// goroutines using the sockets' Read and Write are done.
func (n *NIC) Close() error {
	var errs []error
	for _, s := range n.socks {
		errs = append(errs, s.Close())
	}
	if n.prog != nil {
		errs = append(errs, n.prog.Close())
	}
	return errors.Join(errs...)
}
