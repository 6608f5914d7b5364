package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/dhcp"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
)

// ErrInvalid is what every refusal of Config.Validate wraps: the Config
// breaks one of its rules, whatever the machine.
var ErrInvalid = errors.New("invalid configuration")

// invalid is a rule's message that is also ErrInvalid.
type invalid struct{ err error }

func (e invalid) Error() string   { return e.err.Error() }
func (e invalid) Unwrap() []error { return []error{e.err, ErrInvalid} }

// refuse is Validate's *Error about part, whose value (fmt's %v of it; ""
// for none) breaks the rule the message says; with is the other part the
// rule names, 0 for none.
func refuse(part Part, value any, with Part, format string, args ...any) error {
	v := fmt.Sprint(value)
	if value == nil {
		v = ""
	}
	return &Error{Part: part, Value: v, With: with, Err: invalid{fmt.Errorf(format, args...)}}
}

// Validate applies every rule of the Config that needs no system state:
// ranges, names, addresses, what one part needs of another and what
// cannot be combined. It reads nothing of the machine, so a Config it
// accepts can fail to start only for the machine's reasons (no NIC, no
// privilege, a CPU not allowed). A refusal is an *Error naming the part
// (and With, the other part of a rule between two) that wraps ErrInvalid.
// Open calls it first.
func (c *Config) Validate() error {
	for _, rule := range []func() error{c.validateNames, c.validateTAP, c.validateWorkers, c.validateKernelPoll,
		c.validateNAPI, c.validatePrivileges, c.validateVMPorts, c.validateHost, c.validateAB, c.validateRest} {
		if err := rule(); err != nil {
			return err
		}
	}
	return nil
}

// checkIfName refuses what the kernel refuses as an interface name
// (net/core/dev.c: dev_valid_name): empty, IFNAMSIZ bytes or more, "."
// or "..", '/', ':' or white space.
func checkIfName(name string) error {
	switch {
	case name == "":
		return errors.New("no name")
	case len(name) >= unix.IFNAMSIZ:
		return fmt.Errorf("%q has %d bytes: an interface name has at most %d", name, len(name), unix.IFNAMSIZ-1)
	case name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n\r\v\f"):
		return fmt.Errorf("%q is no interface name: want no '/', ':' or spaces, and neither \".\" nor \"..\"", name)
	}
	return nil
}

func (c *Config) validateNames() error {
	if err := checkIfName(c.NIC.Name); err != nil {
		return refuse(PartNIC, nil, 0, "%w", err)
	}
	t := c.TAP
	if t.Name != "" {
		if err := checkIfName(t.Name); err != nil {
			return refuse(PartTAPName, nil, 0, "%w", err)
		}
	}
	switch {
	case t.Name != "" && t.Name == c.NIC.Name:
		return refuse(PartTAPName, quote(t.Name), PartNIC, "names the NIC: the TAP needs a name of its own")
	case t.Persist && t.Name == "":
		return refuse(PartPersist, nil, PartTAPName, "needs the TAP's name: a later run finds the TAP by it")
	}
	if t.Netns != "" {
		if err := netns.CheckName(t.Netns); err != nil {
			return refuse(PartTAPNetns, quote(t.Netns), 0, "%w", err)
		}
	}
	return nil
}

func (c *Config) validateTAP() error {
	t, ns := c.TAP, c.TAP.NAPISettings
	var napiPart Part // the first NAPI setting given
	switch {
	case ns.Threaded:
		napiPart = PartTAPNAPIThreaded
	case ns.GROFlushTimeout != 0:
		napiPart = PartTAPGROFlush
	case ns.DeferHardIRQs != 0:
		napiPart = PartTAPNAPIDefer
	}
	switch {
	case t.Queues < 0 || t.Queues > MaxQueues:
		return refuse(PartTAPQueues, t.Queues, 0, "want 1 to %d (0: 1)", MaxQueues)
	case t.MTU != 0 && (t.MTU < tap.MinMTU || t.MTU > tap.MaxMTU):
		return refuse(PartTAPMTU, t.MTU, 0, "want %d to %d bytes, or 0 for the NIC's", tap.MinMTU, tap.MaxMTU)
	case ns.GROFlushTimeout < 0:
		return refuse(PartTAPGROFlush, ns.GROFlushTimeout, 0, "must not be negative")
	case ns.DeferHardIRQs < 0:
		return refuse(PartTAPNAPIDefer, ns.DeferHardIRQs, 0, "must not be negative")
	case napiPart != 0 && c.AB == nil && t.NAPI == tap.Off:
		return refuse(napiPart, nil, PartTAPNAPI, "acts on the TAP's NAPI: it needs TAP NAPI auto or on")
	}
	if err := tap.CheckMAC(t.MAC); err != nil {
		return refuse(PartTAPMAC, t.MAC, 0, "%w", err)
	}
	return nil
}

func (c *Config) validateWorkers() error {
	w := c.Workers
	queues, batch := max(c.TAP.Queues, 1), cmp.Or(w.Batch, forward.DefaultBatch)
	need := forward.BufferBytes(queues, batch, true, 0)
	switch {
	case w.Batch < 0 || w.Batch > MaxBatch:
		return refuse(PartBatch, w.Batch, 0, "want 1 to %d frames (0: %d)", MaxBatch, forward.DefaultBatch)
	case need > MaxFrameBuffers:
		return refuse(PartBatch, batch, PartTAPQueues, "%d queues would take %.1f GiB of frame buffers (2 x batch x 64 KiB per queue): at most %d GiB; lower the batch or the queues",
			queues, float64(need)/(1<<30), MaxFrameBuffers>>30)
	case w.GROWindow < 0 || w.GROWindow > MaxGROWindow:
		return refuse(PartGROWindow, w.GROWindow, 0, "want 0 to %v", MaxGROWindow)
	case w.GROWindow > 0 && !w.GRO:
		return refuse(PartGROWindow, w.GROWindow, PartGRO, "waits for segments to merge: it needs GRO")
	case w.Spin < 0 || w.Spin > MaxSpin:
		return refuse(PartSpin, w.Spin, 0, "want 0 to %v", MaxSpin)
	case w.Spin > 0 && w.Poll != PollBlock:
		return refuse(PartSpin, w.Spin, PartPoll, "spins before the worker sleeps in ppoll: it needs the block poll mode")
	case w.L2.ControlAllow != 0 && !w.L2.DropControl:
		return refuse(PartL2ControlAllow, nil, PartL2Control, "lists exceptions to dropping L2 control frames, which are forwarded")
	case w.Split && c.NIC.Backend != BackendPacket:
		return refuse(PartSplit, nil, PartNICBackend, "reads and writes each NIC socket from two threads at once: it needs the packet NIC backend (an AF_XDP socket's rings serve one thread)")
	case w.Split && w.TAPIO != TAPIOSyscall:
		return refuse(PartSplit, nil, PartTAPIO, "reads and writes each TAP queue from two threads at once: it needs TAP I/O syscall (a queue's io_uring serves one thread)")
	case w.Split && c.AB != nil:
		return refuse(PartSplit, nil, PartAB, "splits each queue, and the A/B mode's queue switches between two TAPs from one thread")
	case w.Poll == PollKernel && c.NIC.Backend != BackendXDP:
		return refuse(PartPoll, w.Poll, PartNICBackend, "busy-polls the NIC queue's NAPI from AF_XDP sockets: it needs the xdp NIC backend")
	}
	for _, cpu := range w.CPUs {
		if cpu < 0 || cpu >= cpulist.Max {
			return refuse(PartCPUs, cpu, 0, "want CPU numbers 0 to %d", cpulist.Max-1)
		}
	}
	return nil
}

// validateKernelPoll checks KernelPoll, which tunes PollKernel alone.
func (c *Config) validateKernelPoll() error {
	kp := c.Workers.KernelPoll
	if c.Workers.Poll != PollKernel {
		return nil
	}
	switch {
	case kp.DeferHardIRQs > MaxNICDeferHardIRQs:
		return refuse(PartNICDefer, kp.DeferHardIRQs, 0, "want 0 to %d polls", MaxNICDeferHardIRQs)
	case kp.GROFlushTimeout < 0 || kp.GROFlushTimeout > MaxNICGROFlushTimeout:
		return refuse(PartNICGROFlush, kp.GROFlushTimeout, 0, "want 0 to %v", MaxNICGROFlushTimeout)
	case kp.DeferHardIRQs > 0 && kp.GROFlushTimeout == 0:
		return refuse(PartNICDefer, kp.DeferHardIRQs, PartNICGROFlush, "needs a NIC GRO flush timeout above 0: the kernel defers only with that timer armed")
	case kp.BusyPoll != 0 && (kp.BusyPoll < MinBusyPoll || kp.BusyPoll > MaxBusyPoll):
		return refuse(PartBusyPollTime, kp.BusyPoll, 0, "want %v to %v (0: %v)", MinBusyPoll, MaxBusyPoll, DefaultBusyPoll)
	case kp.OwnCPU && (kp.CPU < 0 || kp.CPU >= cpulist.Max):
		return refuse(PartBusyPollCPU, kp.CPU, 0, "want a CPU number, 0 to %d", cpulist.Max-1)
	}
	return nil
}

func (c *Config) validateNAPI() error {
	n := c.NAPI
	if n == nil {
		return nil
	}
	for _, p := range []struct {
		part Part
		cpu  int
	}{{PartTAPNAPICPU, n.TAPCPU}, {PartNICNAPICPU, n.NICCPU}} {
		if p.cpu < -1 || p.cpu >= cpulist.Max {
			return refuse(p.part, p.cpu, 0, "want a CPU number, 0 to %d, or -1 for none", cpulist.Max-1)
		}
	}
	switch {
	case n.NICMode != napi.ThreadedDisabled && n.NICMode != napi.ThreadedEnabled && n.NICMode != napi.ThreadedBusyPoll:
		return refuse(PartNICNAPI, n.NICMode, 0, "want enabled, busy-poll or disabled")
	case n.TAPCPU >= 0 && !c.TAP.NAPISettings.Threaded:
		return refuse(PartTAPNAPICPU, n.TAPCPU, PartTAPNAPIThreaded, "pins the TAP's NAPI kthreads: it needs threaded TAP NAPI")
	case n.NICCPU >= 0 && n.NICMode == napi.ThreadedDisabled:
		return refuse(PartNICNAPICPU, n.NICCPU, PartNICNAPI, "pins the NIC's NAPI kthreads: it needs the NIC's NAPI threaded")
	}
	return nil
}

// validatePrivileges refuses what needs privileges after Privileges.User
// dropped them.
func (c *Config) validatePrivileges() error {
	if c.Privileges.User == "" {
		return nil
	}
	switch {
	case c.NIC.Wait:
		return refuse(PartNICWait, nil, PartUser, "reopens packet sockets, which needs CAP_NET_RAW: it cannot be combined with a privilege drop")
	case c.Workers.Poll == PollKernel:
		return refuse(PartPoll, c.Workers.Poll, PartUser, "sets the NIC's NAPI instances and restores them at exit, which needs CAP_NET_ADMIN: it cannot be combined with a privilege drop")
	case c.NAPI != nil && c.NAPI.NICMode != napi.ThreadedDisabled:
		return refuse(PartNICNAPI, c.NAPI.NICMode, PartUser, "is restored at exit, which needs CAP_NET_ADMIN: it cannot be combined with a privilege drop")
	case c.Workers.Poll == PollThreaded:
		return refuse(PartPoll, c.Workers.Poll, PartUser, "makes the NIC's NAPI threaded and restores it at exit, which needs CAP_NET_ADMIN: it cannot be combined with a privilege drop")
	case c.NIC.GRO != ToggleAuto:
		return refuse(PartNICGRO, c.NIC.GRO, PartUser, "is restored at exit, which needs CAP_NET_ADMIN: it cannot be combined with a privilege drop")
	}
	return nil
}

func (c *Config) validateVMPorts() error {
	v := c.VMPorts
	switch {
	case v.N < 0 || v.N > MaxVMPorts:
		return refuse(PartVMPorts, v.N, 0, "want 0 to %d", MaxVMPorts)
	case v.Queues < 0 || v.Queues > MaxVMPortQueues:
		return refuse(PartVMPortQueues, v.Queues, 0, "want 1 to %d, or 0 for as many as the TAP has queues", MaxVMPortQueues)
	case v.Owner != "" && v.N == 0:
		return refuse(PartPortOwner, quote(v.Owner), PartVMPorts, "owns the VM ports' nodes: it needs VM ports")
	case v.VhostDir == "":
		return nil
	case !filepath.IsAbs(v.VhostDir):
		return refuse(PartVhostDir, quote(v.VhostDir), 0, "want an absolute directory")
	case v.N == 0:
		return refuse(PartVhostDir, nil, PartVMPorts, "makes the VM ports vhost-user sockets: it needs VM ports")
	case c.TAP.Name == "":
		return refuse(PartVhostDir, nil, PartTAPName, "needs the TAP's name: the sockets and the guests' MACs are named after the TAP, so that a restart finds them again")
	case c.NIC.Wait:
		return refuse(PartNICWait, nil, PartVhostDir, "reopens the queues' packet sockets, not those of the vhost-user ports: it cannot be combined with vhost-user VM ports")
	}
	return nil
}

// validateHost checks the host port's DHCP range against its address, and
// the port's name (the TAP's) against what dnsmasq takes.
func (c *Config) validateHost() error {
	h := c.Host
	if h == nil || h.DHCP == nil {
		return nil
	}
	r := h.DHCP.First.String() + "-" + h.DHCP.Last.String()
	if !h.Addr.IsValid() {
		return refuse(PartDHCP, r, PartHostAddr, "needs the host's address, in the subnet of the range")
	}
	if err := dhcp.CheckRange(h.Addr, h.DHCP.First, h.DHCP.Last); err != nil {
		return refuse(PartDHCP, r, PartHostAddr, "%w", err)
	}
	// A name the kernel fills in ("tap%d") is checked when dnsmasq starts.
	if name := c.TAP.Name; name != "" && !strings.Contains(name, "%") {
		if err := dhcp.CheckInterface(tapport.HostName(name)); err != nil {
			return refuse(PartDHCP, nil, PartTAPName, "%w: the host port is named after the TAP", err)
		}
	}
	return nil
}

// validateAB checks what the A/B mode needs of the rest of the Config;
// its control FIFO is the machine's, checked at Open.
func (c *Config) validateAB() error {
	ab := c.AB
	if ab == nil {
		return nil
	}
	switch {
	case c.TAP.Queues > 1:
		return refuse(PartAB, nil, PartTAPQueues, "it runs one worker over two TAP queues of its own: it takes 1 queue, not %d", c.TAP.Queues)
	case c.Workers.TAPIO != TAPIOSyscall:
		return refuse(PartAB, nil, PartTAPIO, "it writes the TAP with a system call per frame, not through io_uring")
	case c.VMPorts.N > 0:
		return refuse(PartAB, nil, PartVMPorts, "it takes no VM ports: only frames from the NIC choose an arm")
	case c.TAP.Persist:
		return refuse(PartAB, nil, PartPersist, "a persistent TAP records one IFF_NAPI for all its queues, not one per arm")
	case ab.Delay < 0:
		return refuse(PartABDelay, ab.Delay, 0, "want 0 or more")
	case !ab.NAPI[0] && !ab.NAPI[1] && c.TAP.NAPISettings != (tap.NAPISettings{}):
		return refuse(PartABNAPI, "off,off", PartTAPNAPIThreaded, "the TAP's NAPI settings act on an arm with IFF_NAPI: give one arm IFF_NAPI")
	}
	return nil
}

// validateRest checks the metrics address, the stats interval and the
// ready fd.
func (c *Config) validateRest() error {
	if m := c.Metrics; m != nil && m.Listener == nil {
		_, port, err := net.SplitHostPort(m.Addr)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || n > 65535 {
			return refuse(PartMetricsAddr, quote(m.Addr), 0, "want HOST:PORT, e.g. %s (port 0: any free one)", DefaultMetricsAddr)
		}
	}
	switch e := c.Log.StatsEvery; {
	case e < 0 || e > 0 && e < MinStatsEvery:
		return refuse(PartStatsEvery, e, 0, "want at least %v, or 0 for none", MinStatsEvery)
	case c.Notify.ReadyFd < 0:
		return refuse(PartReadyFd, c.Notify.ReadyFd, 0, "want a file descriptor number above 0 (stdin's), or 0 for none")
	}
	return nil
}

// quote is s as a value in a message: quoted when empty or spaced.
func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n") {
		return strconv.Quote(s)
	}
	return s
}
