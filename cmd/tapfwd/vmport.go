package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/tap"
)

const vmPortUsage = `Usage: tapfwd vm-port COMMAND [flags]

Commands:
  add    put a VM port (macvtap, bridge mode) on tapfwd's TAP and print how
         to attach QEMU or libvirt to it
  list   the VM ports on TAPs in a namespace
  del    delete a VM port

A VM port lives in the TAP's network namespace (--tap-netns, as given to
tapfwd run). Guests on ports of one TAP reach each other and, through
tapfwd, the wire. Run "tapfwd vm-port COMMAND --help" for a command's
flags.
`

func cmdVMPort(args []string, stdout, stderr io.Writer) error {
	return cliflag.Dispatch("tapfwd vm-port", vmPortUsage, args, map[string]cliflag.Command{
		"add":  func(a []string) error { return vmPortAdd(a, stdout) },
		"list": func(a []string) error { return vmPortList(a, stdout) },
		"del":  func(a []string) error { return vmPortDel(a, stdout) },
	}, stdout, stderr)
}

func vmPortAdd(args []string, stdout io.Writer) error {
	fs := newFlagSet("vm-port add", "vm-port add --tap NAME [--tap-netns NS] [--mac MAC] [--name NAME] [--vm-port-owner USER[:GROUP]] [--json]", stdout)
	tapName := fs.String("tap", "", "the TAP tapfwd runs on (tapfwd run --tap); required")
	netns := netnsFlag(fs, "network namespace of the TAP (tapfwd run --tap-netns); empty: this one")
	mac := fs.String("mac", "", "the guest's Ethernet address, e.g. 02:00:00:00:00:10; empty picks a random locally administered one")
	name := fs.String("name", "", `name of the port's interface (at most 15 bytes); empty picks "`+tapport.NamePrefix+`N"`)
	owner := fs.String("vm-port-owner", "", "USER[:GROUP] that owns the port's device node (mode 0660), so an unprivileged QEMU (libvirt's) can open it; empty: root, mode 0600")
	cliflag.Alias(fs, "owner", "vm-port-owner")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *tapName == "" {
		return cliflag.Misuse(fs, "--tap is required")
	}
	m, err := tap.HardwareAddr(*mac)
	if err != nil {
		return cliflag.Misuse(fs, "--mac %s: %w", cliflag.Quote(*mac), err)
	}
	c := tapport.Config{TAP: *tapName, Netns: *netns, Name: *name, MAC: m}
	if *owner != "" {
		if c.Owner, err = daemon.LookupOwner(*owner); err != nil {
			return fmt.Errorf("--vm-port-owner %s: %w", cliflag.Quote(*owner), err)
		}
	}
	p, err := tapport.Add(c)
	if err != nil {
		return explain(err)
	}
	d := daemon.DescribeAdded(p)
	if *asJSON {
		return writeJSON(stdout, d)
	}
	where := ""
	if p.Netns != "" {
		where = fmt.Sprintf(" (network namespace %s)", p.Netns)
	}
	fmt.Fprintf(stdout, "vm-port %s on TAP %s%s, macvtap bridge mode, ifindex %d\n", p.Name, p.TAP, where, p.Index)
	fmt.Fprintf(stdout, "device:    %s (char %d:%d)\n", p.Dev, p.Major, p.Minor)
	fmt.Fprintf(stdout, "guest MAC: %s (the guest must use it: the port only passes frames for it)\n", p.MAC)
	fmt.Fprintf(stdout, "\nQEMU (add your VM's own options):\n  %s\n", d.QEMU)
	fmt.Fprintf(stdout, "\nlibvirt, attaching to this port (libvirt 5.7 or later")
	if p.Netns != "" {
		fmt.Fprintf(stdout, "; libvirtd must run in namespace %s to see it", p.Netns)
	}
	fmt.Fprintf(stdout, "):\n%s\n", vmIndent(d.Libvirt))
	fmt.Fprintf(stdout, "\nor let libvirt make its own macvtap on the TAP (then skip vm-port add):\n%s\n", vmIndent(d.LibvirtDirect))
	fmt.Fprintf(stdout, "\nRemove it with: tapfwd vm-port del --name %s%s\n", p.Name, vmNetnsFlag(p.Netns))
	return nil
}

func vmPortList(args []string, stdout io.Writer) error {
	fs := newFlagSet("vm-port list", "vm-port list [--tap NAME] [--tap-netns NS] [--json]", stdout)
	tapName := fs.String("tap", "", "only ports on this TAP; empty: ports on every TAP")
	netns := netnsFlag(fs, "network namespace to look in (tapfwd run --tap-netns); empty: this one")
	asJSON := fs.Bool("json", false, "print JSON (an array) instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	ports, err := tapport.List(*netns, *tapName)
	if err != nil {
		return explain(err)
	}
	if *asJSON {
		return writeJSON(stdout, daemon.DescribeMacvtaps(ports))
	}
	if len(ports) == 0 {
		return noPorts(stdout, *netns, *tapName)
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

// noPorts says that vm-port list found no ports in namespace ns (on TAP
// tapName, or on any), and where there are some.
func noPorts(stdout io.Writer, ns, tapName string) error {
	where := "this network namespace"
	if ns != "" {
		where = "network namespace " + ns
	}
	if tapName != "" {
		_, err := fmt.Fprintf(stdout, "no VM ports on TAP %s in %s\n", tapName, where)
		return err
	}
	_, err := fmt.Fprintf(stdout, "no VM ports in %s%s\n", where, elsewhere(ns, ""))
	return err
}

func vmPortDel(args []string, stdout io.Writer) error {
	fs := newFlagSet("vm-port del", "vm-port del --name NAME [--tap-netns NS]", stdout)
	name := fs.String("name", "", "the port to delete (see vm-port list); required")
	netns := netnsFlag(fs, "network namespace of the port, its TAP's (tapfwd run --tap-netns); empty: this one")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *name == "" {
		return cliflag.Misuse(fs, "--name is required")
	}
	return explain(tapport.Del(*netns, *name))
}

const downUsage = `Usage: tapfwd down [--tap NAME] [--tap-netns NS] [--vhost-user DIR]

Puts back the NIC NAPI settings and GRO that a tapfwd killed while it ran
left on the NICs of this network namespace (run it where tapfwd ran)
and, with --tap, removes a persistent TAP (tapfwd run --persist) that no
tapfwd is attached to, with the VM ports on it and their device nodes, its host
port, the lease file of its DHCP server (run --host-port --dhcp) and,
with --vhost-user, the vhost-user sockets run --persist kept in DIR.
Guests on those ports lose their NICs: down names the processes that had
them open.

Flags:
`

func cmdDown(args []string, stdout io.Writer) error {
	fs := newFlagSet("down", "down [--tap NAME] [--tap-netns NS] [--vhost-user DIR]", stdout)
	fs.Usage = func() { fmt.Fprint(stdout, downUsage); cliflag.PrintDefaults(stdout, fs) }
	name := fs.String("tap", "", "the persistent TAP (tapfwd run --tap) to remove; empty: only put back NAPI settings and GRO")
	ns := netnsFlag(fs, "network namespace the TAP lives in (tapfwd run --tap-netns); empty: this one")
	vdir := fs.String("vhost-user", "", "directory of the TAP's vhost-user sockets (tapfwd run --vhost-user); empty: leave sockets alone")
	if err := parse(fs, args); err != nil {
		return err
	}
	r, err := daemon.Down(*name, *ns, *vdir)
	for _, line := range r.Recovered() {
		fmt.Fprintln(stdout, line)
	}
	switch {
	case errors.Is(err, tap.ErrAttached):
		return fmt.Errorf("%w (stop the tapfwd running on it first)", err)
	case errors.Is(err, tapport.ErrNoTAP) && !errors.Is(err, tapport.ErrNotTAP):
		return fmt.Errorf("%w: nothing to remove%s", err, elsewhere(*ns, *name))
	case err != nil:
		return explain(err)
	case *name == "":
		return nil
	}
	fmt.Fprintln(stdout, r.Text(*name, *vdir))
	return nil
}

// elsewhere is the hint for a TAP named tapName (or, for "", VM ports on
// any TAP) not found in namespace ns: the namespace that has it, or how
// tapfwd run makes the TAP.
func elsewhere(ns, tapName string) string {
	what := "there is one"
	if tapName == "" {
		what = "there are VM ports"
	}
	switch where := tapport.Where(ns, tapName); {
	case len(where) > 0 && where[0] == "":
		return fmt.Sprintf(" (%s in this network namespace: leave --tap-netns out)", what)
	case len(where) > 0:
		return fmt.Sprintf(" (%s in network namespace %s: pass --tap-netns %s)", what, where[0], where[0])
	case tapName != "":
		return fmt.Sprintf(" (no network namespace here has one: tapfwd run --tap %s makes it)", tapName)
	}
	return ""
}

// netnsFlag is --tap-netns (also --netns): the TAP's network namespace,
// in every command's words as tapfwd run's.
func netnsFlag(fs *flag.FlagSet, usage string) *string {
	ns := fs.String("tap-netns", "", usage)
	cliflag.Alias(fs, "netns", "tap-netns")
	return ns
}

func vmNetnsFlag(ns string) string {
	if ns == "" {
		return ""
	}
	return " --tap-netns " + ns
}

func vmIndent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
