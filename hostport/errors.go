package hostport

import (
	"errors"

	"github.com/tapfwd/tapfwd/internal/tapport"
)

// Errors callers test for with errors.Is; they are package vmport's too.
// The package also returns netns.ErrNotFound for a missing namespace and
// netns.ErrNotPermitted without CAP_NET_ADMIN.
var (
	// ErrNoTAP means the TAP named is not there, or is no TAP.
	ErrNoTAP = tapport.ErrNoTAP
	// ErrNotTAP means the name is another kind of device; it matches
	// ErrNoTAP too.
	ErrNotTAP = tapport.ErrNotTAP
	// ErrMACInUse means another interface in the namespace, or on the
	// TAP, has the port's address.
	ErrMACInUse = tapport.ErrMACInUse
	// ErrNameInUse means an interface of the port's name exists.
	ErrNameInUse = tapport.ErrNameInUse
	// ErrNoMacvlan means the kernel has no macvlan.
	ErrNoMacvlan = errors.New("macvlan not supported")
)

// Error is an error of one of the kinds above, with what it is about.
type Error = tapport.Error
