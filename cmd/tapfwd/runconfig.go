package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/dhcp"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/tap"
)

// runFlags are the flag values parseRun checks and turns into the
// configuration; the others go straight into it.
type runFlags struct {
	cpus, napi, vnet, tapAddr, tapMAC, nicThreaded, vhostUser string
	metricsAddr, logLevel, logFormat, configFile, dhcpRange   string
	guestVLANs, l2Control, l2Allow, tapIO                     string
	tapNapiCPU, nicNapiCPU, readyFd, busyPollCPU              int
	nicDefer                                                  uint
	nicGROFlush, busyPollTime                                 time.Duration
	abControl, abNAPI                                         string        // the hidden A/B mode's
	abDelay                                                   time.Duration // the hidden A/B mode's
	pprof, hostPort                                           bool
	given                                                     map[string]bool // the flags given, on the command line or in --config
}

// tapIOModes are --tap-io's values.
var tapIOModes = map[string]daemon.TAPIO{"syscall": daemon.TAPIOSyscall, "uring": daemon.TAPIOURing, "auto": daemon.TAPIOAuto}

func (f *runFlags) register(fs *flag.FlagSet, c *daemon.Config) {
	fs.StringVar(&c.NIC.Name, "nic", "", "NIC (or veth) to forward to; required")
	fs.StringVar(&c.TAP.Name, "tap", "", `TAP interface name; empty lets the kernel pick "tapN"`)
	fs.IntVar(&c.TAP.Queues, "queues", 1, fmt.Sprintf("number of TAP queues and packet sockets, one worker each (1-%d)", daemon.MaxQueues))
	fs.StringVar(&f.cpus, "cpus", "", `CPUs for the workers, e.g. "0,1" or "2-3" (queue i takes the i-th, wrapping); "none" disables pinning; empty pins queue i to the i-th allowed CPU`)
	fs.BoolVar(&c.Workers.FollowLoad, "follow-load", daemon.DefaultFollowLoad, "let each queue's worker move among the CPUs of --cpus (all allowed ones when empty) to follow its load: while it is busy and its CPU has had no idle time for half a second, it moves to one of them that had (at most every 2 s); false keeps queue i on its CPU")
	fs.BoolVar(&c.Workers.Split, "split-directions", false, "run each queue as two workers, one per direction: the one that reads the NIC on the queue's CPU, the one that reads the TAP on the next CPU of --cpus (wrapping), so each direction's work, the kernel's included, has a CPU of its own; needs --nic-backend packet and --tap-io syscall; split queues do not follow their load")
	fs.StringVar(&f.napi, "napi", "auto", "IFF_NAPI on the TAP: auto (when the kernel has it), on (fail without it), off")
	fs.StringVar(&f.vnet, "vnet-hdr", "auto", "IFF_VNET_HDR (virtio-net headers, offloads) on the TAP: auto, on, off")
	fs.StringVar(&c.TAP.Netns, "tap-netns", "", "move the TAP into this network namespace (a name under /run/netns); empty keeps it here")
	fs.StringVar(&f.tapAddr, "tap-addr", "", `address for the TAP in CIDR form, e.g. "198.18.1.2/24"; empty assigns none`)
	fs.IntVar(&c.TAP.MTU, "tap-mtu", 0, fmt.Sprintf("TAP MTU in bytes (%d-%d); 0 takes the NIC's MTU", tap.MinMTU, tap.MaxMTU))
	fs.StringVar(&f.tapMAC, "tap-mac", "", "TAP Ethernet address, e.g. 02:00:00:00:00:01; empty derives one from the TAP's name and namespace and the machine's id (/etc/machine-id), the same on every run")
	fs.BoolVar(&c.TAP.NAPISettings.Threaded, "tap-napi-threaded", false, "run the TAP's NAPI poll in a kthread (sysfs threaded=1), so written frames can pile up and merge in GRO; needs IFF_NAPI")
	fs.DurationVar(&c.TAP.NAPISettings.GROFlushTimeout, "tap-gro-flush-timeout", 0, "the TAP's gro_flush_timeout (e.g. 20us): how long GRO may hold frames; 0 leaves the kernel default; needs IFF_NAPI")
	fs.IntVar(&c.TAP.NAPISettings.DeferHardIRQs, "tap-napi-defer-hard-irqs", 0, "the TAP's napi_defer_hard_irqs: polls to repeat before re-arming; 0 leaves the kernel default; needs IFF_NAPI")
	fs.IntVar(&f.tapNapiCPU, "tap-napi-cpu", -1, "pin the TAP's NAPI kthreads (napi/TAP-0, with --tap-napi-threaded) to this CPU; -1 leaves them")
	fs.StringVar(&f.nicThreaded, "nic-napi-threaded", "", "set the NIC's NAPI instances threaded over netlink: enabled (a kthread polls on demand) or busy-poll (Linux 6.19+, polls continuously); empty leaves them; restored on exit. A veth has NAPI instances only with GRO on (--nic-gro on)")
	fs.IntVar(&f.nicNapiCPU, "nic-napi-cpu", -1, "pin the NIC's NAPI kthreads (with --nic-napi-threaded) to this CPU; -1 leaves them")
	fs.TextVar(&c.Workers.Poll, "poll", daemon.PollBlock, "how workers wait: block (sleep in ppoll until a fd is ready), busy (spin on non-blocking reads: lowest latency, one full CPU per queue), kernel (with --nic-backend xdp: the kernel busy-polls the NIC queue's NAPI while the worker waits, through io_uring) or threaded (block, with the NIC's NAPI threaded: --nic-napi-threaded enabled unless given)")
	fs.UintVar(&f.nicDefer, "nic-napi-defer-hard-irqs", daemon.DefaultNICDeferHardIRQs, fmt.Sprintf("with --poll kernel, the NIC NAPI instances' defer-hard-irqs (netdev napi-set, restored at exit): how many polls that find nothing keep a NAPI masked, so that its frames wait for the worker's busy poll instead of being polled at once in the sender's softirq (0 to %d polls; 0 defers nothing)", daemon.MaxNICDeferHardIRQs))
	fs.DurationVar(&f.nicGROFlush, "nic-gro-flush-timeout", daemon.DefaultNICGROFlushTimeout, fmt.Sprintf("with --poll kernel, the NIC NAPI instances' gro-flush-timeout (netdev napi-set, restored at exit): the timer that polls a masked NAPI when no busy poll came, so the longest a frame waits while the worker is busy (a duration such as 200us, 0 to %v; 0 defers nothing)", daemon.MaxNICGROFlushTimeout))
	fs.DurationVar(&f.busyPollTime, "busy-poll-time", daemon.DefaultBusyPoll, fmt.Sprintf("with --poll kernel, how long each wait of a worker busy-polls its NIC queue's NAPI (io_uring's busy-poll timeout) before it sleeps: CPU spent for latency (a duration such as 200us, %v to %v)", daemon.MinBusyPoll, daemon.MaxBusyPoll))
	fs.IntVar(&f.busyPollCPU, "busy-poll-cpu", -1, "with --poll kernel, busy-poll the NIC queues' NAPI instances from a thread of tapfwd's pinned to this CPU, without pause (it keeps that CPU busy), while the workers sleep in ppoll; give the workers other CPUs (--cpus: a worker pinned to it is warned of); -1 busy-polls in each worker's wait (--busy-poll-time)")
	fs.TextVar(&c.NIC.Backend, "nic-backend", daemon.BackendPacket, "sockets on the NIC: packet (AF_PACKET, fanout over the queues) or xdp (an AF_XDP socket bound to each NIC queue 0..--queues-1, fed by an XDP program attached while tapfwd runs; the NIC's RX queue count should equal --queues)")
	fs.TextVar(&c.NIC.GRO, "nic-gro", daemon.ToggleAuto, "the NIC's GRO (ethtool -k generic-receive-offload) while tapfwd runs: auto (leave it as it is), on (the kernel merges a flow's segments before tapfwd reads them; a veth merges only frames from a peer with TSO off) or off; restored at exit, or by the next run or tapfwd down after a kill")
	fs.TextVar(&c.NIC.XDPMode, "xdp-mode", afxdp.ModeAuto, "with --nic-backend xdp, how the XDP program attaches: auto (native, else generic), native (in the driver) or generic (on the skb)")
	fs.BoolVar(&c.Workers.GRO, "gro", true, "userspace GRO: merge consecutive TCP segments of a flow from the NIC into one GSO frame per TAP write, and same-size UDP datagrams into one USO frame when the TAP takes USO (needs the TAP's vnet header)")
	fs.IntVar(&c.Workers.Batch, "batch", forward.DefaultBatch, fmt.Sprintf("most frames moved per direction per wake-up (1-%d)", daemon.MaxBatch))
	fs.StringVar(&f.tapIO, "tap-io", "syscall", "how workers read and write the TAP: syscall (a read or write per frame), uring (a batch per io_uring_enter; fails where io_uring is missing or refused, or the kernel is older than 6.4), auto (uring where it works, else syscall, said in one log line)")
	fs.DurationVar(&c.Workers.GROWindow, "gro-window", 0, fmt.Sprintf("with --gro, how long a worker that read less than a batch from the NIC waits for more segments to merge (a duration, at most %v); 0 never waits", daemon.MaxGROWindow))
	fs.DurationVar(&c.Workers.Spin, "spin", 0, fmt.Sprintf("with --poll block, the longest a worker spins on its fds before it sleeps (a duration such as 50us, at most %v), adapted to how soon frames come after a sleep began and none while idle: CPU for fewer wake-ups; 0 never spins", daemon.MaxSpin))
	fs.BoolVar(&c.NIC.Promisc, "promisc", false, "put the NIC in promiscuous mode instead of asking for the TAP's MAC and all multicast")
	fs.BoolVar(&c.Workers.StrictMAC, "strict-mac", false, "drop frames from the TAP whose source MAC is not the TAP's (the host port's with --host-port) or a macvtap VM port's, and accept from the NIC only frames to those MACs, the vhost-user ports', broadcast and multicast (a BPF filter): lets several instances share one NIC (a vhost-user port's guest sends from its own MAC only, with or without it)")
	fs.BoolVar(&c.NIC.Wait, "wait-nic", false, "when the NIC is removed, wait for it to come back and resume instead of exiting (needs CAP_NET_RAW throughout: not with --user)")
	fs.StringVar(&c.Privileges.User, "user", "", "after opening every fd, drop to this user: supplementary groups cleared, its uid and primary gid, no capabilities")
	fs.IntVar(&c.VMPorts.N, "vm-ports", 0, fmt.Sprintf("VM ports to create at start and remove at exit (0-%d): macvtaps in bridge mode on the TAP, or with --vhost-user vhost-user sockets; 0 creates none (see tapfwd vm-port)", daemon.MaxVMPorts))
	fs.IntVar(&c.VMPorts.Queues, "vm-port-queues", 0, fmt.Sprintf("queue pairs of each --vhost-user port (1-%d), each served by a worker of its own; the guest's NIC takes as many (the printed QEMU and libvirt lines say how); 0: as many as --queues", daemon.MaxVMPortQueues))
	fs.StringVar(&f.vhostUser, "vhost-user", "", "make the --vm-ports VM ports vhost-user sockets in this directory (made mode 0755 if missing) instead of macvtaps: TAP-I.sock, or NS:TAP-I.sock with --tap-netns, each with a MAC of its own derived from the TAP's name and I, printed at start with the QEMU and libvirt lines to attach; mode 0600 (0660 with --vm-port-owner); removed at exit unless --persist. Needs --tap. Empty: macvtaps")
	fs.StringVar(&f.metricsAddr, "metrics-addr", daemon.DefaultMetricsAddr, `serve Prometheus metrics at http://HOST:PORT/metrics; empty disables`)
	fs.BoolVar(&f.pprof, "pprof", false, "also serve Go's profiler at /debug/pprof/ on --metrics-addr (for profiling the data path)")
	fs.DurationVar(&c.Log.StatsEvery, "stats-interval", 0, "log a one-line throughput summary per queue this often (e.g. 10s); 0 disables")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log lines as text (key=value) or json (one object per line)")
	fs.BoolVar(&c.TAP.Persist, "persist", false, "make the TAP persistent: it stays, with its VM ports and their device nodes, when tapfwd exits, and a later run with the same --tap attaches to it (its queues, vnet-hdr and napi must match); remove it with tapfwd down")
	fs.StringVar(&c.VMPorts.Owner, "vm-port-owner", "", "USER[:GROUP] that owns the VM ports' device nodes (or vhost-user sockets) with mode 0660, so an unprivileged QEMU can open them; empty: root, mode 0600")
	fs.IntVar(&f.readyFd, "ready-fd", -1, "write a line to this file descriptor and close it once forwarding has started (for launchers that are not systemd); -1 disables")
	fs.StringVar(&f.configFile, "config", "", "read flags from this file: one NAME = VALUE per line, NAME as the flag without dashes, # comments; flags on the command line win")
	fs.StringVar(&f.guestVLANs, "guest-vlans", "allow", "frames from the TAP side (lab, VM ports) with an 802.1Q/802.1ad tag: allow, or deny (dropped as guest_vlan)")
	fs.StringVar(&f.l2Control, "l2-control", "forward", "frames from the TAP side to the IEEE 802.1D reserved addresses 01:80:c2:00:00:00-0f (STP, PAUSE, LACP, 802.1X, LLDP): forward, or drop (as l2_control) but those --l2-control-allow lists")
	fs.StringVar(&f.l2Allow, "l2-control-allow", "", `with --l2-control drop, the reserved addresses still forwarded, by last byte in hex, e.g. "0e" for LLDP or "0e,02"`)
	fs.BoolVar(&f.hostPort, "host-port", false, "give the lab host its own port on the TAP (a macvlan in bridge mode, named after the TAP with an h) carrying --tap-addr instead of the TAP, so the host and the guests on VM ports reach each other; kept with --persist")
	fs.StringVar(&f.dhcpRange, "dhcp", "", `with --host-port, run dnsmasq on the host port handing out this range of --tap-addr's subnet to the segment, e.g. "198.18.1.100-198.18.1.150"; stopped at exit`)
	fs.StringVar(&f.abControl, "ab-control", "", "tapfwd-bench's in-run A/B mode: the TAP gets two queues, the one worker writes to the queue each byte read from this FIFO picks (bit 0), with a delay per frame (bit 1); empty: off")
	fs.StringVar(&f.abNAPI, "ab-napi", "off,on", "with --ab-control, IFF_NAPI on TAP queue 0 and queue 1: off or on each")
	fs.DurationVar(&f.abDelay, "ab-delay", 10*time.Microsecond, "with --ab-control, how long each frame waits (busy) before its write while bit 1 is set, for every 1500 bytes of it or part of them")
	cliflag.Hide(fs, "ab-control", "ab-napi", "ab-delay")
}

// parseRun parses `tapfwd run`'s arguments into the daemon's configuration,
// checked: the flags' syntax and their own rules (a flag that tunes one
// not given) here, then the configuration's rules (daemon.Config.Validate,
// every rule that needs no system state, its refusals explained as flags),
// so the daemon can only fail for reasons of the machine (no NIC, no
// privilege). The logger writes to stderr, help to stdout. A bad flag or
// value (no --nic, a stray argument, flags that exclude each other) is a
// *cliflag.UsageError naming the flag.
func parseRun(args []string, stdout, stderr io.Writer) (*daemon.Config, error) {
	fs := newFlagSet("run", "run --nic IFACE [flags]", stdout)
	var f runFlags
	c := &daemon.Config{}
	f.register(fs, c)
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if f.configFile != "" {
		if err := cliflag.ReadConfig(fs, f.configFile); err != nil {
			return nil, err
		}
	}
	if c.NIC.Name == "" {
		return nil, cliflag.Misuse(fs, "--nic is required")
	}
	f.given = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	if err := f.check(c, stderr); err != nil {
		return nil, cliflag.Misuse(fs, "%w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, cliflag.Misuse(fs, "%w", explainRun(err, c))
	}
	return c, nil
}

// check completes the configuration from the flags parsed into runFlags.
func (f *runFlags) check(c *daemon.Config, stderr io.Writer) error {
	if f.readyFd < -1 || f.readyFd == 0 { // -1 is the Config's 0
		return fmt.Errorf("--ready-fd %d: want a file descriptor number other than stdin's (0), or -1 for none", f.readyFd)
	}
	c.Notify.ReadyFd = max(f.readyFd, 0)
	if f.metricsAddr != "" {
		c.Metrics = &daemon.Metrics{Addr: f.metricsAddr, PProf: f.pprof}
	}
	var err error
	if c.Log.Logger, err = cliflag.Logger(f.logLevel, f.logFormat, stderr); err != nil {
		return err
	}
	for _, check := range []func(*daemon.Config) error{f.tapConfig, f.abMode, f.nicNAPI, f.kernelPoll, f.workers, f.l2Policy, f.hostSide, f.vhostSide} {
		if err := check(c); err != nil {
			return err
		}
	}
	return nil
}

func (f *runFlags) tapConfig(c *daemon.Config) error {
	var err error
	if c.TAP.NAPI, err = tap.ParseWant(f.napi); err != nil {
		return fmt.Errorf("--napi %s: %w", cliflag.Quote(f.napi), err)
	}
	if c.TAP.VnetHdr, err = tap.ParseWant(f.vnet); err != nil {
		return fmt.Errorf("--vnet-hdr %s: %w", cliflag.Quote(f.vnet), err)
	}
	if c.TAP.Addr, err = parseAddr(f.tapAddr); err != nil {
		return fmt.Errorf("--tap-addr %s: %w", cliflag.Quote(f.tapAddr), err)
	}
	if c.TAP.MAC, err = tap.HardwareAddr(f.tapMAC); err != nil {
		return fmt.Errorf("--tap-mac %s: %w", cliflag.Quote(f.tapMAC), err)
	}
	return nil
}

// parseAddr parses an address with its prefix length, "198.18.1.2/24";
// "" is none.
func parseAddr(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		bits := 24
		if a.Is6() {
			bits = 64
		}
		return netip.Prefix{}, fmt.Errorf("want the address with its prefix length, e.g. %s/%d", s, bits)
	}
	return netip.Prefix{}, errors.New("want an IP address with its prefix length, e.g. 198.18.1.2/24")
}

// abMode takes --ab-control, --ab-napi and --ab-delay: the bench's in-run
// A/B mode, hidden from the help.
func (f *runFlags) abMode(c *daemon.Config) error {
	if f.abControl == "" && !f.given["ab-napi"] && !f.given["ab-delay"] {
		return nil
	}
	ab := &daemon.AB{Control: f.abControl, Delay: f.abDelay}
	a, b, ok := strings.Cut(f.abNAPI, ",")
	for i, s := range []string{a, b} {
		w, err := tap.ParseWant(s)
		ok, ab.NAPI[i] = ok && err == nil && w != tap.Auto, w == tap.On
	}
	switch {
	case f.abControl == "":
		return errors.New("--ab-napi and --ab-delay tune the A/B mode: give --ab-control too")
	case !ok:
		return fmt.Errorf("--ab-napi %s: want off or on for queue 0 and queue 1, e.g. off,on", cliflag.Quote(f.abNAPI))
	case f.given["napi"]:
		return errors.New("--napi is per queue with --ab-control: give --ab-napi")
	}
	c.AB = ab
	return nil
}

// nicNAPI takes the NIC's NAPI flags, and makes the NAPI tuning when
// there is something to tune.
func (f *runFlags) nicNAPI(c *daemon.Config) error {
	var mode napi.Threaded
	if f.nicThreaded != "" {
		var err error
		if mode, err = napi.ParseThreaded(f.nicThreaded); err != nil || mode == napi.ThreadedDisabled {
			return fmt.Errorf("--nic-napi-threaded %s: want enabled or busy-poll", cliflag.Quote(f.nicThreaded))
		}
	}
	if f.tapNapiCPU != -1 || mode != napi.ThreadedDisabled || f.nicNapiCPU != -1 {
		c.NAPI = &daemon.NAPI{TAPCPU: f.tapNapiCPU, NICMode: mode, NICCPU: f.nicNapiCPU}
	}
	return nil
}

// kernelPoll takes --nic-napi-defer-hard-irqs, --nic-gro-flush-timeout,
// --busy-poll-time and --busy-poll-cpu, which tune --poll kernel.
func (f *runFlags) kernelPoll(c *daemon.Config) error {
	kernel := c.Workers.Poll == daemon.PollKernel
	switch {
	case !kernel && (f.given["nic-napi-defer-hard-irqs"] || f.given["nic-gro-flush-timeout"] || f.given["busy-poll-time"] || f.given["busy-poll-cpu"]):
		return errors.New("--nic-napi-defer-hard-irqs, --nic-gro-flush-timeout, --busy-poll-time and --busy-poll-cpu tune --poll kernel: give --poll kernel too")
	case f.busyPollCPU != -1 && f.given["busy-poll-time"]:
		return errors.New("--busy-poll-time is how long each worker's wait busy-polls: with --busy-poll-cpu the workers do not busy-poll")
	case kernel:
		kp := &c.Workers.KernelPoll
		*kp = daemon.KernelPoll{DeferHardIRQs: uint32(min(f.nicDefer, math.MaxUint32)), GROFlushTimeout: f.nicGROFlush, BusyPoll: f.busyPollTime}
		if f.busyPollCPU != -1 {
			kp.BusyPoll, kp.OwnCPU, kp.CPU = 0, true, f.busyPollCPU
		}
	}
	return nil
}

// workers takes --cpus and --tap-io.
func (f *runFlags) workers(c *daemon.Config) error {
	var ok bool
	if c.Workers.TAPIO, ok = tapIOModes[f.tapIO]; !ok {
		return fmt.Errorf("--tap-io %s: want syscall, uring or auto", cliflag.Quote(f.tapIO))
	}
	switch f.cpus {
	case "":
	case "none":
		c.Workers.CPUs = []int{}
	default:
		list, err := cpulist.Parse(f.cpus)
		if err != nil {
			return fmt.Errorf("--cpus %s: %w", cliflag.Quote(f.cpus), err)
		}
		c.Workers.CPUs = list
	}
	return nil
}

// either takes a flag of two words: false for off, true for on.
func either(flag, v, off, on string) (bool, error) {
	switch v {
	case off:
		return false, nil
	case on:
		return true, nil
	}
	return false, fmt.Errorf("--%s %s: want %s or %s", flag, cliflag.Quote(v), off, on)
}

// l2Policy takes --guest-vlans, --l2-control and --l2-control-allow.
func (f *runFlags) l2Policy(c *daemon.Config) error {
	var err error
	if c.Workers.L2.DenyVLANs, err = either("guest-vlans", f.guestVLANs, "allow", "deny"); err != nil {
		return err
	}
	if c.Workers.L2.DropControl, err = either("l2-control", f.l2Control, "forward", "drop"); err != nil {
		return err
	}
	for b := range strings.SplitSeq(f.l2Allow, ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(b), "0x"), 16, 8)
		if err != nil || n > 0x0f {
			return fmt.Errorf("--l2-control-allow %s: %q is not the last byte of a reserved address 01:80:c2:00:00:00-0f (00 to 0f)", cliflag.Quote(f.l2Allow), b)
		}
		c.Workers.L2.ControlAllow |= 1 << n
	}
	return nil
}

// hostSide takes --host-port and --dhcp: the lab address goes on the host
// port instead of the TAP, and the range must lie in its subnet.
func (f *runFlags) hostSide(c *daemon.Config) error {
	if f.hostPort {
		c.Host = &daemon.HostPort{Addr: c.TAP.Addr}
		c.TAP.Addr = netip.Prefix{}
	}
	if f.dhcpRange == "" {
		return nil
	}
	if !f.hostPort {
		return errors.New("--dhcp serves the guests from the host's port on the segment: add --host-port")
	}
	first, last, err := dhcp.ParseRange(f.dhcpRange)
	if err != nil {
		return fmt.Errorf("--dhcp %s: %w", cliflag.Quote(f.dhcpRange), err)
	}
	c.Host.DHCP = &daemon.DHCPRange{First: first, Last: last}
	return nil
}

// vhostSide takes --vhost-user: the VM ports become vhost-user sockets in
// the directory, made absolute.
func (f *runFlags) vhostSide(c *daemon.Config) error {
	if f.vhostUser == "" {
		return nil
	}
	var err error
	if c.VMPorts.VhostDir, err = filepath.Abs(f.vhostUser); err != nil {
		return fmt.Errorf("--vhost-user: %w", err)
	}
	return nil
}
