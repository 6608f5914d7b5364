package daemon

import (
	"errors"
	"strings"

	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// Removed is what Down removed.
type Removed struct {
	VMPorts int // macvtaps, with their device nodes
	Sockets int // vhost-user sockets
	// NAPI is what became of the NAPI journals killed tapfwds left on
	// the NICs of the caller's namespace.
	NAPI []NAPIRecovery
}

// Down puts back the NAPI settings that tapfwds killed while they ran
// left on the NICs of the caller's network namespace (NAPIJournalDir)
// and, when tapName is not empty, removes the persistent TAP tapName in
// namespace ns that no daemon is attached to (tap.ErrAttached), with what
// a persistent lab keeps: the VM ports on it and their device nodes, its
// host port, the lease file of its DHCP server and, when vhostDir is not
// empty, the vhost-user sockets there.
func Down(tapName, ns, vhostDir string) (Removed, error) {
	var r Removed
	js, err := newNAPIJournals(NAPIJournalDir)
	if err == nil {
		r.NAPI, err = js.recover("", restoreNAPIRecord)
	}
	if tapName == "" {
		return r, err
	}
	return r, errors.Join(err, downTAP(&r, tapName, ns, vhostDir))
}

// downTAP is Down's removal of the TAP.
func downTAP(r *Removed, tapName, ns, vhostDir string) error {
	ports, err := tapport.List(ns, tapName)
	if err != nil {
		return err
	}
	r.VMPorts = len(ports)
	if err := tap.Remove(tapName, ns); err != nil {
		return err
	}
	// The kernel took the ports with the TAP; their nodes are stale now.
	if err := tapport.Sweep(ns); err != nil {
		return err
	}
	if err := removeLeases(ns, tapName); err != nil {
		return err
	}
	if vhostDir != "" {
		// No daemon listens on them: it would hold the TAP.
		r.Sockets, err = vhostuser.RemoveSockets(vhostDir, ns, tapName, MaxVMPorts)
	}
	return err
}

// Text says what Down removed with TAP tapName; vhostDir is where the
// sockets were.
func (r Removed) Text(tapName, vhostDir string) string {
	var with []string
	if r.VMPorts > 0 {
		with = append(with, "its "+count(r.VMPorts, "VM port"))
	}
	if r.Sockets > 0 {
		with = append(with, count(r.Sockets, "vhost-user socket")+" in "+vhostDir)
	}
	if len(with) == 0 {
		return "removed TAP " + tapName
	}
	return "removed TAP " + tapName + " with " + strings.Join(with, " and ")
}

// DownCommand is the command that removes a persistent TAP.
func DownCommand(tapName, ns string) string {
	if ns == "" {
		return "tapfwd down --tap " + tapName
	}
	return "tapfwd down --tap " + tapName + " --tap-netns " + ns
}
