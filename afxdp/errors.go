package afxdp

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Typed errors for what a user can fix; the wrapped error says what was
// being done and carries the kernel's errno.
var (
	// ErrNotSupported: socket(AF_XDP) fails: a kernel without
	// CONFIG_XDP_SOCKETS (EAFNOSUPPORT).
	ErrNotSupported = errors.New("AF_XDP sockets are not available in this kernel")
	// ErrPermission: creating XDP sockets or loading BPF programs needs
	// CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF (root).
	ErrPermission = errors.New("not permitted (needs CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF)")
	// ErrNoDevice: the interface does not exist (or vanished while binding).
	ErrNoDevice = errors.New("no such network device")
	// ErrQueue: the device has no such queue (bind EINVAL on a queue id
	// past its real queue count).
	ErrQueue = errors.New("the device has no such queue")
	// ErrQueueBusy: another XDP socket is bound to that queue (EBUSY).
	ErrQueueBusy = errors.New("another XDP socket is bound to the queue")
	// ErrZeroCopy: zero-copy was required and the driver has none (veth:
	// copy mode only).
	ErrZeroCopy = errors.New("the driver has no zero-copy AF_XDP")
	// ErrMode: the device or kernel refuses the XDP attach mode asked for
	// (native XDP on a driver without it).
	ErrMode = errors.New("the device refuses this XDP mode")
	// ErrXDPBusy: another XDP program is attached to the device.
	ErrXDPBusy = errors.New("another XDP program is attached to the device")
	// ErrMTU: the device's MTU is too large for XDP (veth: the peer's MTU
	// beyond what one page holds, without multi-buffer support).
	ErrMTU = errors.New("the MTU is too large for XDP on this device")
	// ErrPeerQueues: a veth has fewer RX queues than its peer TX queues,
	// which its XDP refuses (ENOSPC).
	ErrPeerQueues = errors.New("the veth has fewer RX queues than its peer has TX queues")
)

// opError wraps a failed system call as "what: typed: syscall: errno",
// choosing the typed error by errno where one fits.
func opError(what, call string, err error, byErrno map[unix.Errno]error) error {
	var typed error
	var e unix.Errno
	if errors.As(err, &e) {
		typed = byErrno[e]
		if typed == nil && (e == unix.EPERM || e == unix.EACCES) {
			typed = ErrPermission
		}
	}
	if call != "" {
		err = os.NewSyscallError(call, err)
	}
	if typed != nil {
		return fmt.Errorf("%s: %w: %w", what, typed, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
