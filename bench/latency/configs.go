package latency

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/napi"
)

// Configuration names.
const (
	Block        = "tapfwd-block"
	Busy         = "tapfwd-busy"
	TAPThreaded  = "tap-napi-threaded"
	NICGRO       = "nic-gro"
	NICThreaded  = "nic-napi-threaded"
	NICBusyPoll  = "nic-napi-busy-poll"
	XDPBlock     = "xdp-block"
	XDPKernel    = "xdp-kernel"
	XDPKernelCPU = "xdp-kernel-cpu"
	XDPThreaded  = "xdp-threaded"
	Bridge       = report.Bridge
	Direct       = report.Direct
)

// nicUDPGRO makes UDP from the wire go through the NIC veth's NAPI: a veth
// has NAPI instances only with GRO on, and hands UDP from a TSO-capable
// peer to them only with rx-udp-gro-forwarding (or rx-gro-list) on;
// otherwise it takes the per-CPU backlog and a threaded NIC NAPI sees no
// work (drivers/net/veth.c: veth_skb_is_eligible_for_gro).
var nicUDPGRO = [][]string{{"ethtool", "-K", report.NICToken, "gro", "on", "rx-udp-gro-forwarding", "on"}}

// NAPICPU is the CPU the NIC-NAPI configurations pin the NAPI kthread to:
// the last one, away from the forwarding worker (queue 0 on the first
// allowed CPU).
func NAPICPU() int { return max(runtime.NumCPU()-1, 0) }

// Configs returns every configuration the latency bench knows, in report
// order.
func Configs() []report.Config {
	cpu := NAPICPU()
	auto, on, block := forwarder.Auto, forwarder.On, forwarder.Block
	withSetup := func(c report.Config) report.Config { c.Setup = nicUDPGRO; return c }
	return []report.Config{
		report.Tapfwd(Block, "tapfwd, workers sleep in ppoll until a fd is ready (--poll block, the default); IFF_NAPI when offered",
			forwarder.Options{NAPI: auto, Poll: block}),
		report.Tapfwd(Busy, "tapfwd, workers spin on non-blocking reads (--poll busy): one whole CPU per queue",
			forwarder.Options{NAPI: auto, Poll: forwarder.Busy}),
		report.Tapfwd(TAPThreaded, "tapfwd --poll block, IFF_NAPI on with the TAP's NAPI poll in a kthread (--tap-napi-threaded)",
			forwarder.Options{NAPI: on, Poll: block, TAPNAPIThreaded: true}),
		withSetup(report.Tapfwd(NICGRO, "tapfwd --poll block with GRO and rx-udp-gro-forwarding on the NIC veth, so requests go through its NAPI (softirq): the control for the two below",
			forwarder.Options{NAPI: auto, Poll: block})),
		withSetup(report.Tapfwd(NICThreaded, fmt.Sprintf("as %s, the NIC veth's NAPI threaded (--nic-napi-threaded enabled), its kthread pinned to CPU %d", NICGRO, cpu),
			forwarder.Options{NAPI: auto, Poll: block, NICNAPIThreaded: napi.ThreadedEnabled, NICNAPICPU: forwarder.CPU(cpu)})),
		withSetup(report.Tapfwd(NICBusyPoll, fmt.Sprintf("as %s, the NIC veth's NAPI kthread busy-polling (--nic-napi-threaded busy-poll), pinned to CPU %d", NICGRO, cpu),
			forwarder.Options{NAPI: auto, Poll: block, NICNAPIThreaded: napi.ThreadedBusyPoll, NICNAPICPU: forwarder.CPU(cpu)})),
		report.Tapfwd(XDPBlock, "tapfwd with AF_XDP on the NIC (--nic-backend xdp, native XDP on the veth), --poll block",
			forwarder.Options{NAPI: auto, Poll: block, NICBackend: forwarder.XDP}),
		report.Tapfwd(XDPKernel, "tapfwd with AF_XDP, --poll kernel: the worker waits in io_uring, which busy-polls the veth's NAPI by its id (the XSK's own NAPI id is 0 on a veth)",
			forwarder.Options{NAPI: auto, Poll: forwarder.Kernel, NICBackend: forwarder.XDP}),
		report.Tapfwd(XDPKernelCPU, fmt.Sprintf("as %s, the busy poll on a thread of its own pinned to CPU %d (--busy-poll-cpu), the worker sleeping in ppoll", XDPKernel, cpu),
			forwarder.Options{NAPI: auto, Poll: forwarder.Kernel, NICBackend: forwarder.XDP, BusyPollCPU: forwarder.CPU(cpu)}),
		report.Tapfwd(XDPThreaded, fmt.Sprintf("tapfwd with AF_XDP, --poll block, the veth's NAPI threaded (--nic-napi-threaded enabled), its kthread pinned to CPU %d", cpu),
			forwarder.Options{NAPI: auto, Poll: block, NICBackend: forwarder.XDP, NICNAPIThreaded: napi.ThreadedEnabled, NICNAPICPU: forwarder.CPU(cpu)}),
		{Name: Bridge, Kind: report.KindBridge, Description: "Linux bridge in the fwd namespace (in-kernel reference)"},
		{Name: Direct, Kind: report.KindDirect, Description: "one veth pair from wire to lab (the floor: the tool and one veth hop)"},
	}
}

// DefaultConfigs are the configurations run when none are named.
var DefaultConfigs = []string{Block, Busy, TAPThreaded, NICGRO, NICThreaded, NICBusyPoll, Bridge}

// Point is a request rate and an application delay.
type Point struct {
	// Name is the point as asked, e.g. "125K/6us"; it stays the same when
	// the rate is capped, so runs on different machines line up.
	Name string `json:"name"`
	// Rate is the request rate run, per second: the asked one, or the cap.
	Rate int `json:"rate"`
	// AskedRate is the rate asked for.
	AskedRate int `json:"asked_rate"`
	// Delay is the application delay after each reply, in ns.
	Delay time.Duration `json:"delay_ns"`
	// Capped says why Rate is below AskedRate; empty when it is not.
	Capped string `json:"capped,omitempty"`
}

// ReferencePoints are the rate and delay pairs of the threaded NAPI busy
// poll merge's xsk_rr table.
var ReferencePoints = []Point{
	point(12000, 0), point(32000, 30*time.Microsecond), point(125000, 6*time.Microsecond),
	point(12000, 78*time.Microsecond), point(25000, 38*time.Microsecond),
}

func point(rate int, delay time.Duration) Point {
	return Point{Name: RateName(rate) + "/" + forwarder.Micros(delay), Rate: rate, AskedRate: rate, Delay: delay}
}

// RateName writes a rate the short way: 12K, 12.5K, 800.
func RateName(r int) string {
	if r >= 1000 {
		return strconv.FormatFloat(float64(r)/1000, 'f', -1, 64) + "K"
	}
	return strconv.Itoa(r)
}

var pointRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([kK]?)/([0-9]+(?:\.[0-9]+)?)(us|µs|ms|ns|s)?$`)

// ParsePoints parses "12K/0us,32K/30us": rates per second (K = 1000) and
// delays (a number and a unit; a bare number is microseconds).
func ParsePoints(s string) ([]Point, error) {
	var out []Point
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		m := pointRE.FindStringSubmatch(f)
		if m == nil {
			return nil, fmt.Errorf("bad point %q: want RATE/DELAY, e.g. 12K/0us or 32K/30us", f)
		}
		r, _ := strconv.ParseFloat(m[1], 64)
		if m[2] != "" {
			r *= 1000
		}
		unit := m[4]
		if unit == "" || unit == "µs" {
			unit = "us"
		}
		d, err := time.ParseDuration(m[3] + unit)
		if err != nil {
			return nil, fmt.Errorf("bad delay in %q: %w", f, err)
		}
		if r < 1 || r > 2e6 || d > 10*time.Millisecond {
			return nil, fmt.Errorf("point %q: want a rate of 1 to 2M per second and a delay of at most 10ms", f)
		}
		out = append(out, point(int(math.Round(r)), d))
	}
	if len(out) == 0 {
		return nil, errors.New("no point given")
	}
	return out, nil
}
