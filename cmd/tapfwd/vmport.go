package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vmport"
)

const vmPortUsage = `Usage: tapfwd vm-port COMMAND [flags]

Commands:
  add    put a VM port (macvtap, bridge mode) on tapfwd's TAP and print how
         to attach QEMU or libvirt to it
  list   the VM ports on TAPs in a namespace
  del    delete a VM port

A VM port lives in the TAP's network namespace (--netns, as given to
tapfwd run --tap-netns). Guests on ports of one TAP reach each other and,
through tapfwd, the wire. Run "tapfwd vm-port COMMAND -h" for a command's
flags.
`

func cmdVMPort(args []string, stdout, stderr io.Writer) error {
	return cliflag.Dispatch("tapfwd vm-port", vmPortUsage, args, map[string]cliflag.Command{
		"add":  func(a []string) error { return vmPortAdd(a, stdout, stderr) },
		"list": func(a []string) error { return vmPortList(a, stdout, stderr) },
		"del":  func(a []string) error { return vmPortDel(a, stderr) },
	}, stdout, stderr)
}

// vmPortJSON is one port in --json output.
type vmPortJSON struct {
	Name     string `json:"name"`
	Ifindex  int    `json:"ifindex"`
	MAC      string `json:"mac"`
	TAP      string `json:"tap"`
	TAPIndex int    `json:"tap_ifindex"`
	Netns    string `json:"netns,omitempty"`
	// Dev is the character device to open; empty when there is none.
	Dev     string `json:"dev"`
	DevNum  string `json:"dev_num"` // "major:minor"
	Up      bool   `json:"up"`
	QEMU    string `json:"qemu"`
	Libvirt string `json:"libvirt"`
	// LibvirtDirect lets libvirt make its own macvtap on the TAP instead.
	LibvirtDirect string `json:"libvirt_direct"`
}

func portJSON(p vmport.Port) vmPortJSON {
	return vmPortJSON{
		Name: p.Name, Ifindex: p.Index, MAC: p.MAC.String(), TAP: p.TAP, TAPIndex: p.TAPIndex,
		Netns: p.Netns, Dev: p.Dev, DevNum: fmt.Sprintf("%d:%d", p.Major, p.Minor), Up: p.Up,
		QEMU: qemuLine(p), Libvirt: libvirtXML(p), LibvirtDirect: libvirtDirectXML(p),
	}
}

// qemuLine is a QEMU command line that attaches a virtio-net NIC with the
// port's MAC to the port: the shell opens the device as fd 3, QEMU takes
// it with fd=3 (vnet headers on, so guest offloads pass). Add the VM's own
// options (disk, memory, -accel kvm).
func qemuLine(p vmport.Port) string {
	dev := p.Dev
	if dev == "" {
		dev = "DEVICE"
	}
	return fmt.Sprintf("qemu-system-x86_64 -netdev tap,id=n0,fd=3 -device virtio-net-pci,netdev=n0,mac=%s 3<>%s", p.MAC, dev)
}

// libvirtXML uses the port itself: libvirt (5.7 and later) opens an existing
// macvtap named by <target managed='no'>. libvirtd must see the port, so
// the TAP must live in libvirtd's namespace.
func libvirtXML(p vmport.Port) string {
	return fmt.Sprintf(`<interface type='ethernet'>
  <mac address='%s'/>
  <target dev='%s' managed='no'/>
  <model type='virtio'/>
</interface>`, p.MAC, p.Name)
}

// libvirtDirectXML has libvirt create and delete its own macvtap on the TAP
// (no vm-port needed; give it a MAC no port uses).
func libvirtDirectXML(p vmport.Port) string {
	return fmt.Sprintf(`<interface type='direct'>
  <source dev='%s' mode='bridge'/>
  <model type='virtio'/>
</interface>`, p.TAP)
}

func vmPortAdd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("vm-port add", "vm-port add --tap NAME [--netns NS] [--mac MAC] [--name NAME] [--owner USER[:GROUP]] [--json]", stderr)
	tapName := fs.String("tap", "", "the TAP tapfwd runs on (tapfwd run --tap); required")
	netns := fs.String("netns", "", "network namespace of the TAP (tapfwd run --tap-netns); empty: this one")
	mac := fs.String("mac", "", "the guest's Ethernet address, e.g. 02:00:00:00:00:10; empty picks a random locally administered one")
	name := fs.String("name", "", `name of the port's interface (at most 15 bytes); empty picks "`+vmport.NamePrefix+`N"`)
	owner := fs.String("owner", "", "USER[:GROUP] that owns the port's device node (mode 0660), so an unprivileged QEMU (libvirt's) can open it; empty: root, mode 0600")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *tapName == "" {
		fmt.Fprintln(stderr, "tapfwd vm-port add: --tap is required")
		fs.Usage()
		return errUsage
	}
	m, err := tap.HardwareAddr(*mac)
	if err != nil {
		return fmt.Errorf("--mac: %w", err)
	}
	c := vmport.Config{TAP: *tapName, Netns: *netns, Name: *name, MAC: m}
	if *owner != "" {
		if c.Owner, err = lookupOwner(*owner); err != nil {
			return fmt.Errorf("--owner: %w", err)
		}
	}
	p, err := vmport.Add(c)
	if err != nil {
		return explain(err)
	}
	if *asJSON {
		return vmWriteJSON(stdout, portJSON(p))
	}
	where := ""
	if p.Netns != "" {
		where = fmt.Sprintf(" (network namespace %s)", p.Netns)
	}
	fmt.Fprintf(stdout, "vm-port %s on TAP %s%s, macvtap bridge mode, ifindex %d\n", p.Name, p.TAP, where, p.Index)
	fmt.Fprintf(stdout, "device:    %s (char %d:%d)\n", p.Dev, p.Major, p.Minor)
	fmt.Fprintf(stdout, "guest MAC: %s (the guest must use it: the port only passes frames for it)\n", p.MAC)
	fmt.Fprintf(stdout, "\nQEMU (add your VM's own options):\n  %s\n", qemuLine(p))
	fmt.Fprintf(stdout, "\nlibvirt, attaching to this port (libvirt 5.7 or later")
	if p.Netns != "" {
		fmt.Fprintf(stdout, "; libvirtd must run in namespace %s to see it", p.Netns)
	}
	fmt.Fprintf(stdout, "):\n%s\n", vmIndent(libvirtXML(p)))
	fmt.Fprintf(stdout, "\nor let libvirt make its own macvtap on the TAP (then skip vm-port add):\n%s\n", vmIndent(libvirtDirectXML(p)))
	fmt.Fprintf(stdout, "\nRemove it with: tapfwd vm-port del --name %s%s\n", p.Name, vmNetnsFlag(p.Netns))
	return nil
}

func vmPortList(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("vm-port list", "vm-port list [--tap NAME] [--netns NS] [--json]", stderr)
	tapName := fs.String("tap", "", "only ports on this TAP; empty: ports on every TAP")
	netns := fs.String("netns", "", "network namespace to look in; empty: this one")
	asJSON := fs.Bool("json", false, "print JSON (an array) instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	ports, err := vmport.List(*netns, *tapName)
	if err != nil {
		return explain(err)
	}
	if *asJSON {
		out := make([]vmPortJSON, 0, len(ports))
		for _, p := range ports {
			out = append(out, portJSON(p))
		}
		return vmWriteJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tIFINDEX\tTAP\tMAC\tSTATE\tDEVICE")
	for _, p := range ports {
		state := "down"
		if p.Up {
			state = "up"
		}
		dev := p.Dev
		if dev == "" {
			dev = fmt.Sprintf("- (char %d:%d has no node)", p.Major, p.Minor)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.Name, p.Index, p.TAP, p.MAC, state, dev)
	}
	return tw.Flush()
}

func vmPortDel(args []string, stderr io.Writer) error {
	fs := newFlagSet("vm-port del", "vm-port del --name NAME [--netns NS]", stderr)
	name := fs.String("name", "", "the port to delete (see vm-port list); required")
	netns := fs.String("netns", "", "network namespace of the port; empty: this one")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *name == "" {
		fmt.Fprintln(stderr, "tapfwd vm-port del: --name is required")
		fs.Usage()
		return errUsage
	}
	return explain(vmport.Del(*netns, *name))
}

const downUsage = `Usage: tapfwd down --tap NAME [--tap-netns NS] [--vhost-user DIR]

Removes a persistent TAP (tapfwd run --persist) that no tapfwd is attached
to, with the VM ports on it and their device nodes, its host port, the
lease file of its DHCP server (run --host-port --dhcp) and, with
--vhost-user, the vhost-user sockets run --persist kept in DIR. Guests on
those ports lose their NICs.

Flags:
`

func cmdDown(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("down", "down --tap NAME [--tap-netns NS] [--vhost-user DIR]", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, downUsage); cliflag.PrintDefaults(stderr, fs) }
	name := fs.String("tap", "", "the persistent TAP (tapfwd run --tap); required")
	ns := fs.String("tap-netns", "", "network namespace the TAP lives in (tapfwd run --tap-netns); empty: this one")
	vdir := fs.String("vhost-user", "", "directory of the TAP's vhost-user sockets (tapfwd run --vhost-user); empty: leave sockets alone")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *name == "" {
		fmt.Fprintln(stderr, "tapfwd down: --tap is required")
		fs.Usage()
		return errUsage
	}
	ports, err := vmport.List(*ns, *name)
	if err != nil {
		return explain(err)
	}
	if err := tap.Remove(*name, *ns); err != nil {
		if errors.Is(err, tap.ErrAttached) {
			return fmt.Errorf("%w (stop the tapfwd running on it first)", err)
		}
		return explain(err)
	}
	// The kernel took the ports with the TAP; their nodes are stale now.
	if err := vmport.Sweep(*ns); err != nil {
		return err
	}
	if err := removeLeases(*ns, *name); err != nil {
		return err
	}
	socks, err := removeVhostSockets(*vdir, *ns, *name)
	if err != nil {
		return err
	}
	if *vdir != "" {
		fmt.Fprintf(stdout, "removed TAP %s, its %d VM ports and %d vhost-user sockets in %s\n", *name, len(ports), socks, *vdir)
		return nil
	}
	fmt.Fprintf(stdout, "removed TAP %s and its %d VM ports\n", *name, len(ports))
	return nil
}

func vmNetnsFlag(ns string) string {
	if ns == "" {
		return ""
	}
	return " --netns " + ns
}

func vmIndent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func vmWriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return errors.Join(errors.New("writing JSON"), err)
	}
	return nil
}
