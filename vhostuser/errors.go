package vhostuser

import (
	"errors"
	"fmt"
)

// Sentinel errors. Events and logs wrap them with what broke which rule.
var (
	// ErrProtocol: the front-end broke the vhost-user protocol (a malformed
	// or unsupported message, a bad memory table, a ring set up outside
	// guest memory). Its connection is closed and everything it gave is
	// released; the port waits for the next front-end.
	ErrProtocol = errors.New("the front-end broke the vhost-user protocol")
	// ErrGuest: the guest broke the virtqueue rules (a descriptor outside
	// its memory, a loop, an index beyond the ring, a fault on its memory).
	// The port stops moving frames until the front-end restarts the rings,
	// as it does when the guest's driver resets the device.
	ErrGuest = errors.New("the guest broke the virtqueue rules")
	// ErrPathTooLong: the socket path does not fit a unix socket address.
	ErrPathTooLong = errors.New("vhost-user socket path too long")
	// ErrNotSocket: a file that is not a socket is where the socket goes;
	// Listen replaces only sockets.
	ErrNotSocket = errors.New("not a socket")
)

func protoErr(req uint32, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrProtocol, reqName(req), fmt.Sprintf(format, args...))
}
