package daemon

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/tapfwd/tapfwd/internal/dhcp"
	"github.com/tapfwd/tapfwd/internal/keeper"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
)

// addHostPort gives the lab host its port on the TAP (Config.Host): a
// macvlan in bridge mode that carries the host's address, so the host and
// the guests on VM ports reach each other inside the kernel. A persistent
// TAP's port is adopted. The kernel deletes the port with the TAP, so a
// run that does not persist has nothing to undo. Without Config.Host, a
// port an earlier run left on a persistent TAP is removed: the address is
// on the TAP again.
func (d *Daemon) addHostPort() error {
	if d.c.Host == nil {
		return d.dropHostPort()
	}
	c := tapport.HostConfig{TAP: d.dev.Name(), Netns: d.dev.Netns(), Addr: d.c.Host.Addr}
	if key := d.c.TAP.MACKey; key != nil {
		// The lab's address is on this port: its MAC stays across restarts.
		c.MAC = tap.StableMAC(key, c.Netns, tapport.HostName(c.TAP))
	}
	p, err := tapport.EnsureHost(c)
	if err != nil {
		return fail(PartHostPort, "", err)
	}
	d.host = &p
	d.log.Info("host port", "name", p.Name, "mac", p.MAC.String(), "addr", addrString(p.Addr), "tap", p.TAP, "adopted", p.Adopted)
	if d.dev.Persistent() {
		d.undo.add(func() { d.log.Info("the host port stays with the persistent TAP", "name", p.Name) })
	}
	return nil
}

// dropHostPort removes the host port an earlier run with a host port left
// on the persistent TAP this run attached to.
func (d *Daemon) dropHostPort() error {
	if !d.dev.Attached() {
		return nil
	}
	p, ok, err := tapport.FindHost(d.dev.Netns(), d.dev.Name())
	if err != nil || !ok {
		return err
	}
	if err := tapport.RemoveHost(p); err != nil {
		return err
	}
	d.log.Info("removed the host port an earlier run left (no --host-port now): the lab address is on the TAP", "name", p.Name)
	return nil
}

func addrString(p netip.Prefix) string {
	if !p.IsValid() {
		return "none"
	}
	return p.String()
}

// labMAC is the lab host's MAC on the segment: its host port's when it has
// one (the TAP then carries no address and answers nothing), else the
// TAP's.
func (d *Daemon) labMAC() net.HardwareAddr {
	if d.host != nil {
		return d.host.MAC
	}
	return d.dev.MAC()
}

// tapMACs are the MACs behind the TAP: its own, its host port's, the
// macvtap ports' guests'. A frame from the NIC with one of them (or a
// vhost-user guest's) as its source is dropped.
func (d *Daemon) tapMACs() []net.HardwareAddr {
	out := []net.HardwareAddr{d.dev.MAC()}
	if d.host != nil {
		out = append(out, d.host.MAC)
	}
	return append(out, d.ports.macvtapMACs()...)
}

// strictMACs are the sources Workers.StrictMAC lets frames from the TAP
// have: the lab host's and the macvtap guests' (their frames come through
// the TAP, on which their ports sit).
func (d *Daemon) strictMACs() []net.HardwareAddr {
	return append([]net.HardwareAddr{d.labMAC()}, d.ports.macvtapMACs()...)
}

// startDHCP starts the DHCP server of Host.DHCP on the host port: dnsmasq,
// run by a keeper (this binary, still privileged) that stops it and
// removes its lease file when the daemon ends, however it ends. A
// persistent TAP keeps its lease file.
func (d *Daemon) startDHCP() error {
	if d.c.Host == nil || d.c.Host.DHCP == nil {
		return nil
	}
	if _, err := dhcp.Find(); err != nil {
		return fail(PartDHCP, "", err)
	}
	label, err := netns.Label(d.dev.Netns())
	if err != nil {
		return err
	}
	r := d.c.Host.DHCP
	c := dhcp.Config{Netns: d.dev.Netns(), Interface: d.host.Name, First: r.First, Last: r.Last,
		LeaseFile: dhcp.LeaseFile(label, d.dev.Name()), KeepLeases: d.dev.Persistent()}
	k, err := keeper.StartDHCP(c, d.log)
	if err != nil {
		return fail(PartDHCP, "", err)
	}
	d.undo.closing("stopping the DHCP server", k.Stop)
	d.log.Info("DHCP server", "range", c.First.String()+"-"+c.Last.String(), "interface", c.Interface,
		"leases", c.LeaseFile, "dnsmasq_pid", k.Pid, "dnsmasq", strings.Join(dhcp.Args(c), " "))
	return nil
}

// removeLeases removes the lease file a persistent TAP's DHCP server kept.
func removeLeases(ns, tapName string) error {
	label, err := netns.Label(ns)
	if err != nil {
		return err
	}
	if err := os.Remove(dhcp.LeaseFile(label, tapName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
