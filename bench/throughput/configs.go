package throughput

import (
	"fmt"
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
	XDPThreaded  = "xdp-threaded"
	PacketBusy   = "packet-busy"
	Naive        = "naive"
	Bridge       = report.Bridge
	Direct       = report.Direct
)

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
		report.Tapfwd(XDPThreaded, "tapfwd with AF_XDP, --poll threaded (the veth's NAPI in a kthread)",
			forwarder.Options{NAPI: auto, VnetHdr: auto, NICBackend: forwarder.XDP, Poll: forwarder.Threaded}),
		{Name: Naive, Kind: report.KindNaive,
			Description: "naive forwarder: songgao/water TAP (no vnet header) + one AF_PACKET socket with PACKET_VNET_HDR, one syscall per frame, vnethdr segmentation"},
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
