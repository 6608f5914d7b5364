package daemon

import (
	"errors"
	"net"

	"github.com/tapfwd/tapfwd/internal/keeper"
	"github.com/tapfwd/tapfwd/internal/tapport"
)

// vmPorts are the TAP's VM ports: macvtaps, or vhost-user ports.
type vmPorts struct {
	macvtaps []tapport.Port
	vhost    []*vhostPort
}

// macvtapMACs are the macvtap ports' guest MACs, vhostMACs the vhost-user
// ports'.
func (p *vmPorts) macvtapMACs() []net.HardwareAddr {
	var out []net.HardwareAddr
	for _, m := range p.macvtaps {
		out = append(out, m.MAC)
	}
	return out
}

func (p *vmPorts) vhostMACs() []net.HardwareAddr {
	var out []net.HardwareAddr
	for _, v := range p.vhost {
		out = append(out, v.MAC)
	}
	return out
}

// addVMPorts makes the TAP have VMPorts.N ports: those a persistent TAP
// kept are adopted. Ports this run made are removed at Close (the kernel
// deletes them with the TAP, but not their device nodes), unless the TAP
// persists, which keeps them all.
func (d *Daemon) addVMPorts() error {
	if d.c.VMPorts.N == 0 {
		return nil
	}
	if d.c.VMPorts.VhostDir != "" {
		return d.addVhostPorts()
	}
	all, added, err := tapport.Ensure(tapport.Config{TAP: d.dev.Name(), Netns: d.dev.Netns(), Owner: d.m.owner}, d.c.VMPorts.N)
	if err != nil {
		return err
	}
	d.ports.macvtaps = all
	switch {
	case d.dev.Persistent():
		d.undo.add(func() {
			d.log.Info("the persistent TAP stays, with its VM ports and their device nodes",
				"tap", d.dev.Name(), "vm_ports", len(all), "remove_with", DownCommand(d.dev.Name(), d.dev.Netns()))
		})
	case d.m.cred != nil:
		// After the drop only a privileged process can remove them.
		k, err := keeper.StartJanitor(keeper.Janitor{Ports: added})
		if err != nil {
			return errors.Join(err, tapport.Remove(added))
		}
		d.undo.closing("stopping the janitor", k.Stop)
	default:
		d.undo.closing("removing the VM ports", func() error { return tapport.Remove(added) })
	}
	for i, p := range all {
		d.log.Info("vm-port", "name", p.Name, "dev", p.Dev, "mac", p.MAC.String(), "qemu", macvtapQEMU(p, i))
	}
	return nil
}
