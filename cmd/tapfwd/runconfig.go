package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/dhcp"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/hostport"
	"github.com/tapfwd/tapfwd/internal/cpulist"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
)

// runConfig is what `tapfwd run`'s flags ask for, checked: every rule that
// needs no system state is applied by parseRun, so a runConfig can only
// fail at start for reasons of the machine (a NIC missing, no privilege).
type runConfig struct {
	NIC string
	TAP tap.Config // Name, Queues, NAPI, VnetHdr, MTU (0: the NIC's), MAC, Netns, Addr, NAPI settings
	// CPUs pins the workers: nil pins queue i to the i-th allowed CPU, an
	// empty non-nil list pins nothing.
	CPUs        []int
	TAPNAPICPU  int // -1: leave the TAP's NAPI kthreads where they are
	NICThreaded napi.Threaded
	NICNAPICPU  int // -1: leave
	Busy        bool
	GRO         bool
	Batch       int
	Promisc     bool
	StrictMAC   bool
	WaitNIC     bool
	User        string
	VMPorts     int
	MetricsAddr string
	PProf       bool
	StatsEvery  time.Duration
	LogLevel    slog.Level
	// PortOwner is --vm-port-owner, USER[:GROUP], resolved at start.
	PortOwner string
	// ReadyFd gets a line once forwarding has started; -1: none.
	ReadyFd int
	// L2 is what frames from the TAP side may carry onto the wire.
	L2 forward.L2Policy
	// LogJSON logs JSON objects instead of key=value text.
	LogJSON bool
	// HostPort puts the lab host on its own port (a macvlan) on the TAP,
	// with HostAddr (--tap-addr; TAP.Addr is then zero).
	HostPort bool
	HostAddr netip.Prefix
	// DHCPFirst and DHCPLast are --dhcp's range; zero without --dhcp.
	DHCPFirst, DHCPLast netip.Addr
	// VhostDir is --vhost-user, made absolute: the VM ports are vhost-user
	// sockets there instead of macvtaps. Empty: macvtaps.
	VhostDir string
}

// runFlags are the raw flag values, before parseRun checks them.
type runFlags struct {
	nic, tapName, cpus, napi, vnet, tapNetns, tapAddr, tapMAC string
	queues, tapMTU, tapDefer, tapNapiCPU, nicNapiCPU, batch   int
	tapThreaded, gro, promisc, strictMAC, waitNIC, pprof      bool
	tapGROFlush, statsInterval                                time.Duration
	nicThreaded, poll, user, metricsAddr, logLevel            string
	vmPorts, readyFd                                          int
	persist                                                   bool
	portOwner, configFile                                     string
	guestVLANs, l2Control, l2Allow, logFormat                 string
	hostPort                                                  bool
	dhcpRange, vhostUser                                      string
}

// Limits a configuration must stay within.
const (
	maxQueues  = 256
	maxBatch   = 1024
	maxVMPorts = 64
	// maxBufferBytes caps the workers' frame buffers.
	maxBufferBytes = 4 << 30
)

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.nic, "nic", "", "NIC (or veth) to forward to; required")
	fs.StringVar(&f.tapName, "tap", "", `TAP interface name; empty lets the kernel pick "tapN"`)
	fs.IntVar(&f.queues, "queues", 1, "number of TAP queues and packet sockets, one worker each (1-256)")
	fs.StringVar(&f.cpus, "cpus", "", `CPUs for the workers, e.g. "0,1" or "2-3" (queue i takes the i-th, wrapping); "none" disables pinning; empty pins queue i to the i-th allowed CPU`)
	fs.StringVar(&f.napi, "napi", "auto", "IFF_NAPI on the TAP: auto (when the kernel has it), on (fail without it), off")
	fs.StringVar(&f.vnet, "vnet-hdr", "auto", "IFF_VNET_HDR (virtio-net headers, offloads) on the TAP: auto, on, off")
	fs.StringVar(&f.tapNetns, "tap-netns", "", "move the TAP into this network namespace (a name under /run/netns); empty keeps it here")
	fs.StringVar(&f.tapAddr, "tap-addr", "", `address for the TAP in CIDR form, e.g. "198.18.1.2/24"; empty assigns none`)
	fs.IntVar(&f.tapMTU, "tap-mtu", 0, "TAP MTU in bytes; 0 takes the NIC's MTU")
	fs.StringVar(&f.tapMAC, "tap-mac", "", "TAP Ethernet address, e.g. 02:00:00:00:00:01; empty lets the kernel pick a random one")
	fs.BoolVar(&f.tapThreaded, "tap-napi-threaded", false, "run the TAP's NAPI poll in a kthread (sysfs threaded=1), so written frames can pile up and merge in GRO; needs IFF_NAPI")
	fs.DurationVar(&f.tapGROFlush, "tap-gro-flush-timeout", 0, "the TAP's gro_flush_timeout (e.g. 20us): how long GRO may hold frames; 0 leaves the kernel default; needs IFF_NAPI")
	fs.IntVar(&f.tapDefer, "tap-napi-defer-hard-irqs", 0, "the TAP's napi_defer_hard_irqs: polls to repeat before re-arming; 0 leaves the kernel default; needs IFF_NAPI")
	fs.IntVar(&f.tapNapiCPU, "tap-napi-cpu", -1, "pin the TAP's NAPI kthreads (napi/TAP-0, with --tap-napi-threaded) to this CPU; -1 leaves them")
	fs.StringVar(&f.nicThreaded, "nic-napi-threaded", "", "set the NIC's NAPI instances threaded over netlink: enabled (a kthread polls on demand) or busy-poll (Linux 6.19+, polls continuously); empty leaves them; restored on exit. A veth has NAPI instances only with GRO on")
	fs.IntVar(&f.nicNapiCPU, "nic-napi-cpu", -1, "pin the NIC's NAPI kthreads (with --nic-napi-threaded) to this CPU; -1 leaves them")
	fs.StringVar(&f.poll, "poll", "block", "how workers wait: block (sleep in ppoll until a fd is ready) or busy (spin on non-blocking reads: lowest latency, one full CPU per queue)")
	fs.BoolVar(&f.gro, "gro", true, "userspace GRO: merge consecutive TCP segments of a flow from the NIC into one GSO frame per TAP write, and same-size UDP datagrams into one USO frame when the TAP takes USO (needs the TAP's vnet header)")
	fs.IntVar(&f.batch, "batch", 64, "most frames moved per direction per wake-up (1-1024)")
	fs.BoolVar(&f.promisc, "promisc", false, "put the NIC in promiscuous mode instead of asking for the TAP's MAC and all multicast")
	fs.BoolVar(&f.strictMAC, "strict-mac", false, "drop frames from the TAP whose source MAC is not the TAP's (the host port's with --host-port), and accept from the NIC only frames to that MAC, broadcast and multicast (a BPF filter): lets several instances share one NIC; VM ports with their own MACs need it off")
	fs.BoolVar(&f.waitNIC, "wait-nic", false, "when the NIC is removed, wait for it to come back and resume instead of exiting (needs CAP_NET_RAW throughout: not with --user)")
	fs.StringVar(&f.user, "user", "", "after opening every fd, drop to this user: supplementary groups cleared, its uid and primary gid, no capabilities")
	fs.IntVar(&f.vmPorts, "vm-ports", 0, "VM ports to create at start and remove at exit (0-64): macvtaps in bridge mode on the TAP, or with --vhost-user vhost-user sockets; 0 creates none (see tapfwd vm-port)")
	fs.StringVar(&f.vhostUser, "vhost-user", "", "make the --vm-ports VM ports vhost-user sockets in this directory (made mode 0755 if missing) instead of macvtaps: TAP-I.sock, or NS:TAP-I.sock with --tap-netns, each with a MAC of its own derived from the TAP's name and I, printed at start with the QEMU and libvirt lines to attach; mode 0600 (0660 with --vm-port-owner); removed at exit unless --persist. Needs --tap. Empty: macvtaps")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "127.0.0.1:9310", `serve Prometheus metrics at http://HOST:PORT/metrics; empty disables`)
	fs.BoolVar(&f.pprof, "pprof", false, "also serve Go's profiler at /debug/pprof/ on --metrics-addr (for profiling the data path)")
	fs.DurationVar(&f.statsInterval, "stats-interval", 0, "log a one-line throughput summary per queue this often (e.g. 10s); 0 disables")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log lines as text (key=value) or json (one object per line)")
	fs.BoolVar(&f.persist, "persist", false, "make the TAP persistent: it stays, with its VM ports and their device nodes, when tapfwd exits, and a later run with the same --tap attaches to it (its queues, vnet-hdr and napi must match); remove it with tapfwd down")
	fs.StringVar(&f.portOwner, "vm-port-owner", "", "USER[:GROUP] that owns the VM ports' device nodes (or vhost-user sockets) with mode 0660, so an unprivileged QEMU can open them; empty: root, mode 0600")
	fs.IntVar(&f.readyFd, "ready-fd", -1, "write a line to this file descriptor and close it once forwarding has started (for launchers that are not systemd); -1 disables")
	fs.StringVar(&f.configFile, "config", "", "read flags from this file: one NAME = VALUE per line, NAME as the flag without dashes, # comments; flags on the command line win")
	fs.StringVar(&f.guestVLANs, "guest-vlans", "allow", "frames from the TAP side (lab, VM ports) with an 802.1Q/802.1ad tag: allow, or deny (dropped as guest_vlan)")
	fs.StringVar(&f.l2Control, "l2-control", "forward", "frames from the TAP side to the IEEE 802.1D reserved addresses 01:80:c2:00:00:00-0f (STP, PAUSE, LACP, 802.1X, LLDP): forward, or drop (as l2_control) but those --l2-control-allow lists")
	fs.StringVar(&f.l2Allow, "l2-control-allow", "", `with --l2-control drop, the reserved addresses still forwarded, by last byte in hex, e.g. "0e" for LLDP or "0e,02"`)
	fs.BoolVar(&f.hostPort, "host-port", false, "give the lab host its own port on the TAP (a macvlan in bridge mode, named after the TAP with an h) carrying --tap-addr instead of the TAP, so the host and the guests on VM ports reach each other; kept with --persist")
	fs.StringVar(&f.dhcpRange, "dhcp", "", `with --host-port, run dnsmasq on the host port handing out this range of --tap-addr's subnet to the segment, e.g. "198.18.1.100-198.18.1.150"; stopped at exit`)
}

// parseRun parses `tapfwd run`'s arguments into a checked configuration.
// It reads no system state. Usage problems (no --nic, a stray argument)
// print usage to stderr and return errUsage; a bad value returns a
// one-line error naming the flag.
func parseRun(args []string, stderr io.Writer) (*runConfig, error) {
	fs := newFlagSet("run", "run --nic IFACE [flags]", stderr)
	var f runFlags
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if f.configFile != "" {
		if err := readConfig(fs, f.configFile); err != nil {
			return nil, err
		}
	}
	if f.nic == "" {
		fmt.Fprintln(stderr, "tapfwd run: --nic is required")
		fs.Usage()
		return nil, errUsage
	}
	return f.config()
}

// config checks the flag values and builds the configuration.
func (f *runFlags) config() (*runConfig, error) {
	c := &runConfig{
		NIC: f.nic, TAPNAPICPU: f.tapNapiCPU, NICNAPICPU: f.nicNapiCPU, GRO: f.gro, Batch: f.batch,
		Promisc: f.promisc, StrictMAC: f.strictMAC, WaitNIC: f.waitNIC, User: f.user, VMPorts: f.vmPorts,
		MetricsAddr: f.metricsAddr, PProf: f.pprof, StatsEvery: f.statsInterval, PortOwner: f.portOwner, ReadyFd: f.readyFd,
	}
	if err := c.LogLevel.UnmarshalText([]byte(strings.ToUpper(f.logLevel))); err != nil {
		return nil, fmt.Errorf("--log-level: want debug, info, warn or error, got %q", f.logLevel)
	}
	switch f.logFormat {
	case "text":
	case "json":
		c.LogJSON = true
	default:
		return nil, fmt.Errorf("--log-format: want text or json, got %q", f.logFormat)
	}
	for _, check := range []func(*runConfig) error{f.sizes, f.tapConfig, f.tapNAPI, f.nicNAPI, f.poller, f.exclusions, f.workerCPUs, f.l2Policy, f.hostSide, f.vhostSide} {
		if err := check(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (f *runFlags) sizes(*runConfig) error {
	need := forward.BufferBytes(f.queues, f.batch, true, 0)
	switch {
	case f.tapMTU < 0:
		return fmt.Errorf("--tap-mtu %d: want a size in bytes, or 0 for the NIC's", f.tapMTU)
	case f.statsInterval < 0 || (f.statsInterval > 0 && f.statsInterval < time.Second):
		return fmt.Errorf("--stats-interval %v: want at least 1s, or 0 to disable", f.statsInterval)
	case f.queues < 1 || f.queues > maxQueues:
		return fmt.Errorf("--queues %d: want 1 to %d", f.queues, maxQueues)
	case f.batch < 1 || f.batch > maxBatch:
		return fmt.Errorf("--batch %d: want 1 to %d", f.batch, maxBatch)
	case f.vmPorts < 0 || f.vmPorts > maxVMPorts:
		return fmt.Errorf("--vm-ports %d: want 0 to %d", f.vmPorts, maxVMPorts)
	case need > maxBufferBytes:
		return fmt.Errorf("--queues %d --batch %d would take %.1f GiB of frame buffers (2 x batch x 64 KiB per queue): at most %d GiB; lower --batch or --queues",
			f.queues, f.batch, float64(need)/(1<<30), maxBufferBytes>>30)
	}
	return nil
}

func (f *runFlags) tapConfig(c *runConfig) error {
	var err error
	c.TAP = tap.Config{Name: f.tapName, Queues: f.queues, MTU: f.tapMTU, Netns: f.tapNetns, Persist: f.persist}
	if f.tapNetns != "" {
		if err := netns.CheckName(f.tapNetns); err != nil {
			return fmt.Errorf("--tap-netns: %w", err)
		}
	}
	if c.TAP.NAPI, err = tap.ParseWant(f.napi); err != nil {
		return fmt.Errorf("--napi: %w", err)
	}
	if c.TAP.VnetHdr, err = tap.ParseWant(f.vnet); err != nil {
		return fmt.Errorf("--vnet-hdr: %w", err)
	}
	if f.tapAddr != "" {
		if c.TAP.Addr, err = netip.ParsePrefix(f.tapAddr); err != nil {
			return fmt.Errorf("--tap-addr: %w", err)
		}
	}
	if c.TAP.MAC, err = tap.HardwareAddr(f.tapMAC); err != nil {
		return fmt.Errorf("--tap-mac: %w", err)
	}
	return nil
}

func (f *runFlags) tapNAPI(c *runConfig) error {
	if f.tapGROFlush < 0 || f.tapDefer < 0 {
		return errors.New("--tap-gro-flush-timeout and --tap-napi-defer-hard-irqs must not be negative")
	}
	c.TAP.NAPISettings = tap.NAPISettings{Threaded: f.tapThreaded, GROFlushTimeout: f.tapGROFlush, DeferHardIRQs: f.tapDefer}
	if c.TAP.NAPISettings != (tap.NAPISettings{}) && c.TAP.NAPI == tap.Off {
		return errors.New("--tap-napi-threaded, --tap-gro-flush-timeout and --tap-napi-defer-hard-irqs act on the TAP's NAPI: they need --napi auto or on")
	}
	if f.tapNapiCPU >= 0 && !f.tapThreaded {
		return errors.New("--tap-napi-cpu needs --tap-napi-threaded")
	}
	return nil
}

func (f *runFlags) nicNAPI(c *runConfig) error {
	if f.nicThreaded == "" {
		if f.nicNapiCPU >= 0 {
			return errors.New("--nic-napi-cpu needs --nic-napi-threaded")
		}
		return nil
	}
	var err error
	if c.NICThreaded, err = napi.ParseThreaded(f.nicThreaded); err != nil || c.NICThreaded == napi.ThreadedDisabled {
		return fmt.Errorf("--nic-napi-threaded: want enabled or busy-poll, got %q", f.nicThreaded)
	}
	return nil
}

func (f *runFlags) poller(c *runConfig) error {
	switch f.poll {
	case "block":
	case "busy":
		c.Busy = true
	default:
		return fmt.Errorf("--poll: want block or busy, got %q", f.poll)
	}
	return nil
}

// exclusions refuses flags that cannot work together.
func (f *runFlags) exclusions(*runConfig) error {
	switch {
	case f.vmPorts > 0 && f.strictMAC:
		return errors.New("--strict-mac drops the VM ports' frames (their MACs are not the TAP's): use one or the other")
	case f.user != "" && f.waitNIC:
		return errors.New("--wait-nic reopens packet sockets, which needs CAP_NET_RAW: it cannot be combined with --user")
	case f.user != "" && f.nicThreaded != "":
		return errors.New("--nic-napi-threaded is restored at exit, which needs CAP_NET_ADMIN: it cannot be combined with --user")
	case f.tapName != "" && f.tapName == f.nic:
		return fmt.Errorf("--tap %s names the NIC: the TAP needs a name of its own", f.tapName)
	case f.persist && f.tapName == "":
		return errors.New("--persist needs --tap NAME: a later run finds the TAP by its name")
	case f.portOwner != "" && f.vmPorts == 0:
		return errors.New("--vm-port-owner owns the nodes of --vm-ports: give --vm-ports N too")
	case f.readyFd < -1:
		return fmt.Errorf("--ready-fd %d: want a file descriptor number, or -1 for none", f.readyFd)
	}
	return nil
}

func (f *runFlags) workerCPUs(c *runConfig) error {
	switch f.cpus {
	case "":
	case "none":
		c.CPUs = []int{}
	default:
		list, err := cpulist.Parse(f.cpus)
		if err != nil {
			return fmt.Errorf("--cpus: %w", err)
		}
		c.CPUs = list
	}
	return nil
}

// l2Policy takes --guest-vlans, --l2-control and --l2-control-allow.
func (f *runFlags) l2Policy(c *runConfig) error {
	switch f.guestVLANs {
	case "allow":
	case "deny":
		c.L2.DenyVLANs = true
	default:
		return fmt.Errorf("--guest-vlans: want allow or deny, got %q", f.guestVLANs)
	}
	switch f.l2Control {
	case "forward":
		if f.l2Allow != "" {
			return errors.New("--l2-control-allow lists exceptions to --l2-control drop")
		}
	case "drop":
		c.L2.DropControl = true
	default:
		return fmt.Errorf("--l2-control: want forward or drop, got %q", f.l2Control)
	}
	for b := range strings.SplitSeq(f.l2Allow, ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(b), "0x"), 16, 8)
		if err != nil || n > 0x0f {
			return fmt.Errorf("--l2-control-allow: %q is not the last byte of a reserved address 01:80:c2:00:00:00-0f (00 to 0f)", b)
		}
		c.L2.ControlAllow |= 1 << n
	}
	return nil
}

// hostSide takes --host-port and --dhcp: the lab address goes on the host
// port instead of the TAP, and the range must lie in its subnet.
func (f *runFlags) hostSide(c *runConfig) error {
	if f.hostPort {
		c.HostPort = true
		c.HostAddr, c.TAP.Addr = c.TAP.Addr, netip.Prefix{}
	}
	if f.dhcpRange == "" {
		return nil
	}
	switch {
	case !f.hostPort:
		return errors.New("--dhcp serves the guests from the host's port on the segment: add --host-port")
	case !c.HostAddr.IsValid():
		return errors.New("--dhcp needs the host's address: give --tap-addr, in the subnet of the range")
	}
	var err error
	if c.DHCPFirst, c.DHCPLast, err = dhcp.ParseRange(f.dhcpRange); err != nil {
		return fmt.Errorf("--dhcp: %w", err)
	}
	if err := dhcp.CheckRange(c.HostAddr, c.DHCPFirst, c.DHCPLast); err != nil {
		return fmt.Errorf("--dhcp: %w (--tap-addr %s)", err, c.HostAddr)
	}
	// A name the kernel fills in ("tap%d") is checked when dnsmasq starts.
	if name := c.TAP.Name; name != "" && !strings.Contains(name, "%") {
		if err := dhcp.CheckInterface(hostport.Name(name)); err != nil {
			return fmt.Errorf("--dhcp: %w (the host port is named after --tap %s: choose another)", err, name)
		}
	}
	return nil
}

// vhostSide takes --vhost-user: the VM ports become vhost-user sockets in
// the directory, named after the TAP, so a restart finds them again.
func (f *runFlags) vhostSide(c *runConfig) error {
	if f.vhostUser == "" {
		return nil
	}
	switch {
	case f.vmPorts == 0:
		return errors.New("--vhost-user makes the --vm-ports N ports vhost-user sockets: give --vm-ports N too")
	case f.tapName == "":
		return errors.New("--vhost-user needs --tap NAME: the sockets and the guests' MACs are named after the TAP, so that a restart finds them again")
	case f.waitNIC:
		return errors.New("--wait-nic reopens the queues' packet sockets, not those of the vhost-user ports: it cannot be combined with --vhost-user")
	}
	dir, err := filepath.Abs(f.vhostUser)
	if err != nil {
		return fmt.Errorf("--vhost-user: %w", err)
	}
	c.VhostDir = dir
	return nil
}
