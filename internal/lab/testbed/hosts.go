package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// HostsMode selects what joins a host's VXLAN device to its lab.
type HostsMode int

const (
	// HostsForwarder leaves each lab empty: a forwarder on each host takes
	// the host's VXLAN device as its NIC, creates a TAP named Host.LabIf,
	// moves it into the lab and gives it Host.LabAddr (StartForwarders).
	HostsForwarder HostsMode = iota
	// HostsBridge is the in-kernel reference: on each host a bridge br0
	// enslaves the VXLAN device and l1, and the veth l1 (host) <-> l0 (lab)
	// carries Host.LabAddr.
	HostsBridge
)

func (m HostsMode) String() string { return enumString("HostsMode", int(m), "forwarder", "bridge") }

// Peering says how a host's VXLAN device finds the other host.
type Peering int

const (
	// PeerFDB creates the VXLAN device without a remote and appends the
	// other host's underlay address to its all-zeros forwarding entry
	// (bridge fdb append 00:00:00:00:00:00 dev vx0 dst PEER): head-end
	// replication, the form that grows to more hosts, one entry each.
	PeerFDB Peering = iota
	// PeerRemote gives the VXLAN device the other host as its one unicast
	// remote (ip link add vx0 type vxlan ... remote PEER).
	PeerRemote
)

func (p Peering) String() string { return enumString("Peering", int(p), "fdb", "remote") }

// HostsConfig describes a two-host bed. The zero value is a HostsForwarder
// bed with forwarding-database peers, VNI 42, a random subnet and a 1500-byte
// underlay.
type HostsConfig struct {
	Mode    HostsMode
	Peering Peering
	// Subnet is X in the lab subnet 198.18.X.0/24 (both labs) and the
	// underlay subnet 198.19.X.0/24; 0 picks one at random in 1..254.
	Subnet uint8
	// MTU of the underlay veth; 0 means 1500. The VXLAN devices, and the
	// labs, get MTU - VXLANOverhead.
	MTU int
	// VNI is the VXLAN network identifier, 1..16777215; 0 means 42.
	VNI int
}

// VXLANOverhead is what VXLAN over an IPv4 underlay adds to an Ethernet
// frame: outer IPv4 (20), UDP (8) and VXLAN (8) headers and the inner
// Ethernet header (14) the device's MTU does not count
// (drivers/net/vxlan/vxlan_core.c: VXLAN_HEADROOM).
const VXLANOverhead = 50

// VXLANPort is the IANA VXLAN port (RFC 7348) every bed's devices use.
const VXLANPort = 4789

// Host is one of the two hosts of a Hosts bed. Its fields are read-only.
type Host struct {
	// NS is the host's namespace ("tfw-a1b2c3-host1"), holding the
	// underlay veth, the VXLAN device and the forwarder or bridge; LabNS
	// its lab ("tfw-a1b2c3-lab1").
	NS, LabNS string
	// Underlay is the veth toward the other host ("u0"), with UnderlayAddr
	// (198.19.X.1/24 or .2).
	Underlay     string
	UnderlayAddr netip.Prefix
	// VXLAN is the host's VXLAN device ("vx0"), the forwarder's NIC.
	VXLAN string
	// LabIf is the interface in LabNS: "l0" for HostsBridge; for
	// HostsForwarder the unique name (at most 15 bytes) the forwarder
	// gives its TAP, e.g. "tfwtap1-a1b2c3".
	LabIf string
	// LabAddr is 198.18.X.1/24 on the first host's lab, .2 on the second's.
	LabAddr netip.Prefix
}

// Hosts is a built two-host bed: two host namespaces joined by an underlay
// veth, each with a VXLAN device (one VNI, port 4789) that reaches the
// other, and a lab namespace per host; both labs share one subnet, so the
// two labs are one L2 segment across the hosts. Its fields are read-only.
type Hosts struct {
	Mode    HostsMode
	Peering Peering
	// ID is the random suffix shared by every name the bed makes.
	ID   string
	Host [2]Host
	VNI  int
	// UnderlayMTU is the underlay veth's MTU; MTU the VXLAN devices' and
	// the labs' (UnderlayMTU - VXLANOverhead).
	UnderlayMTU, MTU int

	run        *Bed   // runs commands; its Close is this bed's
	bridgePath string // iproute2's bridge command (PeerFDB)

	close func() error // removeNamespaces once
}

// NewHosts builds a two-host bed. On any failure it removes what it made.
func NewHosts(ctx context.Context, cfg HostsConfig) (*Hosts, error) {
	if cfg.Mode < HostsForwarder || cfg.Mode > HostsBridge {
		return nil, fmt.Errorf("testbed: unknown hosts mode %d", int(cfg.Mode))
	}
	if cfg.Peering < PeerFDB || cfg.Peering > PeerRemote {
		return nil, fmt.Errorf("testbed: unknown peering %d", int(cfg.Peering))
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 68+VXLANOverhead || cfg.MTU > 65535 {
		return nil, fmt.Errorf("testbed: underlay MTU %d out of range %d..65535", cfg.MTU, 68+VXLANOverhead)
	}
	if cfg.VNI == 0 {
		cfg.VNI = 42
	}
	if cfg.VNI < 1 || cfg.VNI > 1<<24-1 {
		return nil, fmt.Errorf("testbed: VNI %d out of range 1..16777215", cfg.VNI)
	}
	ip, id, subnet, err := prepare(cfg.Subnet)
	if err != nil {
		return nil, err
	}
	var bridge string
	if cfg.Peering == PeerFDB {
		if bridge, err = bridgeCommand(ip); err != nil {
			return nil, err
		}
	}
	h := newHosts(cfg, id, subnet, ip)
	h.bridgePath = bridge
	if err := closeOnError(h.build(ctx), h.Close); err != nil {
		return nil, err
	}
	return h, nil
}

func newHosts(cfg HostsConfig, id string, subnet uint8, ip string) *Hosts {
	h := &Hosts{Mode: cfg.Mode, Peering: cfg.Peering, ID: id, VNI: cfg.VNI,
		UnderlayMTU: cfg.MTU, MTU: cfg.MTU - VXLANOverhead}
	for i := range h.Host {
		n := strconv.Itoa(i + 1)
		host := &h.Host[i]
		host.NS = nsPrefix + id + "-host" + n
		host.LabNS = nsPrefix + id + "-lab" + n
		host.Underlay, host.VXLAN, host.LabIf = "u0", "vx0", "l0"
		if cfg.Mode == HostsForwarder {
			host.LabIf = "tfwtap" + n + "-" + id
		}
		host.UnderlayAddr = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, subnet, byte(i + 1)}), 24)
		host.LabAddr = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, subnet, byte(i + 1)}), 24)
	}
	h.run = &Bed{ipPath: ip, hosts: h}
	h.close = sync.OnceValue(func() error { return removeNamespaces(ip, h.namespaces()...) })
	return h
}

// namespaces are the bed's four namespaces, hosts first.
func (h *Hosts) namespaces() []string {
	return []string{h.Host[0].NS, h.Host[1].NS, h.Host[0].LabNS, h.Host[1].LabNS}
}

func (h *Hosts) build(ctx context.Context) error {
	a, b := &h.Host[0], &h.Host[1]
	mtu := strconv.Itoa(h.UnderlayMTU)
	steps := append(nsSteps(h.namespaces()...),
		[]string{"-n", a.NS, "link", "add", a.Underlay, "mtu", mtu, "type", "veth", "peer", "name", b.Underlay, "mtu", mtu, "netns", b.NS})
	for i := range h.Host {
		steps = append(steps, h.hostSteps(i)...)
	}
	for _, s := range steps {
		if err := h.ip(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// hostSteps are the ip (and bridge) commands that set up host i once the
// underlay veth exists: its address, the VXLAN device and its peer, and
// for HostsBridge the bridge and the veth into the lab.
func (h *Hosts) hostSteps(i int) [][]string {
	me, peer := &h.Host[i], &h.Host[1-i]
	ns, mtu := me.NS, strconv.Itoa(h.MTU)
	vx := []string{"-n", ns, "link", "add", me.VXLAN, "mtu", mtu, "type", "vxlan", "id", strconv.Itoa(h.VNI),
		"dstport", strconv.Itoa(VXLANPort), "local", me.UnderlayAddr.Addr().String(), "dev", me.Underlay}
	if h.Peering == PeerRemote {
		vx = append(vx, "remote", peer.UnderlayAddr.Addr().String())
	}
	steps := [][]string{
		{"-n", ns, "addr", "add", me.UnderlayAddr.String(), "dev", me.Underlay},
		{"-n", ns, "link", "set", "dev", me.Underlay, "up"},
		vx,
	}
	if h.Peering == PeerFDB {
		steps = append(steps, []string{bridgeCmd, "-n", ns, "fdb", "append", "00:00:00:00:00:00", "dev", me.VXLAN,
			"dst", peer.UnderlayAddr.Addr().String()})
	}
	if h.Mode == HostsBridge {
		steps = append(steps,
			[]string{"-n", ns, "link", "add", "l1", "mtu", mtu, "type", "veth", "peer", "name", me.LabIf, "mtu", mtu, "netns", me.LabNS},
			[]string{"-n", ns, "link", "add", "br0", "mtu", mtu, "type", "bridge"},
			[]string{"-n", ns, "link", "set", "dev", me.VXLAN, "master", "br0"},
			[]string{"-n", ns, "link", "set", "dev", "l1", "master", "br0"},
			[]string{"-n", me.LabNS, "addr", "add", me.LabAddr.String(), "dev", me.LabIf},
			[]string{"-n", ns, "link", "set", "dev", "br0", "up"},
			[]string{"-n", ns, "link", "set", "dev", "l1", "up"},
			[]string{"-n", me.LabNS, "link", "set", "dev", me.LabIf, "up"},
		)
	}
	return append(steps, []string{"-n", ns, "link", "set", "dev", me.VXLAN, "up"})
}

// bridgeCmd marks a step for iproute2's bridge command instead of ip.
const bridgeCmd = "\x00bridge"

// hostsStepHook, when set (by this package's tests), runs before every
// build step and fails the build when it returns an error.
var hostsStepHook func(args []string) error

// ip runs one build step: ip with args, or iproute2's bridge command
// when args[0] is bridgeCmd.
func (h *Hosts) ip(ctx context.Context, args ...string) error {
	if hostsStepHook != nil {
		if err := hostsStepHook(args); err != nil {
			return err
		}
	}
	if len(args) > 0 && args[0] == bridgeCmd {
		return runTool(ctx, h.bridgePath, args[1:]...)
	}
	return runTool(ctx, h.run.ipPath, args...)
}

// Close kills every process still running in the bed's namespaces and
// deletes them, which deletes every device in them. It is idempotent, and
// what a failed NewHosts calls.
func (h *Hosts) Close() error {
	return h.close()
}

// View is the bed as the single-host Bed type describes one, seen from
// lab `from` toward lab `to` (0 or 1, different): WireNS, WireIf and
// WireAddr are lab from's; FwdNS is host to's namespace with its VXLAN
// device as NIC; LabNS, LabIf and LabAddr are lab to's. So the helpers
// written for a Bed work across the two hosts: iperf.Run runs its client
// in lab from and its server in lab to, WaitLabReachable pings lab to from
// lab from, and a forwarder's metrics are host to's. The view's mode is
// Forwarder or Bridge, its MTU the VXLAN MTU. Closing it closes the whole
// two-host bed; its StartForwarder starts only host to's forwarder (see
// StartForwarders).
func (h *Hosts) View(from, to int) *Bed {
	if from == to || from < 0 || from > 1 || to < 0 || to > 1 {
		panic(fmt.Sprintf("testbed: Hosts.View(%d, %d): want 0 and 1 in some order", from, to))
	}
	src, dst := &h.Host[from], &h.Host[to]
	mode := Forwarder
	if h.Mode == HostsBridge {
		mode = Bridge
	}
	return &Bed{
		Mode: mode, ID: h.ID,
		WireNS: src.LabNS, FwdNS: dst.NS, LabNS: dst.LabNS,
		WireIf: src.LabIf, NIC: dst.VXLAN, LabIf: dst.LabIf,
		WireAddr: src.LabAddr, LabAddr: dst.LabAddr,
		MTU:    h.MTU,
		ipPath: h.run.ipPath, hosts: h,
	}
}

// ForwarderArgs are the flags by which host i's forwarder takes its
// devices: the VXLAN device as NIC, the TAP's name, its lab and lab
// address (View(1-i, i).ForwarderArgs()).
func (h *Hosts) ForwarderArgs(i int) []string {
	return h.View(1-i, i).ForwarderArgs()
}

// StartForwarders runs exe with args(i) in host i's namespace, for both
// hosts, and waits until lab 2 answers ping from lab 1 (through both).
// args(i) usually holds ForwarderArgs(i); name says in errors what was
// started ("tapfwd"). As with StartForwarder the processes are not tied to
// ctx, which bounds only the wait: Stop ends each with SIGTERM, and Close
// kills what still runs. On error neither is left running.
func (h *Hosts) StartForwarders(ctx context.Context, name, exe string, args func(host int) []string) ([2]*Process, error) {
	var ps [2]*Process
	if h.Mode != HostsForwarder {
		return ps, fmt.Errorf("testbed: hosts mode %v has no forwarder", h.Mode)
	}
	stop := func() {
		for _, p := range ps {
			if p != nil {
				p.Stop()
			}
		}
	}
	for i := range ps {
		p, err := h.run.Start(h.Host[i].NS, fmt.Sprintf("%s on host %d", name, i+1), exe, args(i)...)
		if err != nil {
			stop()
			return ps, err
		}
		ps[i] = p
	}
	if err := h.WaitReachable(ctx, 10*time.Second); err != nil {
		stop()
		return ps, fmt.Errorf("testbed: labs not reachable through %s: %w; host 1's said: %s; host 2's said: %s",
			name, err, orNothing(ps[0].Tail(3)), orNothing(ps[1].Tail(3)))
	}
	return ps, nil
}

// StartTapfwd runs exe, a tapfwd binary, as `tapfwd run` on both hosts,
// each with its devices (ForwarderArgs(i)) and then extra(i), and waits
// until the labs reach each other (StartForwarders).
func (h *Hosts) StartTapfwd(ctx context.Context, exe string, extra func(host int) []string) ([2]*Process, error) {
	return h.StartForwarders(ctx, "tapfwd", exe, func(i int) []string {
		return h.View(1-i, i).TapfwdArgs(extra(i)...)
	})
}

func orNothing(s string) string {
	if s == "" {
		return "(nothing)"
	}
	return s
}

// WaitReachable pings lab 2's address from lab 1 until it answers, timeout
// passes or ctx ends (View(0, 1).WaitLabReachable).
func (h *Hosts) WaitReachable(ctx context.Context, timeout time.Duration) error {
	return h.View(0, 1).WaitLabReachable(ctx, timeout)
}

// Command returns a command that runs name in namespace ns (any of the
// bed's, or another); Close kills it if it is still running.
func (h *Hosts) Command(ctx context.Context, ns, name string, arg ...string) *exec.Cmd {
	return h.run.Command(ctx, ns, name, arg...)
}

// Run runs name in namespace ns and returns its combined output; the error
// includes the output.
func (h *Hosts) Run(ctx context.Context, ns, name string, arg ...string) (string, error) {
	return h.run.Run(ctx, ns, name, arg...)
}

// Do runs fn on a locked OS thread that has joined namespace ns (Bed.Do).
func (h *Hosts) Do(ns string, fn func() error) error {
	return h.run.Do(ns, fn)
}
