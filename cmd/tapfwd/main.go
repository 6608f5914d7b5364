// Command tapfwd forwards frames between a multiqueue TAP device and a NIC
// through AF_PACKET. Its benchmark is a separate command, tapfwd-bench.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/internal/keeper"
)

const usage = `tapfwd: put a multiqueue TAP device on a wire from userspace.

Usage:
  tapfwd run --nic IFACE [flags]     forward between a new TAP and IFACE
  tapfwd features [--json]           what this kernel offers tapfwd
  tapfwd napi list|set [flags]       NIC NAPI instances: threaded, busy-poll, kthread CPU
  tapfwd vm-port add|list|del ...    VM ports (macvtap) on a TAP for QEMU/libvirt guests
  tapfwd down --tap NAME             remove a persistent TAP (run --persist) and its VM ports
  tapfwd status [--json]             what a running tapfwd negotiated and is doing
  tapfwd version (or --version, -V)  this binary's version, VCS revision and Go version

Run "tapfwd COMMAND --help" for a command's flags. The benchmark against the
Linux bridge is tapfwd-bench (make bench).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	err := cliflag.Dispatch("tapfwd", usage, args, map[string]cliflag.Command{
		"run":      func(a []string) error { return cmdRun(a, stdout, stderr) },
		"features": func(a []string) error { return cmdFeatures(a, stdout) },
		"vm-port":  func(a []string) error { return cmdVMPort(a, stdout, stderr) },
		"napi":     func(a []string) error { return cmdNapi(a, stdout, stderr) },
		"down":     func(a []string) error { return cmdDown(a, stdout) },
		"version":  func(a []string) error { return cliflag.Version("tapfwd", a, stdout) },
		"status":   func(a []string) error { return cmdStatus(a, stdout) },
		// Not listed: the keepers that run --user and --dhcp start.
		keeper.JanitorCommand: func([]string) error { return keeper.ServeJanitor(os.Stdin, stdout, stderr) },
		keeper.DHCPCommand:    func([]string) error { return keeper.ServeDHCP(os.Stdin, stdout, stderr) },
	}, stdout, stderr)
	return cliflag.Exit("tapfwd", err, stderr)
}

// newFlagSet makes a subcommand's flag set: its help goes to stdout, its
// errors are one line (cliflag.Parse).
func newFlagSet(name, synopsis string, stdout io.Writer) *flag.FlagSet {
	return cliflag.NewFlagSet("tapfwd", name, synopsis, stdout)
}

func parse(fs *flag.FlagSet, args []string) error { return cliflag.Parse(fs, args) }

// writeJSON writes v as indented JSON, as --json does.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}
