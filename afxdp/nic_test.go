package afxdp_test

import (
	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/forward"
)

// A Socket is what the forwarder takes as its wire side.
var (
	_ forward.NIC            = (*afxdp.Socket)(nil)
	_ forward.KernelCounters = (*afxdp.Socket)(nil)
)
