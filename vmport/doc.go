// Package vmport puts ports on a TAP: VM ports (macvtap, bridge mode) with device
// nodes under /dev/tapfwd for guests, and the lab host's own port (macvlan).
package vmport
