package vmport

import (
	"errors"

	"github.com/tapfwd/tapfwd/internal/rootdir"
	"github.com/tapfwd/tapfwd/internal/tapport"
)

// Errors callers test for with errors.Is. The package also returns
// netns.ErrNotFound for a missing namespace and netns.ErrNotPermitted
// without CAP_NET_ADMIN.
var (
	// ErrNoTAP means the TAP named is not there, or is no TAP.
	ErrNoTAP = tapport.ErrNoTAP
	// ErrNotTAP means the name is another kind of device; it matches
	// ErrNoTAP too.
	ErrNotTAP = tapport.ErrNotTAP
	// ErrNoPort means there is no port of that name.
	ErrNoPort = errors.New("vm-port not found")
	// ErrMACInUse means another interface in the namespace, or on the
	// TAP, has the port's address. It is hostport.ErrMACInUse too.
	ErrMACInUse = tapport.ErrMACInUse
	// ErrNameInUse means an interface of the port's name exists.
	ErrNameInUse = tapport.ErrNameInUse
	// ErrNoMacvtap means the kernel has no macvtap.
	ErrNoMacvtap = errors.New("macvtap not supported")
	// ErrUnsafeDir means DevDir is not a root-owned directory only root may
	// write to; no node is made in it. It is dhcp.ErrUnsafeDir too.
	ErrUnsafeDir = rootdir.ErrUnsafe
	// ErrNotNode means a path where a port's node belongs holds something
	// else (a file, a link, another device); it is left alone.
	ErrNotNode = errors.New("not a VM port's device node")
)

// Error is an error of one of the kinds above, with what it is about.
type Error = tapport.Error
