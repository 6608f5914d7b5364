package daemon

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
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
	// InUse are the processes that had a VM port open, or named a
	// vhost-user socket in their command line, when Down removed it:
	// their guests lost their NICs.
	InUse []Holder
}

// Holder is a process that held what Down removed.
type Holder struct {
	What string // "VM port tfwvm0", "vhost-user socket PATH"
	Pid  int
	Comm string // its command name
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
// empty, the vhost-user sockets there. It removes them whoever holds them
// (a guest loses its NIC, as `tapfwd down` warns), and names in
// Removed.InUse the processes that did.
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
	r.InUse = holders(ports, vhostDir, ns, tapName)
	if err := tap.Remove(tapName, ns); err != nil {
		r.InUse = nil
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

// holders are the processes that hold ports, by their device numbers, or
// name the TAP's vhost-user sockets in vhostDir ("": none).
func holders(ports []tapport.Port, vhostDir, ns, tapName string) []Holder {
	devs := map[uint64]bool{}
	for _, p := range ports {
		devs[unix.Mkdev(p.Major, p.Minor)] = true
	}
	var out []Holder
	byDev := procfs.DeviceHolders(devs)
	for _, p := range ports {
		for _, pid := range byDev[unix.Mkdev(p.Major, p.Minor)] {
			out = append(out, Holder{"VM port " + p.Name, pid, procfs.Comm(pid)})
		}
	}
	var socks []string
	for i := 0; vhostDir != "" && i < MaxVMPorts; i++ {
		if p := vhostuser.SocketPath(vhostDir, ns, tapName, i); fileExists(p) {
			socks = append(socks, p)
		}
	}
	named := procfs.Naming(socks)
	for _, p := range socks {
		for _, pid := range named[p] {
			out = append(out, Holder{"vhost-user socket " + p, pid, procfs.Comm(pid)})
		}
	}
	return out
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// Text says what Down removed with TAP tapName; vhostDir is where the
// sockets were. A line for each process that held what it removed
// follows.
func (r Removed) Text(tapName, vhostDir string) string {
	var with []string
	if r.VMPorts > 0 {
		with = append(with, "its "+count(r.VMPorts, "VM port"))
	}
	if r.Sockets > 0 {
		with = append(with, count(r.Sockets, "vhost-user socket")+" in "+vhostDir)
	}
	text := "removed TAP " + tapName
	if len(with) > 0 {
		text += " with " + strings.Join(with, " and ")
	}
	for _, h := range r.InUse {
		text += fmt.Sprintf("\n%s was in use by pid %d (%s): its guest has lost its NIC", h.What, h.Pid, h.Comm)
	}
	return text
}

// DownCommand is the command that removes a persistent TAP.
func DownCommand(tapName, ns string) string {
	if ns == "" {
		return "tapfwd down --tap " + tapName
	}
	return "tapfwd down --tap " + tapName + " --tap-netns " + ns
}
