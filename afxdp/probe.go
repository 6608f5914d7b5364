package afxdp

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Features is what AF_XDP offers on this kernel and, for Probe's device,
// on that device. Each bool comes from the kernel taking the request on a
// throw-away socket; Err says why the first step failed, if it did.
type Features struct {
	XDPSockets  bool   `json:"xdp_sockets"`  // socket(AF_XDP): CONFIG_XDP_SOCKETS
	NeedWakeup  bool   `json:"need_wakeup"`  // bind with XDP_USE_NEED_WAKEUP (5.4+)
	MultiBuffer bool   `json:"multi_buffer"` // bind with XDP_USE_SG (6.6+)
	TxMetadata  bool   `json:"tx_metadata"`  // UMEM with tx_metadata_len (XDP_UMEM_TX_METADATA_LEN): TX checksum offload requests (XDP_TXMD_FLAGS_CHECKSUM, 6.8+; copy mode hands them to the skb)
	Copy        bool   `json:"copy"`         // the device takes a socket in copy mode
	ZeroCopy    bool   `json:"zero_copy"`    // the device takes one in zero-copy mode (veth never does)
	Device      string `json:"device"`
	Err         string `json:"error,omitempty"`
}

// txMetadataLen is sizeof(struct xsk_tx_metadata) in 6.18
// (include/uapi/linux/if_xdp.h: flags, then a 16-byte union).
const txMetadataLen = 24

// Probe asks the kernel what AF_XDP offers, binding throw-away sockets to
// queue 0 of ifname (lo when empty) in the current namespace. No XDP
// program is attached. A queue another socket holds makes the device
// probes fail (EBUSY). It needs CAP_NET_RAW.
func Probe(ifname string) Features {
	if ifname == "" {
		ifname = "lo"
	}
	f := Features{Device: ifname}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		f.Err = err.Error()
		return f
	}
	try := func(bind uint16, txmd bool) error {
		fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		f.XDPSockets = true
		return probeBind(fd, ifi.Index, bind, txmd)
	}
	if err := try(unix.XDP_COPY, false); err != nil {
		f.Err = err.Error()
		if !f.XDPSockets {
			return f
		}
	} else {
		f.Copy = true
	}
	f.NeedWakeup = try(unix.XDP_COPY|unix.XDP_USE_NEED_WAKEUP, false) == nil
	f.MultiBuffer = try(unix.XDP_COPY|unix.XDP_USE_SG, false) == nil
	f.TxMetadata = try(unix.XDP_COPY, true) == nil
	f.ZeroCopy = try(unix.XDP_ZEROCOPY, false) == nil
	return f
}

// String is the features as one line: "sockets yes, copy yes, ..." and
// the error, if any.
func (f Features) String() string {
	yn := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	s := fmt.Sprintf("sockets %s; on %s: copy %s, zero-copy %s, need_wakeup %s, multi-buffer %s, TX checksum metadata %s",
		yn(f.XDPSockets), f.Device, yn(f.Copy), yn(f.ZeroCopy), yn(f.NeedWakeup), yn(f.MultiBuffer), yn(f.TxMetadata))
	if f.Err != "" {
		s += " (" + f.Err + ")"
	}
	return s
}

// probeBind registers a small UMEM (with TX metadata room when txmd),
// sizes the rings and binds fd to queue 0 of ifindex with flags.
func probeBind(fd, ifindex int, flags uint16, txmd bool) error {
	const chunks, chunk = 8, 4096
	mem, err := unix.Mmap(-1, 0, chunks*chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	reg := unix.XDPUmemReg{Addr: umemAddr(mem), Len: chunks * chunk, Size: chunk}
	if txmd {
		reg.Flags, reg.Tx_metadata_len = unix.XDP_UMEM_TX_METADATA_LEN, txMetadataLen
	}
	if err := setsockoptUmemReg(fd, &reg); err != nil {
		return err
	}
	for _, o := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o, chunks); err != nil {
			return err
		}
	}
	return bindXDP(fd, &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex)})
}
