package naive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"github.com/songgao/water"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/offload"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// Config describes the two ends.
type Config struct {
	NIC   string       // interface the packet socket binds to
	TAP   string       // TAP name; "" lets the kernel pick
	Netns string       // namespace to move the TAP into; "" keeps it here
	Addr  netip.Prefix // address for the TAP (in Netns); zero for none
	// MTU of the TAP's frames; 0 takes the NIC's. GSO frames from the NIC
	// are cut into segments that fit it.
	MTU int
	Log *slog.Logger // nil discards
}

// Counters are what a run moved and lost.
type Counters struct {
	NICFrames   atomic.Uint64 // frames read from the packet socket
	TAPWrites   atomic.Uint64 // frames written to the TAP (segments counted one by one)
	TAPFrames   atomic.Uint64 // frames read from the TAP
	NICWrites   atomic.Uint64 // frames written to the packet socket
	Drops       atomic.Uint64 // frames that could not be made valid (vnethdr errors)
	WriteErrors atomic.Uint64 // failed writes (ENOBUFS, EIO while the TAP is down)
}

// Forwarder moves frames between the TAP and the NIC.
type Forwarder struct {
	tap  *water.Interface
	sock *os.File
	mtu  int
	log  *slog.Logger
	C    Counters
}

// Open creates the TAP with water, moves it into c.Netns with c.Addr, and
// opens the packet socket on c.NIC.
func Open(c Config) (_ *Forwarder, err error) {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	ifi, err := net.InterfaceByName(c.NIC)
	if err != nil {
		return nil, fmt.Errorf("naive: NIC %q: %w", c.NIC, err)
	}
	if c.MTU == 0 {
		c.MTU = ifi.MTU
	}
	t, err := water.New(water.Config{DeviceType: water.TAP, PlatformSpecificParams: water.PlatformSpecificParams{Name: c.TAP}})
	if err != nil {
		return nil, fmt.Errorf("naive: water TAP %q: %w", c.TAP, err)
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	// water cannot move a TAP to another namespace, nor address it.
	if err := tap.MoveToNetns(t.Name(), c.Netns, c.Addr); err != nil {
		return nil, fmt.Errorf("naive: %w", err)
	}
	sock, err := openPacket(ifi.Index)
	if err != nil {
		return nil, err
	}
	return &Forwarder{tap: t, sock: sock, mtu: c.MTU, log: c.Log}, nil
}

// TAPName is the TAP's interface name.
func (f *Forwarder) TAPName() string { return f.tap.Name() }

// openPacket opens a non-blocking AF_PACKET socket bound to ifindex, with
// virtio-net headers on every frame (veth marks frames as partial-checksum
// and hands out GSO super-frames: drivers/net/veth.c), blind to its own
// transmissions, and the NIC in promiscuous mode: the obvious set-up.
func openPacket(ifindex int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("naive: AF_PACKET socket: %w", os.NewSyscallError("socket", err))
	}
	fail := func(what string, err error) (*os.File, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("naive: %s: %w", what, os.NewSyscallError("setsockopt", err))
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return fail("PACKET_VNET_HDR", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: ethPAllNet, Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("naive: bind: %w", os.NewSyscallError("bind", err))
	}
	mr := unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mr); err != nil {
		return fail("PACKET_MR_PROMISC", err)
	}
	// Non-blocking, so os.File parks reads in the runtime poller and Close
	// wakes them.
	return os.NewFile(uintptr(fd), "packet"), nil
}

// ethPAllNet is ETH_P_ALL (0x0003, every protocol) in network byte order
// as sockaddr_ll's sll_protocol wants it, read as a uint16 on a
// little-endian host (amd64, arm64): the bytes 0x00 0x03.
const ethPAllNet = 0x0300

// Run forwards until ctx ends or an end fails, then closes both. It
// returns nil after ctx ends.
func (f *Forwarder) Run(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		once sync.Once
		ferr error
	)
	stop := func(err error) {
		once.Do(func() {
			ferr = err
			f.tap.Close()
			f.sock.Close()
		})
	}
	wg.Go(func() { stop(f.nicToTAP()) })
	wg.Go(func() { stop(f.tapToNIC()) })
	<-ctx.Done()
	stop(nil)
	wg.Wait()
	if errors.Is(ferr, os.ErrClosed) {
		return nil
	}
	return ferr
}

// Close releases both ends (the TAP disappears) when Run was not called.
func (f *Forwarder) Close() error {
	return errors.Join(f.tap.Close(), f.sock.Close())
}

// nicToTAP reads one frame per recv; a GSO super-frame is cut into
// MTU-sized segments and a partial checksum completed, since the TAP has
// no vnet header to pass them on; each segment is one write.
func (f *Forwarder) nicToTAP() error {
	buf := make([]byte, vnethdr.Len+65536)
	// Enough segments for a 64 KiB frame at the smallest TCP MSS (536).
	segs := make([][]byte, 128)
	for i := range segs {
		segs[i] = make([]byte, f.mtu+64)
	}
	sizes := make([]int, len(segs))
	var h vnethdr.Hdr
	for {
		n, err := f.sock.Read(buf)
		if err != nil {
			return fmt.Errorf("naive: read %s: %w", "packet socket", err)
		}
		f.C.NICFrames.Add(1)
		if h.Decode(buf[:n]) != nil {
			f.C.Drops.Add(1)
			continue
		}
		frame := buf[vnethdr.Len:n]
		if vnethdr.Fixup(&h, frame) != nil {
			f.C.Drops.Add(1)
			continue
		}
		if h.IsGSO() {
			k, err := offload.Segment(h, frame, segs, sizes)
			if err != nil {
				f.C.Drops.Add(1)
				continue
			}
			for i := range k {
				f.writeTAP(segs[i][:sizes[i]])
			}
			continue
		}
		if vnethdr.CompleteChecksum(&h, frame) != nil {
			f.C.Drops.Add(1)
			continue
		}
		f.writeTAP(frame)
	}
}

func (f *Forwarder) writeTAP(p []byte) {
	if _, err := f.tap.Write(p); err != nil {
		f.C.WriteErrors.Add(1)
		return
	}
	f.C.TAPWrites.Add(1)
}

// tapToNIC reads one frame per read from the TAP (finished frames: the TAP
// has no offloads) and sends it behind a zero vnet header.
func (f *Forwarder) tapToNIC() error {
	buf := make([]byte, vnethdr.Len+65536)
	for {
		clear(buf[:vnethdr.Len])
		n, err := f.tap.Read(buf[vnethdr.Len:])
		if err != nil {
			return fmt.Errorf("naive: read TAP: %w", err)
		}
		f.C.TAPFrames.Add(1)
		if _, err := f.sock.Write(buf[:vnethdr.Len+n]); err != nil {
			// ENOBUFS on a busy NIC, ENETDOWN: drop the frame.
			if errors.Is(err, os.ErrClosed) {
				return err
			}
			f.C.WriteErrors.Add(1)
			continue
		}
		f.C.NICWrites.Add(1)
	}
}
