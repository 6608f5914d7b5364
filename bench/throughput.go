package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/iperf"
	"github.com/tapfwd/tapfwd/bench/testbed"
)

// Kinds of configuration: what connects the wire and lab namespaces.
const (
	KindTapfwd = "tapfwd" // `tapfwd run` with Config.Args
	KindNaive  = "naive"  // `tapfwd bench naive-forwarder` (package naive)
	KindBridge = "bridge" // the Linux bridge, the in-kernel reference
	KindDirect = "direct" // one veth pair, the ceiling
)

// Configuration names. Each is a row of the report.
const (
	NAPIOn       = "napi-on"
	NAPIOff      = "napi-off"
	VnetOff      = "vnet-off"
	NAPIThreaded = "napi-threaded"
	NAPIGRO      = "napi-gro-flush"
	Queues2      = "queues-2"
	Naive        = "naive"
	Bridge       = "bridge"
	Direct       = "direct"
)

// Config is one configuration of the path between the wire and the lab.
type Config struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Description string   `json:"description"`
	Args        []string `json:"args,omitempty"` // `tapfwd run` flags (KindTapfwd)
	// Needs lists the TUNGETFEATURES bits (unix.IFF_*) the configuration
	// cannot run without.
	Needs uint32 `json:"-"`
	// Skipped says why the configuration did not run; empty when it ran.
	Skipped string `json:"skipped,omitempty"`
}

// TAPNAPI are the TAP NAPI settings of the NAPIGRO configuration.
type TAPNAPI struct {
	// GROFlushTimeout is the TAP's gro_flush_timeout. DESIGN.md: 200 us
	// starves TCP; tens of microseconds let written frames merge.
	GROFlushTimeout time.Duration
	// DeferHardIRQs is the TAP's napi_defer_hard_irqs.
	DeferHardIRQs int
}

// DefaultTAPNAPI is the NAPIGRO setting used unless the caller picks one.
var DefaultTAPNAPI = TAPNAPI{GROFlushTimeout: 20 * time.Microsecond, DeferHardIRQs: 1}

// Configs returns every configuration the bench knows, in report order:
// tapfwd variants first, then the baselines.
func Configs(n TAPNAPI) []Config {
	vnetNAPI := uint32(unix.IFF_NAPI | unix.IFF_VNET_HDR)
	return []Config{
		{Name: NAPIOff, Kind: KindTapfwd, Needs: unix.IFF_VNET_HDR,
			Description: "tapfwd, IFF_NAPI off, vnet headers on",
			Args:        []string{"--napi", "off", "--vnet-hdr", "on"}},
		{Name: NAPIOn, Kind: KindTapfwd, Needs: vnetNAPI,
			Description: "tapfwd, IFF_NAPI on, vnet headers on",
			Args:        []string{"--napi", "on", "--vnet-hdr", "on"}},
		{Name: NAPIThreaded, Kind: KindTapfwd, Needs: vnetNAPI,
			Description: "tapfwd, IFF_NAPI on with the TAP's NAPI threaded (sysfs threaded=1)",
			Args:        []string{"--napi", "on", "--vnet-hdr", "on", "--tap-napi-threaded"}},
		{Name: NAPIGRO, Kind: KindTapfwd, Needs: vnetNAPI,
			Description: fmt.Sprintf("tapfwd, IFF_NAPI on, TAP gro_flush_timeout %s, napi_defer_hard_irqs %d", usec(n.GROFlushTimeout), n.DeferHardIRQs),
			Args: []string{"--napi", "on", "--vnet-hdr", "on",
				"--tap-gro-flush-timeout", usec(n.GROFlushTimeout),
				"--tap-napi-defer-hard-irqs", strconv.Itoa(n.DeferHardIRQs)}},
		{Name: VnetOff, Kind: KindTapfwd,
			Description: "tapfwd, vnet headers off (GSO segmented and checksums completed in userspace), IFF_NAPI when offered",
			Args:        []string{"--napi", "auto", "--vnet-hdr", "off"}},
		{Name: Queues2, Kind: KindTapfwd, Needs: unix.IFF_MULTI_QUEUE,
			Description: "tapfwd, 2 queues (two workers, fanout), IFF_NAPI when offered, vnet headers on",
			Args:        []string{"--queues", "2", "--napi", "auto", "--vnet-hdr", "auto"}},
		{Name: Naive, Kind: KindNaive,
			Description: "naive forwarder: songgao/water TAP (no vnet header) + one AF_PACKET socket with PACKET_VNET_HDR, one syscall per frame, vnethdr segmentation"},
		{Name: Bridge, Kind: KindBridge, Description: "Linux bridge in the fwd namespace (in-kernel reference)"},
		{Name: Direct, Kind: KindDirect, Description: "one veth pair from wire to lab (ceiling)"},
	}
}

// usec writes d in whole microseconds when it is one ("20us"; plain ASCII,
// unlike Duration.String's "20µs").
func usec(d time.Duration) string {
	if d%time.Microsecond == 0 {
		return strconv.FormatInt(d.Microseconds(), 10) + "us"
	}
	return d.String()
}

func (c Config) name() string { return c.Name }

// kernelHas reports whether the kernel's TUNGETFEATURES flags cover what c
// needs; when not, it marks c skipped with the flags missing.
func (c *Config) kernelHas(features uint32) bool {
	missing := c.Needs &^ features
	if missing != 0 {
		c.Skipped = fmt.Sprintf("the kernel lacks %s (TUNGETFEATURES %#x)", strings.Join(tunFlagNames(missing), ", "), features)
	}
	return missing == 0
}

// SelectConfigs returns the configurations of all (those of either bench)
// named in names, in all's order; an unknown name is an error.
func SelectConfigs[C interface{ name() string }](all []C, names []string) ([]C, error) {
	known := map[string]bool{}
	var list []string
	for _, c := range all {
		known[c.name()] = true
		list = append(list, c.name())
	}
	want := map[string]bool{}
	for _, n := range names {
		if !known[n] {
			return nil, fmt.Errorf("unknown configuration %q (known: %s)", n, strings.Join(list, ", "))
		}
		want[n] = true
	}
	var out []C
	for _, c := range all {
		if want[c.name()] {
			out = append(out, c)
		}
	}
	return out, nil
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

// Options configure Throughput.
type Options struct {
	// Exe is the tapfwd binary, started in the fwd namespace as `tapfwd run`
	// and `tapfwd bench naive-forwarder`.
	Exe string
	// Configs to measure, in report order; nil means Configs(DefaultTAPNAPI).
	Configs []Config
	// Workloads to run on each configuration's bed; nil means
	// Workloads([64 128 4096], [1 4], both directions, true).
	Workloads []Workload
	// Reps is the number of repetitions of every configuration; 0 means 3.
	Reps int
	// Duration of each iperf3 run (whole seconds); 0 means 1 s.
	Duration time.Duration
	// TUNFeatures are the kernel's TUNGETFEATURES flags; configurations
	// whose Needs are missing are skipped with the reason.
	TUNFeatures uint32
	// Bootstrap seeds the intervals.
	Bootstrap Bootstrap
	// IperfPin, when set, pins the iperf3 client (wire namespace) and
	// server (lab namespace) to CPUs in every run; nil leaves them to the
	// scheduler. On a machine with few CPUs where they run decides
	// small-packet results (docs/performance.md).
	IperfPin *iperf.Pinning
	// Progress, when set, is called before each iperf3 run.
	Progress func(Progress)
	// Log receives one line per bed and per failure; nil discards.
	Log *slog.Logger
}

// Progress says where a run is.
type Progress struct {
	Config    string
	Rep, Reps int // Rep counts from 1
	Workload  string
	Done      int           // iperf3 runs finished
	Total     int           // iperf3 runs planned (shrinks when a configuration is skipped)
	Elapsed   time.Duration // since the start
	Left      time.Duration // estimate
}

// DefaultSizes, DefaultStreams and DefaultDirs make the default matrix.
var (
	DefaultSizes   = []int{64, 128, 4096}
	DefaultStreams = []int{1, 4}
	DefaultDirs    = []string{WireToLab, LabToWire}
)

// sample is one iperf3 run of one configuration and workload.
type sample struct {
	Config      string
	Workload    string
	Rep         int
	Value       float64 // in the workload's unit
	Retransmits int
	SenderCPU   float64
	ReceiverCPU float64
	LossPercent float64
	// RcvbufPercent is the share of the datagrams reaching the receiving
	// socket that it dropped with its buffer full (the receiver fell
	// behind), in percent; UDP only.
	RcvbufPercent float64
	// FwdCPUPerGbit is the forwarder's CPU seconds per gigabit delivered.
	FwdCPUPerGbit float64
	Err           string // set when the run gave no value
}

// ErrInterrupted is returned (wrapped) when ctx ends mid-run.
var ErrInterrupted = errors.New("bench interrupted")

// Throughput measures every configuration with every workload. For each
// repetition it visits the configurations in turn, starting one further
// along each time (A B C, B C A, ...), so slow drifts of a shared machine
// spread over all of them; each visit builds a fresh test bed, starts the
// forwarder if any, runs every workload on it, and removes the bed.
//
// A configuration that the kernel cannot do (Options.TUNFeatures), or whose
// bed or forwarder fails to start twice in a row on its first visit, is
// skipped with the reason and the rest runs. A failed iperf3 run is recorded in its cell.
// When ctx ends, everything started is stopped and removed, and the error
// wraps ErrInterrupted.
func Throughput(ctx context.Context, o Options) (*Report, error) {
	if o.Configs == nil {
		o.Configs = Configs(DefaultTAPNAPI)
	}
	if o.Workloads == nil {
		o.Workloads = append(Workloads(DefaultSizes, DefaultStreams, DefaultDirs, true), MTUWorkload())
	}
	if o.Reps <= 0 {
		o.Reps = 3
	}
	if o.Duration <= 0 {
		o.Duration = time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if len(o.Configs) == 0 || len(o.Workloads) == 0 {
		return nil, errors.New("bench: nothing to measure: no configuration or no workload")
	}
	r := &Report{
		Schema:    Schema,
		Started:   time.Now().UTC(),
		Configs:   append([]Config(nil), o.Configs...),
		Workloads: o.Workloads,
		Settings: Settings{
			Reps: o.Reps, RunSeconds: iperfSeconds(o.Duration), Seed: o.Bootstrap.Seed,
			Resamples: o.Bootstrap.resamples(), Level: Level, IperfPin: o.IperfPin,
		},
	}
	r.Host = hostInfo(o.TUNFeatures)
	active := 0
	for i := range r.Configs {
		c := &r.Configs[i]
		if !c.kernelHas(o.TUNFeatures) {
			o.Log.Info("skipping configuration", "config", c.Name, "reason", c.Skipped)
			continue
		}
		active++
	}
	m := &meter{o: o, start: time.Now(), total: active * o.Reps * len(o.Workloads)}
	for rep := 1; rep <= o.Reps; rep++ {
		for i := range r.Configs {
			c := &r.Configs[(i+rep-1)%len(r.Configs)]
			if c.Skipped != "" {
				continue
			}
			runs, err := visit(ctx, o, c, rep, m)
			if err != nil && len(runs) == 0 && ctx.Err() == nil {
				// A bed or forwarder that failed to come up on a loaded
				// machine gets one more try before it counts.
				o.Log.Warn("set-up failed, trying once more", "config", c.Name, "rep", rep, "err", err)
				runs, err = visit(ctx, o, c, rep, m)
			}
			r.runs = append(r.runs, runs...)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %v", ErrInterrupted, context.Cause(ctx))
			}
			if err != nil {
				if !r.hasValues(c.Name) {
					c.Skipped = err.Error()
					m.total -= (o.Reps-rep+1)*len(o.Workloads) - len(runs)
					o.Log.Warn("skipping configuration", "config", c.Name, "reason", c.Skipped)
					continue
				}
				// Later visits: keep the configuration, note the lost runs.
				m.total -= len(o.Workloads) - len(runs)
				o.Log.Warn("repetition failed", "config", c.Name, "rep", rep, "err", err)
				for _, w := range o.Workloads[len(runs):] {
					r.runs = append(r.runs, sample{Config: c.Name, Workload: w.Name, Rep: rep, Err: err.Error()})
				}
			}
		}
	}
	r.Finished = time.Now().UTC()
	r.analyze(o.Bootstrap)
	return r, nil
}

// iperfSeconds is the run length iperf3 actually uses (-t takes seconds).
func iperfSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(1, s)
}

func (r *Report) hasValues(config string) bool {
	for _, run := range r.runs {
		if run.Config == config && run.Err == "" {
			return true
		}
	}
	return false
}

// meter tracks progress and estimates the time left from the mean time per
// run so far.
type meter struct {
	o     Options
	start time.Time
	done  int
	total int
}

func (m *meter) report(c *Config, rep int, w Workload) {
	if m.o.Progress == nil {
		return
	}
	el := time.Since(m.start)
	var left time.Duration
	if m.done > 0 {
		left = el / time.Duration(m.done) * time.Duration(m.total-m.done)
	} else {
		// First guess: the run itself plus about half a second around it.
		left = time.Duration(m.total) * (time.Duration(iperfSeconds(m.o.Duration))*time.Second + 500*time.Millisecond)
	}
	m.o.Progress(Progress{Config: c.Name, Rep: rep, Reps: m.o.Reps, Workload: w.Name,
		Done: m.done, Total: m.total, Elapsed: el, Left: left})
}

// visit builds a bed for c, starts its forwarder, and runs every workload.
// It returns the runs made; the error is a set-up failure (bed, forwarder)
// or the forwarder dying, after which the remaining workloads are not run.
func visit(ctx context.Context, o Options, c *Config, rep int, m *meter) ([]sample, error) {
	mode := testbed.Forwarder
	switch c.Kind {
	case KindBridge:
		mode = testbed.Bridge
	case KindDirect:
		mode = testbed.Direct
	}
	bed, err := testbed.New(ctx, testbed.Config{Mode: mode})
	if err != nil {
		return nil, fmt.Errorf("building the test bed: %w", err)
	}
	defer bed.Close()
	o.Log.Info("bed", "config", c.Name, "rep", rep, "id", bed.ID, "namespaces", bed.WireNS+" "+bed.FwdNS+" "+bed.LabNS)
	var fw *Forwarder
	switch c.Kind {
	case KindTapfwd:
		fw, err = StartForwarder(ctx, bed, o.Exe, c.Args...)
	case KindNaive:
		fw, err = StartNaiveForwarder(ctx, bed, o.Exe)
	default:
		err = bed.WaitLabReachable(ctx, 10*time.Second)
	}
	if err != nil {
		return nil, err
	}
	if fw != nil {
		defer fw.Stop()
	}
	var runs []sample
	for _, w := range o.Workloads {
		if fw != nil && fw.Exited() {
			return runs, fmt.Errorf("the forwarder exited: %s", lastLines(fw.Output(), 3))
		}
		m.report(c, rep, w)
		run := sample{Config: c.Name, Workload: w.Name, Rep: rep}
		var cpu0 float64
		if fw != nil {
			cpu0 = procCPU(fw.Pid())
		}
		if w.WireMTU {
			if _, err := bed.Run(ctx, bed.WireNS, "ethtool", "-K", bed.WireIf, "tso", "off", "gso", "off"); err != nil {
				return runs, fmt.Errorf("turning TSO/GSO off on the wire: %w", err)
			}
		}
		// Where UDP datagrams are lost: the receiver's socket buffer, or
		// on the way.
		rcvNS := bed.LabNS
		if w.Direction == LabToWire {
			rcvNS = bed.WireNS
		}
		var udp0 udpCounters
		if w.Proto == "udp" {
			if udp0, err = udpStats(bed, rcvNS); err != nil {
				return runs, err
			}
		}
		res, err := iperf.Run(ctx, bed, iperf.Options{
			Duration: o.Duration, Len: w.Len, Streams: w.Streams,
			Reverse: w.Direction == LabToWire, UDP: w.Proto == "udp", Bitrate: bitrate(w), Pin: o.IperfPin,
		})
		if w.WireMTU {
			bed.Run(context.Background(), bed.WireNS, "ethtool", "-K", bed.WireIf, "tso", "on", "gso", "on")
		}
		if ctx.Err() != nil {
			return runs, ctx.Err()
		}
		m.done++
		if err != nil {
			run.Err = firstLine(err.Error())
			o.Log.Warn("iperf3 failed", "config", c.Name, "rep", rep, "workload", w.Name, "err", err)
		} else {
			run.Value = res.BitsPerSecond / 1e9
			if w.Unit == Kpps {
				run.Value = res.BitsPerSecond / 8 / float64(w.Len) / 1e3
			}
			run.Retransmits = res.Retransmits
			run.SenderCPU, run.ReceiverCPU = res.SenderCPU, res.ReceiverCPU
			run.LossPercent = res.LostPercent
			if w.Proto == "udp" {
				udp1, err := udpStats(bed, rcvNS)
				if err != nil {
					return runs, err
				}
				run.RcvbufPercent = rcvbufPercent(udp0, udp1)
			}
			if fw != nil && res.Bytes > 0 {
				run.FwdCPUPerGbit = (procCPU(fw.Pid()) - cpu0) / (float64(res.Bytes) * 8 / 1e9)
			}
		}
		runs = append(runs, run)
	}
	return runs, nil
}

func bitrate(w Workload) string {
	if w.Proto == "udp" {
		return "0" // unlimited: as many datagrams as the sender can write
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}

var tunFlags = []struct {
	bit  uint32
	name string
}{
	{unix.IFF_NAPI, "IFF_NAPI"},
	{unix.IFF_VNET_HDR, "IFF_VNET_HDR"},
	{unix.IFF_MULTI_QUEUE, "IFF_MULTI_QUEUE"},
}

func tunFlagNames(bits uint32) []string {
	var s []string
	for _, f := range tunFlags {
		if bits&f.bit != 0 {
			s = append(s, f.name)
		}
	}
	if len(s) == 0 {
		s = append(s, fmt.Sprintf("%#x", bits))
	}
	return s
}

// procCPU is the user plus system CPU time of process pid in seconds
// (/proc/PID/stat fields 14 and 15, in clock ticks of 1/100 s); 0 when it
// cannot be read.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}
