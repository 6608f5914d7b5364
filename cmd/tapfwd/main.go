// Command tapfwd forwards frames between a multiqueue TAP device and a NIC
// through AF_PACKET. Its benchmark is a separate command, tapfwd-bench.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/tapfwd/tapfwd/internal/buildinfo"
	"github.com/tapfwd/tapfwd/internal/cliflag"
)

const usage = `tapfwd: put a multiqueue TAP device on a wire from userspace.

Usage:
  tapfwd run --nic IFACE [flags]     forward between a new TAP and IFACE
  tapfwd features [--json]           what this kernel offers tapfwd
  tapfwd napi list|set [flags]       NIC NAPI instances: threaded, busy-poll, kthread CPU
  tapfwd vm-port add|list|del ...    VM ports (macvtap) on a TAP for QEMU/libvirt guests
  tapfwd down --tap NAME             remove a persistent TAP (run --persist) and its VM ports
  tapfwd status [--json]             what a running tapfwd negotiated and is doing
  tapfwd version                     this binary's version, VCS revision and Go version

Run "tapfwd COMMAND -h" for a command's flags. The benchmark against the
Linux bridge is tapfwd-bench (make bench).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks errors already explained by the flag package.
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch("tapfwd", usage, args, map[string]command{
		"run":      func(a []string) error { return cmdRun(a, stderr) },
		"features": func(a []string) error { return cmdFeatures(a, stdout, stderr) },
		"vm-port":  func(a []string) error { return cmdVMPort(a, stdout, stderr) },
		"napi":     func(a []string) error { return cmdNapi(a, stdout, stderr) },
		"down":     func(a []string) error { return cmdDown(a, stdout, stderr) },
		"version":  func(a []string) error { return cmdVersion(a, stdout, stderr) },
		"status":   func(a []string) error { return cmdStatus(a, stdout, stderr) },
		// Not listed: started by run --user to remove its VM ports.
		"janitor": func([]string) error { return cmdJanitor(os.Stdin, stderr) },
		// Not listed: started by run --dhcp to run dnsmasq.
		"dhcp-keeper": func([]string) error { return cmdDHCPKeeper(os.Stdin, os.Stdout, stderr) },
	}, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "tapfwd: %v\n", err)
	return 1
}

// A command runs with the arguments after its name.
type command func(args []string) error

// dispatch runs the command of cmds that args[0] names. Without one, or
// with an unknown one, it prints usage to stderr and returns errUsage; for
// help, usage goes to stdout and it returns flag.ErrHelp.
func dispatch(name, usage string, args []string, cmds map[string]command, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if cmd, ok := cmds[args[0]]; ok {
			return cmd(args[1:])
		}
		switch args[0] {
		case "-h", "-help", "--help", "help":
			fmt.Fprint(stdout, usage)
			return flag.ErrHelp
		}
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", name, args[0])
	}
	fmt.Fprint(stderr, usage)
	return errUsage
}

// newFlagSet makes a subcommand's flag set that reports errors, not exits.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tapfwd %s\n\nFlags:\n", synopsis)
		cliflag.PrintDefaults(stderr, fs)
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "tapfwd: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version [--json]", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(buildinfo.Get())
	}
	_, err := fmt.Fprintln(stdout, "tapfwd", buildinfo.Get())
	return err
}
