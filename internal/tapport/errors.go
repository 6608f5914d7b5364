package tapport

import (
	"errors"
	"fmt"

	"github.com/tapfwd/tapfwd/internal/base/rootdir"
	"github.com/tapfwd/tapfwd/netns"
)

// Errors callers test for with errors.Is. The package also returns
// netns.ErrNotFound for a missing namespace and netns.ErrNotPermitted
// without CAP_NET_ADMIN.
var (
	// ErrNoTAP means the TAP named is not there, or is no TAP.
	ErrNoTAP = errors.New("TAP not found")
	// ErrNotTAP means the name is another kind of device; it matches
	// ErrNoTAP too.
	ErrNotTAP = fmt.Errorf("not a TAP: %w", ErrNoTAP)
	// ErrMACInUse means another interface in the namespace, or on the
	// TAP, has the port's address.
	ErrMACInUse = errors.New("MAC in use")
	// ErrNameInUse means an interface of the port's name exists.
	ErrNameInUse = errors.New("port name in use")
	// ErrNoPort means there is no VM port of that name.
	ErrNoPort = errors.New("vm-port not found")
	// ErrNoMacvtap means the kernel has no macvtap.
	ErrNoMacvtap = errors.New("macvtap not supported")
	// ErrNoMacvlan means the kernel has no macvlan.
	ErrNoMacvlan = errors.New("macvlan not supported")
	// ErrUnsafeDir means DevDir is not a root-owned directory only root may
	// write to; no node is made in it.
	ErrUnsafeDir = rootdir.ErrUnsafe
	// ErrNotNode means a path where a port's node belongs holds something
	// else (a file, a link, another device); it is left alone.
	ErrNotNode = errors.New("not a VM port's device node")
)

// Error is an error of one of the kinds above, with what it is about.
type Error struct {
	Kind  error  // ErrNoTAP, ErrMACInUse, ...
	Netns string // the namespace asked for ("" for the caller's)
	Name  string // the TAP, port or MAC concerned
	msg   string
	err   error // the kernel's answer, or nil
}

// Errorf is an Error of kind about name in h, its message formatted.
func Errorf(kind error, h *netns.NS, name, format string, a ...any) *Error {
	return &Error{Kind: kind, Netns: h.Name(), Name: name, msg: fmt.Sprintf(format, a...)}
}

func (e *Error) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

// Unwrap gives the kind and the kernel's answer to errors.Is and As.
func (e *Error) Unwrap() []error {
	if e.err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.err}
}
