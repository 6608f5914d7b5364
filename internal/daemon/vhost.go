package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afpacket"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/keeper"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// vhostPort is one vhost-user VM port: its socket, the MAC its guest must
// use, and the packet socket of its own that puts the guest's frames on
// the NIC.
type vhostPort struct {
	Name string // vhostuser.PortName: TAP-I
	Path string
	MAC  net.HardwareAddr
	port *vhostuser.Port
	nics []*afpacket.Socket // one per queue pair
}

// prepareVhost makes VMPorts.VhostDir if it is missing, checks that only
// root can write to it (vhostuser.CheckDir: else anyone who can would put
// a socket of their own where a guest's QEMU connects) and checks every
// socket path, before anything is set up, so that a directory that cannot
// or must not work fails the start with nothing made.
func (d *Daemon) prepareVhost() error {
	dir := d.c.VMPorts.VhostDir
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail(PartVhostDir, "", fmt.Errorf("making the directory: %w", err))
		}
		// Not the umask's: the QEMU user must reach the sockets.
		if err := os.Chmod(dir, 0o755); err != nil {
			return fail(PartVhostDir, "", err)
		}
		d.log.Info("made the vhost-user directory", "dir", dir)
	case err != nil:
		return fail(PartVhostDir, "", err)
	case !fi.IsDir():
		return fail(PartVhostDir, "", fmt.Errorf("%s is not a directory", dir))
	}
	if err := vhostuser.CheckDir(dir); err != nil {
		return fail(PartVhostDir, "", err)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fail(PartVhostDir, "", fmt.Errorf("%s: %w", dir, os.NewSyscallError("access", err)))
	}
	for i := range d.c.VMPorts.N {
		if err := vhostuser.CheckPath(vhostuser.SocketPath(dir, d.c.TAP.Netns, d.c.TAP.Name, i)); err != nil {
			return fail(PartVhostDir, "", err)
		}
	}
	return nil
}

// addVhostPorts listens on the ports' sockets (before the privilege drop,
// which leaves accepting and mapping guest memory to the user). They are
// removed at Close, by a janitor after the drop, unless the TAP persists
// and keeps them for the next run, which takes them over.
func (d *Daemon) addVhostPorts() error {
	keep := d.dev.Persistent()
	c := vhostuser.Config{Mode: 0o600, KeepSocket: keep, QueuePairs: d.c.VMPorts.vhostQueues(d.c.TAP.Queues)}
	if o := d.m.owner; o != nil {
		c.Mode, c.Owner = 0o660, &vhostuser.Owner{UID: o.UID, GID: o.GID}
	}
	var files []vhostuser.SocketFile
	tapName, ns := d.dev.Name(), d.dev.Netns()
	for i := range d.c.VMPorts.N {
		p := &vhostPort{Name: vhostuser.PortName(tapName, i), Path: vhostuser.SocketPath(d.c.VMPorts.VhostDir, ns, tapName, i),
			MAC: vhostuser.GuestMAC(ns, tapName, i)}
		c.Path, c.Logger = p.Path, d.log.With("vm_port", p.Name)
		vp, err := vhostuser.Listen(c)
		if err != nil {
			return fail(PartVhostDir, "", err)
		}
		p.port = vp
		d.ports.vhost = append(d.ports.vhost, p)
		files = append(files, vp.SocketFile())
		d.undo.closing("closing vhost-user port "+p.Name, vp.Close)
	}
	switch {
	case keep:
		d.undo.add(func() {
			d.log.Info("the vhost-user sockets stay with the persistent TAP", "dir", d.c.VMPorts.VhostDir, "vm_ports", len(files))
		})
	case d.m.cred != nil:
		// After the drop the directory is no longer writable to us.
		k, err := keeper.StartJanitor(keeper.Janitor{Sockets: files})
		if err != nil {
			return err
		}
		d.undo.closing("stopping the janitor", k.Stop)
	}
	d.logVhostPorts()
	return nil
}

// logVhostPorts logs each port with the QEMU arguments and the libvirt
// element that attach a guest to it.
func (d *Daemon) logVhostPorts() {
	for i, p := range d.ports.vhost {
		n := len(p.port.Queues())
		d.log.Info("vm-port", "name", p.Name, "type", "vhost-user", "socket", p.Path, "mac", p.MAC.String(), "queues", n,
			"qemu", vhostuser.QEMULine(p.Path, p.MAC, i, n), "libvirt", oneLine(vhostuser.LibvirtXML(p.Path, p.MAC, n)))
	}
	d.log.Info("vhost-user guests need shared memory", "qemu", vhostuser.QEMUMemory, "libvirt", oneLine(vhostuser.LibvirtMemory))
}

// oneLine joins an indented XML snippet into one line, for a log line.
func oneLine(s string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(s, "\n") {
		b.WriteString(strings.TrimSpace(l))
	}
	return b.String()
}

// openGuestSenders opens a packet socket on the NIC for each queue pair of
// each vhost-user port: what its guest sends on that pair leaves through
// it (the queue workers' sockets are theirs).
func (d *Daemon) openGuestSenders() error {
	for _, p := range d.ports.vhost {
		for range p.port.Queues() {
			s, err := afpacket.OpenSender(afpacket.Config{Ifname: d.c.NIC.Name, Batch: d.c.Workers.Batch})
			if err != nil {
				return err
			}
			p.nics = append(p.nics, s)
			d.undo.closing("closing a packet socket of "+p.Name, s.Close)
		}
	}
	return nil
}

// guestPorts are the vhost-user ports as the forwarder takes them, a
// worker per queue pair, pinned to the CPUs after the queues' (wrapping,
// as theirs do).
func (d *Daemon) guestPorts() ([]forward.GuestPort, error) {
	vhost := d.ports.vhost
	if len(vhost) == 0 {
		return nil, nil
	}
	q, pairs := d.c.TAP.Queues, 0
	for _, p := range vhost {
		pairs += len(p.nics)
	}
	cpus, err := workerCPUs(d.c.Workers.CPUs, q+pairs)
	if err != nil {
		return nil, fail(PartCPUs, "", err)
	}
	out, next := make([]forward.GuestPort, len(vhost)), q
	for i, p := range vhost {
		out[i] = forward.GuestPort{MAC: p.MAC, Active: p.port.ActivePairs}
		for k, vq := range p.port.Queues() {
			out[i].Queues = append(out[i].Queues, forward.GuestQueue{Guest: vq, NIC: p.nics[k], CPU: cpus[next]})
			next++
		}
	}
	return out, nil
}

// logVhostTotals logs each vhost-user port's totals: what its guest sent
// and what it was handed, and the drops each way.
func (d *Daemon) logVhostTotals() {
	for i, g := range d.fw.GuestWorkers() {
		from, to := &g.Counters.From, &g.Counters.To
		var fromDrops, toDrops uint64
		for r := range from.Drops {
			fromDrops += from.Drops[r].Load()
			toDrops += to.Drops[r].Load()
		}
		d.log.Info("vm-port totals", "name", d.ports.vhost[i].Name, "from_guest_packets", from.Rx.Packets.Load(),
			"from_guest_gso_frames", from.GSO.Load(), "from_guest_drops", fromDrops,
			"to_guest_packets", to.Tx.Packets.Load(), "to_guest_drops", toDrops)
	}
}
