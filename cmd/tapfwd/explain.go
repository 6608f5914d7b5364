package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// explain adds to an error from tap or tapport the flag a user can change:
// the libraries say what went wrong, only the CLI knows its flags.
func explain(err error) error {
	var pe *tapport.Error
	errors.As(err, &pe)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tap.ErrNameInUse):
		return fmt.Errorf("%w (choose another --tap or delete it)", err)
	case errors.Is(err, tap.ErrNoMultiQueue):
		return fmt.Errorf("%w: use --queues 1", err)
	case pe == nil, errors.Is(err, tapport.ErrNotTAP):
		return err
	case errors.Is(err, tapport.ErrNoTAP):
		return fmt.Errorf("%w%s", err, elsewhere(pe.Netns, pe.Name))
	case errors.Is(err, tapport.ErrNoPort):
		return fmt.Errorf("%w (list them with: tapfwd vm-port list%s)", err, vmNetnsFlag(pe.Netns))
	case errors.Is(err, tapport.ErrMACInUse):
		return fmt.Errorf("%w (choose another --mac, or leave it out for a random one)", err)
	case errors.Is(err, tapport.ErrNameInUse):
		return fmt.Errorf("%w: choose another --name", err)
	}
	return err
}

// runFlag is the flag of `tapfwd run` that sets each part of the daemon's
// configuration.
var runFlag = map[daemon.Part]string{
	daemon.PartUser: "--user", daemon.PartPortOwner: "--vm-port-owner", daemon.PartCPUs: "--cpus", daemon.PartReadyFd: "--ready-fd",
	daemon.PartVhostDir: "--vhost-user", daemon.PartHostPort: "--host-port", daemon.PartDHCP: "--dhcp",
	daemon.PartTAPNAPICPU: "--tap-napi-cpu", daemon.PartNICNAPI: "--nic-napi-threaded", daemon.PartMetricsAddr: "--metrics-addr",
	daemon.PartTAPMTU: "--tap-mtu", daemon.PartNICNAPICPU: "--nic-napi-cpu",
	daemon.PartTAPIO:       "--tap-io",
	daemon.PartNICBackend:  "--nic-backend",
	daemon.PartBusyPollCPU: "--busy-poll-cpu",
	daemon.PartAB:          "--ab-control",
	daemon.PartNIC:         "--nic", daemon.PartTAPName: "--tap", daemon.PartTAPNetns: "--tap-netns", daemon.PartTAPQueues: "--queues",
	daemon.PartTAPMAC: "--tap-mac", daemon.PartPersist: "--persist", daemon.PartTAPNAPI: "--napi", daemon.PartTAPNAPIThreaded: "--tap-napi-threaded",
	daemon.PartTAPGROFlush: "--tap-gro-flush-timeout", daemon.PartTAPNAPIDefer: "--tap-napi-defer-hard-irqs", daemon.PartBatch: "--batch",
	daemon.PartGRO: "--gro", daemon.PartGROWindow: "--gro-window", daemon.PartSpin: "--spin", daemon.PartSplit: "--split-directions", daemon.PartL2Control: "--l2-control", daemon.PartL2ControlAllow: "--l2-control-allow",
	daemon.PartPoll: "--poll", daemon.PartNICDefer: "--nic-napi-defer-hard-irqs", daemon.PartNICGROFlush: "--nic-gro-flush-timeout",
	daemon.PartBusyPollTime: "--busy-poll-time", daemon.PartNICWait: "--wait-nic", daemon.PartVMPorts: "--vm-ports",
	daemon.PartVMPortQueues: "--vm-port-queues", daemon.PartHostAddr: "--tap-addr", daemon.PartStatsEvery: "--stats-interval",
	daemon.PartABNAPI: "--ab-napi", daemon.PartABDelay: "--ab-delay", daemon.PartNICGRO: "--nic-gro",
}

// explainRun says which flag of `tapfwd run` c to change when the daemon
// does not start.
func explainRun(err error, c *daemon.Config) error {
	down := daemon.DownCommand(c.TAP.Name, c.TAP.Netns)
	var de *daemon.Error
	switch {
	case errors.Is(err, tap.ErrPersistent):
		return fmt.Errorf("%w (add --persist to attach to it, or remove it with: %s)", err, down)
	case errors.Is(err, tap.ErrMismatch):
		return fmt.Errorf("%w (start with the settings it was made with, or remove it with: %s)", err, down)
	case errors.Is(err, tap.ErrOwned):
		return fmt.Errorf("%w (tapfwd does not attach to it: remove it with %s, and let tapfwd make it)", err, down)
	case errors.Is(err, tap.ErrAttached):
		return fmt.Errorf("%w (is another tapfwd running on it?)", err)
	case errors.Is(err, tap.ErrNameInUse), errors.Is(err, tap.ErrNoMultiQueue):
		return explain(err)
	case !errors.As(err, &de):
		return err
	case errors.Is(err, daemon.ErrInvalid): // a rule of the Config: the flags it names are the advice
		return fmt.Errorf("%s: %w%s", strings.TrimSpace(runFlag[de.Part]+" "+de.Value), de.Err, withFlag(de.With))
	case errors.Is(err, napi.ErrNoInstances):
		return fmt.Errorf("--nic-napi-threaded: %s has no NAPI instances (a veth has them only with GRO on: --nic-gro on)", c.NIC.Name)
	}
	flag := strings.TrimSpace(runFlag[de.Part] + " " + de.Value) // "--user nobody"
	advice := ""
	switch {
	case de.Part == daemon.PartMetricsAddr && errors.Is(err, unix.EADDRINUSE):
		advice = ` (choose another address, or "" to disable metrics: each tapfwd needs an address of its own, or a socket passed by its service manager)`
	case de.Part == daemon.PartMetricsAddr:
		advice = ` (choose another address, or "" to disable metrics)`
	case de.Part == daemon.PartTAPMTU:
		advice = fmt.Sprintf(" (give --tap-mtu %d or less)", tap.MaxMTU)
	case errors.Is(err, vhostuser.ErrUnsafeDir):
		advice = " (the directory must be root's and writable by no one else, or others could take the guests' connections: chown root and chmod go-w it, or choose another)"
	case de.Part == daemon.PartHostPort && errors.Is(err, tapport.ErrNameInUse):
		advice = " (rename or remove that interface)"
	case errors.Is(err, afxdp.ErrNotSupported):
		advice = " (use --nic-backend packet, or a kernel built with CONFIG_XDP_SOCKETS and no seccomp filter, such as systemd's RestrictAddressFamilies=, denying AF_XDP)"
	case errors.Is(err, tap.ErrNoURing):
		advice = " (--tap-io auto falls back to a system call per frame)"
	case errors.Is(err, vhostuser.ErrPathTooLong):
		advice = " (choose a shorter directory, or a shorter --tap)"
	case errors.Is(err, vhostuser.ErrNotSocket):
		advice = " (remove it, or choose another directory)"
	case de.Part == daemon.PartVhostDir && (errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS)):
		advice = " (the directory must be writable to tapfwd as it starts: choose another)"
	}
	return fmt.Errorf("%s: %w%s", flag, de.Err, advice)
}

// withFlag is the advice " (--flag)" naming the flag of the other part a
// broken rule involves; "" for none.
func withFlag(p daemon.Part) string {
	if p == 0 {
		return ""
	}
	return " (" + runFlag[p] + ")"
}
