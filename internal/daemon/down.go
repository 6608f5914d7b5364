package daemon

import (
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vmport"
)

// Removed is what Down removed.
type Removed struct {
	VMPorts int // macvtaps, with their device nodes
	Sockets int // vhost-user sockets
}

// Down removes the persistent TAP tapName in namespace ns that no daemon
// is attached to (tap.ErrAttached), with what a persistent lab keeps: the
// VM ports on it and their device nodes, its host port, the lease file of
// its DHCP server and, when vhostDir is not empty, the vhost-user sockets
// there.
func Down(tapName, ns, vhostDir string) (Removed, error) {
	var r Removed
	ports, err := vmport.List(ns, tapName)
	if err != nil {
		return r, err
	}
	r.VMPorts = len(ports)
	if err := tap.Remove(tapName, ns); err != nil {
		return r, err
	}
	// The kernel took the ports with the TAP; their nodes are stale now.
	if err := vmport.Sweep(ns); err != nil {
		return r, err
	}
	if err := removeLeases(ns, tapName); err != nil {
		return r, err
	}
	if vhostDir != "" {
		// No daemon listens on them: it would hold the TAP.
		r.Sockets, err = vhostuser.RemoveSockets(vhostDir, ns, tapName, MaxVMPorts)
	}
	return r, err
}

// DownCommand is the command that removes a persistent TAP.
func DownCommand(tapName, ns string) string {
	if ns == "" {
		return "tapfwd down --tap " + tapName
	}
	return "tapfwd down --tap " + tapName + " --tap-netns " + ns
}
