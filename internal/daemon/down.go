package daemon

import (
	"errors"

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
	// Features is what became of their feature journals (NIC.GRO).
	Features []FeatureRecovery
}

// Recovered says, a line each, what became of the NAPI and feature
// journals.
func (r Removed) Recovered() []string {
	var out []string
	for _, n := range r.NAPI {
		out = append(out, n.String())
	}
	for _, f := range r.Features {
		out = append(out, f.String())
	}
	return out
}

// Down puts back the NAPI settings and features that tapfwds killed while
// they ran left on the NICs of the caller's network namespace
// (NAPIJournalDir, then FeatureJournalDir) and, when tapName is not
// empty, removes the persistent TAP tapName in namespace ns that no daemon is attached to (tap.ErrAttached), with what
// a persistent lab keeps: the VM ports on it and their device nodes, its
// host port, the lease file of its DHCP server and, when vhostDir is not
// empty, the vhost-user sockets there.
func Down(tapName, ns, vhostDir string) (Removed, error) {
	var r Removed
	js, err := newNAPIJournals(NAPIJournalDir)
	if err == nil {
		r.NAPI, err = js.recover("", restoreNAPIRecord)
	}
	fjs, ferr := newFeatureJournals(FeatureJournalDir)
	if ferr == nil {
		r.Features, ferr = fjs.recover("", restoreFeatures)
	}
	err = errors.Join(err, ferr)
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

// DownCommand is the command that removes a persistent TAP.
func DownCommand(tapName, ns string) string {
	if ns == "" {
		return "tapfwd down --tap " + tapName
	}
	return "tapfwd down --tap " + tapName + " --tap-netns " + ns
}
