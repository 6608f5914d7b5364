package throughput

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/report"
)

// Configuration names. Each is a row of the report.
const (
	NAPIOn       = "napi-on"
	NAPIOff      = "napi-off"
	VnetOff      = "vnet-off"
	NAPIThreaded = "napi-threaded"
	NAPIGRO      = "napi-gro-flush"
	Queues2      = "queues-2"
	XDPBlock     = "xdp-block"
	XDPKernel    = "xdp-kernel"
	XDPKernelCPU = "xdp-kernel-cpu"
	XDPThreaded  = "xdp-threaded"
	PacketBusy   = "packet-busy"
	Naive        = "naive"
	Bridge       = report.Bridge
	Direct       = report.Direct
	OVS          = report.OVS
)

// Default is tapfwd as it ships: no flag beyond the bed's devices, every
// setting at tapfwd's default. The guard (--perf) measures it, so that a
// changed default shows there.
const Default = "tapfwd"

// Lever configurations: Default with one setting changed, each a lever
// to measure against Default and the bridge. They are not in Configs
// (--full runs those); a binary without a lever's flag skips it
// (matrix.CheckFlags).
const (
	TAPIOURing   = "tap-io-uring"   // TAP reads and writes batched through io_uring
	TAPIOSyscall = "tap-io-syscall" // a read or write system call per frame
	GROWindow    = "gro-window"     // userspace GRO waits a little for more frames
	CPUsNone     = "cpus-none"      // the worker left to the scheduler
	CPUsSecond   = "cpus-second"    // the worker on the second CPU
	FixedCPU     = "fixed-cpu"      // the worker stays on the first CPU
	Split        = "split"          // a worker per direction: the NIC's reader on the first CPU, the TAP's on the second
	SplitSwapped = "split-swapped"  // a worker per direction: the NIC's reader on the second CPU, the TAP's on the first
	Spin         = "spin"           // the worker spins a little before it sleeps
	NICGRO       = "nic-gro"        // GRO on the NIC while tapfwd runs
	BridgeNICGRO = "bridge-nic-gro" // the bridge with GRO on its port to the wire: NICGRO's reference
)

// nicGRO turns GRO on on the bed's NIC, the bridge's port to the wire in
// BridgeNICGRO, as tapfwd --nic-gro on does on its NIC.
var nicGRO = [][]string{{"ethtool", "-K", report.NICToken, "gro", "on"}}

// Before is Default run by another tapfwd binary (--before): a build
// from before a change, interleaved with the change in one run.
const Before = "before"

// WithBefore is cs with Before, running bin, ahead of the baselines.
func WithBefore(cs []report.Config, bin string) []report.Config {
	c := report.Tapfwd(Before, "tapfwd as it ships, built before the change: "+bin+" (--before)", forwarder.Options{})
	c.Binary = bin
	i := slices.IndexFunc(cs, func(c report.Config) bool { return c.Kind != report.KindTapfwd && c.Kind != report.KindNaive })
	if i < 0 {
		i = len(cs)
	}
	return slices.Insert(slices.Clone(cs), i, c)
}

// Levers are the settings of the lever configurations.
type Levers struct {
	// GROWindow is GROWindow's --gro-window.
	GROWindow time.Duration
	// Spin is Spin's --spin.
	Spin time.Duration
	// FirstCPU and SecondCPU are the first two CPUs this process may
	// use, where the pinned placement puts the iperf3 client and server:
	// SecondCPU is CPUsSecond's --cpus, and the split configurations take
	// both. SecondCPU -1 (one CPU) leaves those out.
	FirstCPU, SecondCPU int
}

// DefaultLevers are the lever settings used unless the caller picks
// others.
func DefaultLevers() Levers {
	l := Levers{GROWindow: 50 * time.Microsecond, Spin: 50 * time.Microsecond, SecondCPU: -1}
	if c := FirstCPUs(2); len(c) == 2 {
		l.FirstCPU, l.SecondCPU = c[0], c[1]
	}
	return l
}

// LeverConfigs are Default and the lever configurations under l, in
// report order.
func LeverConfigs(l Levers) []report.Config {
	cs := []report.Config{
		report.Tapfwd(Default, "tapfwd as it ships: every setting at its default", forwarder.Options{}),
		report.Tapfwd(TAPIOURing, "tapfwd, TAP I/O batched through io_uring (--tap-io uring)", forwarder.Options{TAPIO: "uring"}),
		report.Tapfwd(TAPIOSyscall, "tapfwd, a read or write system call per TAP frame (--tap-io syscall)", forwarder.Options{TAPIO: "syscall"}),
		report.Tapfwd(GROWindow, fmt.Sprintf("tapfwd, userspace GRO waits up to %s for more frames of a batch (--gro-window)", forwarder.Micros(l.GROWindow)),
			forwarder.Options{GROWindow: l.GROWindow}),
		report.Tapfwd(CPUsNone, "tapfwd, its worker not pinned: placed by the scheduler (--cpus none)", forwarder.Options{CPUs: "none"}),
		report.Tapfwd(Spin, fmt.Sprintf("tapfwd, its worker spinning up to %s before it sleeps, adapted to the load (--spin)", forwarder.Micros(l.Spin)),
			forwarder.Options{Spin: l.Spin}),
		report.Tapfwd(FixedCPU, "tapfwd, its worker staying on the first CPU instead of following its load (--follow-load=false)", forwarder.Options{FollowLoad: "false"}),
	}
	if l.SecondCPU >= 0 {
		cs = append(cs, report.Tapfwd(CPUsSecond, fmt.Sprintf("tapfwd, its worker on CPU %d, beside the pinned iperf3 server (--cpus %d)", l.SecondCPU, l.SecondCPU),
			forwarder.Options{CPUs: strconv.Itoa(l.SecondCPU)}))
		a, b := strconv.Itoa(l.FirstCPU), strconv.Itoa(l.SecondCPU)
		cs = append(cs,
			report.Tapfwd(Split, fmt.Sprintf("tapfwd, a worker per direction: the NIC's reader on CPU %s beside the iperf3 client, the TAP's on CPU %s beside the server (--split-directions --cpus %s,%s)", a, b, a, b),
				forwarder.Options{Split: true, CPUs: a + "," + b}),
			report.Tapfwd(SplitSwapped, fmt.Sprintf("tapfwd, a worker per direction: the NIC's reader on CPU %s beside the iperf3 server, the TAP's on CPU %s beside the client (--split-directions --cpus %s,%s)", b, a, b, a),
				forwarder.Options{Split: true, CPUs: b + "," + a}))
	}
	return append(cs,
		report.Tapfwd(NICGRO, "tapfwd, GRO on the NIC while it runs (--nic-gro on): the veth merges the segments of a sender without TSO (--wire-mtu's) before tapfwd reads them",
			forwarder.Options{NICGRO: forwarder.On}),
		report.Config{Name: BridgeNICGRO, Kind: report.KindBridge, Setup: nicGRO,
			Description: "Linux bridge in the fwd namespace, GRO on its port to the wire: " + NICGRO + "'s reference"})
}

// KnownConfigs are every configuration a run may select, in report
// order: Configs' tapfwd variants, LeverConfigs, then the baselines.
func KnownConfigs(n TAPNAPI, l Levers) []report.Config {
	cs := Configs(n)
	i := slices.IndexFunc(cs, func(c report.Config) bool { return c.Kind != report.KindTapfwd })
	return slices.Concat(cs[:i], LeverConfigs(l), cs[i:])
}

// TAPNAPI are the TAP NAPI settings of the NAPIGRO configuration.
type TAPNAPI struct {
	// GROFlushTimeout is the TAP's gro_flush_timeout: 200 us starves TCP;
	// tens of microseconds let written frames merge.
	GROFlushTimeout time.Duration
	// DeferHardIRQs is the TAP's napi_defer_hard_irqs.
	DeferHardIRQs int
}

// DefaultTAPNAPI is the NAPIGRO setting used unless the caller picks one.
var DefaultTAPNAPI = TAPNAPI{GROFlushTimeout: 20 * time.Microsecond, DeferHardIRQs: 1}

// Configs returns every configuration the bench knows, in report order:
// tapfwd variants first, then the baselines.
func Configs(n TAPNAPI) []report.Config {
	on, off, auto := forwarder.On, forwarder.Off, forwarder.Auto
	// XDPKernelCPU's poller takes the last CPU, away from the worker on
	// the first.
	pollerCPU := max(runtime.NumCPU()-1, 0)
	return []report.Config{
		report.Tapfwd(NAPIOff, "tapfwd, IFF_NAPI off, vnet headers on",
			forwarder.Options{NAPI: off, VnetHdr: on}),
		report.Tapfwd(NAPIOn, "tapfwd, IFF_NAPI on, vnet headers on",
			forwarder.Options{NAPI: on, VnetHdr: on}),
		report.Tapfwd(NAPIThreaded, "tapfwd, IFF_NAPI on with the TAP's NAPI threaded (sysfs threaded=1)",
			forwarder.Options{NAPI: on, VnetHdr: on, TAPNAPIThreaded: true}),
		report.Tapfwd(NAPIGRO, fmt.Sprintf("tapfwd, IFF_NAPI on, TAP gro_flush_timeout %s, napi_defer_hard_irqs %d", forwarder.Micros(n.GROFlushTimeout), n.DeferHardIRQs),
			forwarder.Options{NAPI: on, VnetHdr: on, TAPGROFlushTimeout: n.GROFlushTimeout, TAPNAPIDeferHardIRQs: n.DeferHardIRQs}),
		report.Tapfwd(VnetOff, "tapfwd, vnet headers off (GSO segmented and checksums completed in userspace), IFF_NAPI when offered",
			forwarder.Options{NAPI: auto, VnetHdr: off}),
		report.Tapfwd(Queues2, "tapfwd, 2 queues (two workers, fanout), IFF_NAPI when offered, vnet headers on",
			forwarder.Options{Queues: 2, NAPI: auto, VnetHdr: auto}),
		report.Tapfwd(PacketBusy, "tapfwd, packet sockets, --poll busy (workers spin), IFF_NAPI when offered, vnet headers on",
			forwarder.Options{NAPI: auto, VnetHdr: auto, Poll: forwarder.Busy}),
		report.Tapfwd(XDPBlock, "tapfwd with AF_XDP on the NIC (--nic-backend xdp), --poll block",
			forwarder.Options{NAPI: auto, VnetHdr: auto, NICBackend: forwarder.XDP, Poll: forwarder.Block}),
		report.Tapfwd(XDPKernel, "tapfwd with AF_XDP, --poll kernel (io_uring busy-polls the veth's NAPI)",
			forwarder.Options{NAPI: auto, VnetHdr: auto, NICBackend: forwarder.XDP, Poll: forwarder.Kernel}),
		report.Tapfwd(XDPKernelCPU, fmt.Sprintf("tapfwd with AF_XDP, --poll kernel with the busy poll on a thread pinned to CPU %d (--busy-poll-cpu), the worker sleeping in ppoll", pollerCPU),
			forwarder.Options{NAPI: auto, VnetHdr: auto, NICBackend: forwarder.XDP, Poll: forwarder.Kernel, BusyPollCPU: forwarder.CPU(pollerCPU)}),
		report.Tapfwd(XDPThreaded, "tapfwd with AF_XDP, --poll threaded (the veth's NAPI in a kthread)",
			forwarder.Options{NAPI: auto, VnetHdr: auto, NICBackend: forwarder.XDP, Poll: forwarder.Threaded}),
		{Name: Naive, Kind: report.KindNaive,
			Description: "naive forwarder: songgao/water TAP (no vnet header) + one AF_PACKET socket with PACKET_VNET_HDR, one syscall per frame, vnethdr segmentation"},
		{Name: OVS, Kind: report.KindOVS,
			Description: "Open vSwitch's userspace datapath (datapath_type=netdev, userspace TSO on; the NIC a system port, the lab's TAP a tap port), ovs-vswitchd on tapfwd's worker CPU: the userspace peer"},
		{Name: Bridge, Kind: report.KindBridge, Description: "Linux bridge in the fwd namespace (in-kernel reference)"},
		{Name: Direct, Kind: report.KindDirect, Description: "one veth pair from wire to lab (ceiling)"},
	}
}

// Direction names.
const (
	WireToLab = "wire->lab"
	LabToWire = "lab->wire"
)

// Units of a workload's figure.
const (
	Gbps = "Gbit/s" // TCP: what the receiver got
	Kpps = "kpps"   // UDP: datagrams delivered per second, in thousands
)

// Workload is one iperf3 test.
type Workload struct {
	Name      string `json:"name"`
	Proto     string `json:"proto"`     // "tcp" or "udp"
	Len       int    `json:"len"`       // iperf3 -l: write size (TCP) or datagram payload (UDP), bytes
	Streams   int    `json:"streams"`   // iperf3 -P
	Direction string `json:"direction"` // WireToLab or LabToWire (iperf3 -R)
	Unit      string `json:"unit"`      // Gbps or Kpps
	// WireMTU turns TSO and GSO off on the wire's veth for this workload,
	// so the forwarder receives MTU-sized frames instead of GSO
	// super-frames (what a real NIC without LRO/GRO hands over).
	WireMTU bool `json:"wire_mtu,omitempty"`
	// Placement is where its iperf3 processes run (Place); nil in reports
	// from before it, where Settings.IperfPin applies to every workload.
	Placement *Placement `json:"placement,omitempty"`
	// Targets, when set, are what tapfwd should reach against the bridge
	// on it (PerfWorkloads).
	Targets *Targets `json:"targets,omitempty"`
}

// Targets are what a forwarder's figures should reach against the
// bridge's on a workload: at least Ratio of its throughput and, when Cost
// is set, at most Cost times its whole-machine CPU per unit delivered.
type Targets struct {
	Ratio float64 `json:"min_ratio_to_bridge"`
	Cost  float64 `json:"max_cost_ratio_to_bridge,omitempty"`
}

// PerfWorkloads are the guard's rows (--perf): TCP with iperf3's default
// writes both ways, with MTU-sized frames from the wire and with four
// streams, and UDP 64 B delivered from the wire, each with its targets
// against the bridge: the TCP rows at most 1.05x the bridge's CPU per
// gigabit.
func PerfWorkloads() []Workload {
	ws := Workloads([]int{0}, []int{1}, DefaultDirs, false)
	ws = append(ws, MTUWorkload())
	ws = append(ws, Workloads([]int{0}, []int{4}, []string{WireToLab}, false)...)
	ws = append(ws, Workloads(nil, nil, []string{WireToLab}, true)...)
	for i := range ws {
		t := &Targets{Ratio: 0.95, Cost: 1.05}
		switch {
		case ws[i].Proto == "udp":
			t = &Targets{Ratio: 0.9}
		case ws[i].WireMTU:
			t.Ratio = 1
		case ws[i].Streams > 1:
			t.Ratio = 0.9
		}
		ws[i].Targets = t
	}
	return ws
}

// MTUWorkload is TCP wire->lab, one stream, iperf3's default write size,
// with TSO and GSO off on the wire's veth: every frame arrives MTU-sized,
// so forwarding it costs a TAP write per segment unless tapfwd coalesces
// (userspace GRO).
func MTUWorkload() Workload {
	return Workload{Name: "tcp-mtu-P1-w2l", Proto: "tcp", Streams: 1, Direction: WireToLab, Unit: Gbps, WireMTU: true}
}

// UDPLen is the datagram payload of the small-packet workload.
const UDPLen = 64

// Workloads returns TCP workloads for every direction x stream count x
// size, then, when udp is set, a UDP small-packet workload (UDPLen bytes,
// one stream, unlimited rate) per direction.
func Workloads(sizes, streams []int, dirs []string, udp bool) []Workload {
	var w []Workload
	for _, d := range dirs {
		for _, p := range streams {
			for _, l := range sizes {
				w = append(w, Workload{Name: fmt.Sprintf("tcp-%s-P%d-%s", SizeName(l), p, dirShort(d)),
					Proto: "tcp", Len: l, Streams: p, Direction: d, Unit: Gbps})
			}
		}
	}
	if udp {
		for _, d := range dirs {
			w = append(w, Workload{Name: fmt.Sprintf("udp-%s-%s", SizeName(UDPLen), dirShort(d)),
				Proto: "udp", Len: UDPLen, Streams: 1, Direction: d, Unit: Kpps})
		}
	}
	return w
}

func dirShort(d string) string {
	if d == LabToWire {
		return "l2w"
	}
	return "w2l"
}

// SizeName writes a message size the way the reference table does: 64B,
// 4KB; 0 (iperf3's default) is "default".
func SizeName(n int) string {
	if n == 0 {
		return "default"
	}
	if n >= 1024 && n%1024 == 0 {
		return strconv.Itoa(n/1024) + "KB"
	}
	return strconv.Itoa(n) + "B"
}

// DefaultSizes, DefaultStreams and DefaultDirs make the default matrix.
var (
	DefaultSizes   = []int{64, 128, 4096}
	DefaultStreams = []int{1, 4}
	DefaultDirs    = []string{WireToLab, LabToWire}
)
