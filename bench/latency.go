package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/testbed"
	"github.com/tapfwd/tapfwd/napi"
)

// The latency bench: the request/response tool of rr.go at fixed rates and
// application delays (the points of the kernel's threaded-busy-poll merge,
// measured there with xsk_rr), through tapfwd in several polling set-ups
// and through the Linux bridge, with the repetition and interval rules of
// Throughput.

// Latency configuration names.
const (
	LatBlock       = "tapfwd-block"
	LatBusy        = "tapfwd-busy"
	LatTAPThreaded = "tap-napi-threaded"
	LatNICGRO      = "nic-gro"
	LatNICThreaded = "nic-napi-threaded"
	LatNICBusyPoll = "nic-napi-busy-poll"
)

// LatencyConfig is one path between the wire and the lab for the latency
// bench: a Config (kind, `tapfwd run` flags, needs, skipped) plus commands
// run in the fwd namespace before the forwarder starts and the NIC's NAPI
// mode. Its JSON form is Config's with "setup" added.
type LatencyConfig struct {
	Config
	// Setup are commands run in the fwd namespace after the bed is built
	// and before the forwarder starts; NICToken in an argument stands for
	// the NIC's name.
	Setup [][]string `json:"setup,omitempty"`
	// NICNAPI is the per-NAPI threaded mode it sets on the NIC (checked
	// against the kernel's netdev family before the run); 0 for none.
	NICNAPI napi.Threaded `json:"-"`
}

// NICToken in a Setup argument is replaced by the bed's NIC name.
const NICToken = "{nic}"

// nicUDPGRO makes UDP from the wire go through the NIC veth's NAPI: a veth
// has NAPI instances only with GRO on, and hands UDP from a TSO-capable
// peer to them only with rx-udp-gro-forwarding (or rx-gro-list) on;
// otherwise it takes the per-CPU backlog and a threaded NIC NAPI sees no
// work (drivers/net/veth.c: veth_skb_is_eligible_for_gro).
var nicUDPGRO = [][]string{{"ethtool", "-K", NICToken, "gro", "on", "rx-udp-gro-forwarding", "on"}}

// NAPICPU is the CPU the NIC-NAPI configurations pin the NAPI kthread to:
// the last one, away from the forwarding worker (queue 0 on the first
// allowed CPU).
func NAPICPU() int { return max(runtime.NumCPU()-1, 0) }

// LatencyConfigs returns every configuration the latency bench knows, in
// report order.
func LatencyConfigs() []LatencyConfig {
	cpu := strconv.Itoa(NAPICPU())
	return []LatencyConfig{
		{Config: Config{Name: LatBlock, Kind: KindTapfwd,
			Description: "tapfwd, workers sleep in ppoll until a fd is ready (--poll block, the default); IFF_NAPI when offered",
			Args:        []string{"--napi", "auto", "--poll", "block"}}},
		{Config: Config{Name: LatBusy, Kind: KindTapfwd,
			Description: "tapfwd, workers spin on non-blocking reads (--poll busy): one whole CPU per queue",
			Args:        []string{"--napi", "auto", "--poll", "busy"}}},
		{Config: Config{Name: LatTAPThreaded, Kind: KindTapfwd, Needs: unix.IFF_NAPI,
			Description: "tapfwd --poll block, IFF_NAPI on with the TAP's NAPI poll in a kthread (--tap-napi-threaded)",
			Args:        []string{"--napi", "on", "--poll", "block", "--tap-napi-threaded"}}},
		{Config: Config{Name: LatNICGRO, Kind: KindTapfwd,
			Description: "tapfwd --poll block with GRO and rx-udp-gro-forwarding on the NIC veth, so requests go through its NAPI (softirq): the control for the two below",
			Args:        []string{"--napi", "auto", "--poll", "block"}}, Setup: nicUDPGRO},
		{Config: Config{Name: LatNICThreaded, Kind: KindTapfwd,
			Description: "as " + LatNICGRO + ", the NIC veth's NAPI threaded (--nic-napi-threaded enabled), its kthread pinned to CPU " + cpu,
			Args:        []string{"--napi", "auto", "--poll", "block", "--nic-napi-threaded", "enabled", "--nic-napi-cpu", cpu}}, Setup: nicUDPGRO, NICNAPI: napi.ThreadedEnabled},
		{Config: Config{Name: LatNICBusyPoll, Kind: KindTapfwd,
			Description: "as " + LatNICGRO + ", the NIC veth's NAPI kthread busy-polling (--nic-napi-threaded busy-poll), pinned to CPU " + cpu,
			Args:        []string{"--napi", "auto", "--poll", "block", "--nic-napi-threaded", "busy-poll", "--nic-napi-cpu", cpu}}, Setup: nicUDPGRO, NICNAPI: napi.ThreadedBusyPoll},
		{Config: Config{Name: Bridge, Kind: KindBridge, Description: "Linux bridge in the fwd namespace (in-kernel reference)"}},
		{Config: Config{Name: Direct, Kind: KindDirect, Description: "one veth pair from wire to lab (the floor: the tool and one veth hop)"}},
	}
}

// DefaultLatencyConfigs are the configurations run when none are named.
var DefaultLatencyConfigs = []string{LatBlock, LatBusy, LatTAPThreaded, LatNICGRO, LatNICThreaded, LatNICBusyPoll, Bridge}

// LatencyPoint is a request rate and an application delay.
type LatencyPoint struct {
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
var ReferencePoints = []LatencyPoint{
	point(12000, 0), point(32000, 30*time.Microsecond), point(125000, 6*time.Microsecond),
	point(12000, 78*time.Microsecond), point(25000, 38*time.Microsecond),
}

func point(rate int, delay time.Duration) LatencyPoint {
	return LatencyPoint{Name: RateName(rate) + "/" + usec(delay), Rate: rate, AskedRate: rate, Delay: delay}
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
func ParsePoints(s string) ([]LatencyPoint, error) {
	var out []LatencyPoint
	for _, f := range strings.Split(s, ",") {
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

// LatencyOptions configure Latency.
type LatencyOptions struct {
	// Exe is the tapfwd binary, started in the fwd namespace as `tapfwd run`.
	Exe string
	// Configs to measure, in report order; nil means DefaultLatencyConfigs.
	Configs []LatencyConfig
	// Points to run on each configuration's bed; nil means ReferencePoints.
	Points []LatencyPoint
	// Reps is the number of repetitions of every configuration; 0 means 3.
	Reps int
	// Duration of each measured run; 0 means 2 s.
	Duration time.Duration
	// Warmup before each run, not counted; 0 means 200 ms.
	Warmup time.Duration
	// Payload is the UDP payload in bytes; 0 means DefaultRRPayload.
	Payload int
	// Calibrate names the configuration on which each point's rate is
	// checked before the matrix runs (and capped where it cannot be
	// sustained); empty runs every point at its asked rate.
	Calibrate string
	// TUNFeatures are the kernel's TUNGETFEATURES flags; configurations
	// whose Needs are missing are skipped with the reason.
	TUNFeatures uint32
	// Bootstrap seeds the intervals.
	Bootstrap Bootstrap
	// Progress, when set, is called before each run.
	Progress func(Progress)
	// Log receives one line per bed and per failure; nil discards.
	Log *slog.Logger
}

// Calibration: what a probe must show for its rate to stand, and how the
// rate is searched (see calibrate).
const (
	sustainRate = 0.95 // of the asked rate, sent
	sustainLoss = 0.5  // percent, at most
	sustainP50x = 3    // the median round trip, at most this times the unloaded one
	// sustainSenderCPU: the sender thread may use at most this share of a
	// CPU. Beyond it the load generator, not the path, is the limit, and a
	// SCHED_FIFO sender that nearly never sleeps starves its CPU's
	// ksoftirqd, which holds its own requests back: the rate collapses.
	sustainSenderCPU = 0.5
	capHeadroom      = 0.8             // a capped point runs at this share of the highest rate that held
	baselineRate     = 1000            // the unloaded probe: 1K requests/s, no delay
	probeLength      = 1 * time.Second // each probe
	capStep          = 0.8             // going down: this share
	capFloor         = 1000            // never below 1K requests per second
	capTries         = 6               // probes per point at most
	capRound         = 1000            // caps are whole thousands
	drainTime        = 200 * time.Millisecond
	settleTime       = time.Second // after a probe that did not hold
)

// senderFIFO is the SCHED_FIFO priority of the request sender's thread
// (RROptions.SenderFIFO): the reference ran its client with chrt -f 50.
const senderFIFO = 50

// Latency measures every configuration at every point. Its method is
// Throughput's: each repetition visits the configurations in turn, starting
// one further along each time; each visit builds a fresh bed, runs the
// configuration's set-up, starts the forwarder if any and runs every point
// on it. Before that, when Calibrate names a configuration, each point's
// rate is probed on it and capped where the machine cannot sustain it, so
// every configuration runs the same rates.
//
// A configuration the kernel or this tapfwd cannot do is skipped with the
// reason before anything runs; one whose bed or forwarder fails to start
// twice in a row on its first visit is skipped too. When ctx ends,
// everything started is stopped and removed, and the error wraps
// ErrInterrupted.
func Latency(ctx context.Context, o LatencyOptions) (*LatencyReport, error) {
	if o.Configs == nil {
		o.Configs, _ = SelectConfigs(LatencyConfigs(), DefaultLatencyConfigs)
	}
	if o.Points == nil {
		o.Points = ReferencePoints
	}
	if o.Reps <= 0 {
		o.Reps = 3
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if o.Warmup <= 0 {
		o.Warmup = 200 * time.Millisecond
	}
	if o.Payload <= 0 {
		o.Payload = DefaultRRPayload
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if len(o.Configs) == 0 || len(o.Points) == 0 {
		return nil, errors.New("bench: nothing to measure: no configuration or no point")
	}
	r := &LatencyReport{
		Schema:  LatencySchema,
		Started: time.Now().UTC(),
		Configs: append([]LatencyConfig(nil), o.Configs...),
		Points:  append([]LatencyPoint(nil), o.Points...),
		Settings: LatencySettings{
			Reps: o.Reps, RunSeconds: o.Duration.Seconds(), WarmupSeconds: o.Warmup.Seconds(),
			PayloadBytes: o.Payload, SenderFIFO: senderFIFO, Seed: o.Bootstrap.Seed, Resamples: o.Bootstrap.resamples(), Level: Level,
		},
	}
	r.Host = hostInfo(o.TUNFeatures)
	r.Host.Iperf3 = ""
	checkLatencyConfigs(r.Configs, o)
	active := 0
	for _, c := range r.Configs {
		if c.Skipped != "" {
			o.Log.Info("skipping configuration", "config", c.Name, "reason", c.Skipped)
			continue
		}
		active++
	}
	if active == 0 {
		var why []string
		for _, c := range r.Configs {
			why = append(why, c.Name+": "+c.Skipped)
		}
		return nil, fmt.Errorf("bench: every configuration was skipped (%s)", strings.Join(why, "; "))
	}
	m := &latMeter{o: o, start: time.Now(), total: active * o.Reps * len(o.Points)}
	if o.Calibrate != "" {
		if err := r.calibrate(ctx, o, m); err != nil {
			return nil, err
		}
	}
	for rep := 1; rep <= o.Reps; rep++ {
		for i := range r.Configs {
			c := &r.Configs[(i+rep-1)%len(r.Configs)]
			if c.Skipped != "" {
				continue
			}
			runs, err := latVisit(ctx, o, c, r.Points, rep, m)
			if err != nil && len(runs) == 0 && ctx.Err() == nil {
				o.Log.Warn("set-up failed, trying once more", "config", c.Name, "rep", rep, "err", err)
				runs, err = latVisit(ctx, o, c, r.Points, rep, m)
			}
			r.runs = append(r.runs, runs...)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %v", ErrInterrupted, context.Cause(ctx))
			}
			if err == nil {
				continue
			}
			if !r.hasValues(c.Name) {
				c.Skipped = err.Error()
				m.total -= (o.Reps-rep+1)*len(r.Points) - len(runs)
				o.Log.Warn("skipping configuration", "config", c.Name, "reason", c.Skipped)
				continue
			}
			m.total -= len(r.Points) - len(runs)
			o.Log.Warn("repetition failed", "config", c.Name, "rep", rep, "err", err)
			for _, p := range r.Points[len(runs):] {
				r.runs = append(r.runs, latRun{Config: c.Name, Point: p.Name, LatencySample: LatencySample{Rep: rep, Err: err.Error()}})
			}
		}
	}
	r.Finished = time.Now().UTC()
	r.notes()
	r.analyze(o.Bootstrap)
	return r, nil
}

// checkLatencyConfigs marks what cannot run here as skipped: TAP features
// the kernel lacks, NIC NAPI modes its netdev family lacks, `tapfwd run`
// flags this tapfwd does not have, and ethtool missing for a set-up.
func checkLatencyConfigs(cs []LatencyConfig, o LatencyOptions) {
	var flags map[string]bool
	var flagsErr error
	var napiFeat *napi.Features
	var napiErr error
	for i := range cs {
		c := &cs[i]
		if c.Skipped != "" {
			continue
		}
		if !c.kernelHas(o.TUNFeatures) {
			continue
		}
		if c.Kind == KindTapfwd {
			if flags == nil && flagsErr == nil {
				flags, flagsErr = runFlags(o.Exe)
			}
			if flagsErr != nil {
				c.Skipped = flagsErr.Error()
				continue
			}
			if f := missingFlags(c.Args, flags); len(f) > 0 {
				c.Skipped = fmt.Sprintf("this tapfwd's run command has no %s flag", strings.Join(f, ", "))
				continue
			}
		}
		if c.NICNAPI != napi.ThreadedDisabled {
			if napiFeat == nil && napiErr == nil {
				napiFeat, napiErr = napiFeatures()
			}
			if napiErr != nil {
				c.Skipped = napiErr.Error()
				continue
			}
			if err := napiSupports(*napiFeat, c.NICNAPI); err != nil {
				c.Skipped = err.Error()
				continue
			}
		}
		for _, s := range c.Setup {
			if _, err := exec.LookPath(s[0]); err != nil {
				c.Skipped = fmt.Sprintf("%s not found (its set-up runs %s): install it, e.g. apt-get install %s", s[0], strings.Join(s, " "), s[0])
				break
			}
		}
	}
}

// runFlags lists the flags `exe run -h` prints.
func runFlags(exe string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, exe, "run", "-h").CombinedOutput()
	flags := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		// flag.PrintDefaults: "  -name type" then the usage, indented.
		if f, ok := strings.CutPrefix(sc.Text(), "  -"); ok && f != "" {
			flags[strings.Fields(f)[0]] = true
		}
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("%s run -h listed no flags: %s", exe, lastLines(string(out), 2))
	}
	return flags, nil
}

// missingFlags returns the flags in args that are not in known, as --name.
func missingFlags(args []string, known map[string]bool) []string {
	var out []string
	for _, a := range args {
		name, ok := strings.CutPrefix(a, "-")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
		if !known[name] {
			out = append(out, "--"+name)
		}
	}
	return out
}

func napiFeatures() (*napi.Features, error) {
	c, err := napi.Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	f := c.Features()
	return &f, nil
}

// napiSupports says whether the kernel can set NAPI instances to mode, in
// the napi package's words when it cannot.
func napiSupports(f napi.Features, mode napi.Threaded) error {
	kernel := ""
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		kernel = unix.ByteSliceToString(u.Release[:])
	}
	switch {
	case !f.NAPIGet || !f.NAPISet || !f.Threaded:
		return &napi.FeatureError{Feature: "per-NAPI threaded polling (napi-set threaded)", Since: "6.17", Kernel: kernel}
	case mode == napi.ThreadedBusyPoll && !f.BusyPoll:
		return &napi.FeatureError{Feature: "threaded NAPI busy polling (threaded busy-poll)", Since: "6.19", Kernel: kernel}
	}
	return nil
}

func (r *LatencyReport) hasValues(config string) bool {
	for _, run := range r.runs {
		if run.Config == config && run.Err == "" {
			return true
		}
	}
	return false
}

// calibrate probes each point's rate on the calibration configuration and
// caps the rates it cannot sustain. A configuration that will not start
// leaves the rates as asked, with a note.
//
// First a probe at baselineRate without delay gives the unloaded median
// round trip. A rate holds when a probe sends at least sustainRate of it,
// loses at most sustainLoss percent, and its median round trip stays within
// sustainP50x times the unloaded one (more means a standing queue: at the
// reference's points the delay fills nearly the whole period, so a receiver
// a little slower than the reference's falls behind for good), and the
// sender thread used at most sustainSenderCPU of a CPU. The tail is not
// judged: on a shared machine one stall of another process moves a 1 s
// probe's 99th percentile. A point whose asked rate does not
// hold is searched: first capStep of the reply rate its probe got, then
// down by capStep until a rate holds, then up by bisection (geometric)
// towards the lowest rate that failed, until the two are within an eighth,
// capTries probes in all. The point then runs at capHeadroom of the highest
// rate that held, which leaves the configurations slower than the
// calibration one some room, and a noisy probe some margin.
func (r *LatencyReport) calibrate(ctx context.Context, o LatencyOptions, m *latMeter) error {
	c := r.config(o.Calibrate)
	if c == nil {
		c = &LatencyConfig{Config: Config{Name: o.Calibrate, Skipped: "not among the configurations run"}}
	}
	if c.Skipped != "" {
		r.Notes = append(r.Notes, fmt.Sprintf("Rates not calibrated: %s is skipped (%s); every point ran at its asked rate.", c.Name, c.Skipped))
		return nil
	}
	o.Log.Info("calibrating the rates", "config", c.Name)
	err := withBed(ctx, o, c, 0, func(bed *testbed.Bed, fw *Forwarder) error {
		probe := func(p LatencyPoint, rate int, n int) (*RRResult, error) {
			if fw != nil && fw.Exited() {
				return nil, fmt.Errorf("the forwarder exited: %s", lastLines(fw.Output(), 3))
			}
			m.progress(Progress{Config: "calibrating on " + c.Name,
				Workload: fmt.Sprintf("%s at %s (probe %d)", p.Name, RateName(rate), n)})
			return RoundTrips(ctx, bed, RROptions{Rate: float64(rate), Delay: p.Delay, Duration: probeLength,
				Warmup: o.Warmup, Payload: o.Payload, Drain: drainTime, SenderFIFO: senderFIFO})
		}
		base, err := probe(point(baselineRate, 0), baselineRate, 1)
		if err != nil {
			return err
		}
		if base.Received == 0 {
			return fmt.Errorf("no reply to %d requests at %s/0us", base.Sent, RateName(baselineRate))
		}
		unloaded := base.RTT.Quantile(0.5)
		r.Settings.CalibratedOn = c.Name
		r.Settings.UnloadedP50 = float64(unloaded)
		o.Log.Info("calibration baseline", "rate", baselineRate, "p50", unloaded)
		for i := range r.Points {
			p := &r.Points[i]
			held := func(res *RRResult, rate int) bool {
				ok := res.Rate() >= sustainRate*float64(rate) && res.LossPercent() <= sustainLoss &&
					res.RTT.Quantile(0.5) <= sustainP50x*unloaded && res.SenderCPU <= sustainSenderCPU
				o.Log.Info("calibration probe", "point", p.Name, "rate", rate, "sent_per_s", int(res.Rate()),
					"loss_percent", res.LossPercent(), "p50", res.RTT.Quantile(0.5), "sender_cpu", res.SenderCPU, "sustained", ok)
				return ok
			}
			first, err := probe(*p, p.AskedRate, 1)
			if err != nil {
				return err
			}
			if held(first, p.AskedRate) {
				continue
			}
			if err := settle(ctx); err != nil {
				return err
			}
			lo, hi := 0, p.AskedRate // highest rate that held, lowest that failed
			back := math.Min(float64(first.Sent), float64(first.Received)) / first.Duration.Seconds()
			next := roundRate(capStep * back)
			for n := 2; n <= capTries && next < hi && next > lo; n++ {
				res, err := probe(*p, next, n)
				if err != nil {
					return err
				}
				if held(res, next) {
					lo = next
				} else {
					hi = next
					if err := settle(ctx); err != nil {
						return err
					}
				}
				if lo == 0 {
					if next == capFloor {
						break // nothing lower to try
					}
					next = roundRate(capStep * float64(next))
					continue
				}
				if hi-lo <= max(capRound, lo/8) {
					break // close enough
				}
				next = roundRate(math.Sqrt(float64(lo) * float64(hi)))
			}
			if lo == 0 {
				p.Rate = min(next, hi)
				p.Capped = fmt.Sprintf("not sustained here even at %s (%v probes through %s; at %s: %s)",
					RateName(p.Rate), probeLength, c.Name, RateName(p.AskedRate), probeSummary(first))
				continue
			}
			p.Rate = roundRate(capHeadroom * float64(lo))
			p.Capped = fmt.Sprintf("%s not reachable here: capped at %s, %.0f%% of the %s that held in %v probes through %s (at %s: %s)",
				RateName(p.AskedRate), RateName(p.Rate), 100*capHeadroom, RateName(lo), probeLength, c.Name, RateName(p.AskedRate), probeSummary(first))
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %v", ErrInterrupted, context.Cause(ctx))
		}
		r.Settings.CalibratedOn, r.Settings.UnloadedP50 = "", 0
		r.Notes = append(r.Notes, fmt.Sprintf("Rates not calibrated: %s failed (%v); every point ran at its asked rate.", c.Name, err))
		for i := range r.Points {
			r.Points[i].Rate, r.Points[i].Capped = r.Points[i].AskedRate, ""
		}
	}
	return nil
}

// settle waits settleTime after a probe that overloaded the bed. Queues
// that filled (a CPU's backlog, socket buffers) take a while to drain, and
// meanwhile the next probe's sender can block on its full send buffer and
// send next to nothing: seen here after probes at several times the
// sustainable rate.
func settle(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settleTime):
		return nil
	}
}

// roundRate rounds a rate down to whole capRound, at least capFloor.
func roundRate(v float64) int {
	return max(int(v)/capRound*capRound, capFloor)
}

func probeSummary(res *RRResult) string {
	if res == nil {
		return "no result"
	}
	return fmt.Sprintf("%s requests/s sent, %.0f%% without reply, p50 %s us", kRate(res.Rate()), res.LossPercent(), Num(float64(res.RTT.Quantile(0.5))/1e3))
}

// withBed builds a bed for c, runs its set-up, starts its forwarder, calls
// fn and removes everything.
func withBed(ctx context.Context, o LatencyOptions, c *LatencyConfig, rep int, fn func(*testbed.Bed, *Forwarder) error) error {
	mode := testbed.Forwarder
	switch c.Kind {
	case KindBridge:
		mode = testbed.Bridge
	case KindDirect:
		mode = testbed.Direct
	}
	bed, err := testbed.New(ctx, testbed.Config{Mode: mode})
	if err != nil {
		return fmt.Errorf("building the test bed: %w", err)
	}
	defer bed.Close()
	o.Log.Info("bed", "config", c.Name, "rep", rep, "id", bed.ID, "namespaces", bed.WireNS+" "+bed.FwdNS+" "+bed.LabNS)
	for _, s := range c.Setup {
		args := make([]string, len(s)-1)
		for i, a := range s[1:] {
			args[i] = strings.ReplaceAll(a, NICToken, bed.NIC)
		}
		if _, err := bed.Run(ctx, bed.FwdNS, s[0], args...); err != nil {
			return fmt.Errorf("set-up: %w", err)
		}
	}
	var fw *Forwarder
	if c.Kind == KindTapfwd {
		fw, err = StartForwarder(ctx, bed, o.Exe, c.Args...)
	} else {
		err = bed.WaitLabReachable(ctx, 10*time.Second)
	}
	if err != nil {
		return err
	}
	if fw != nil {
		defer fw.Stop()
	}
	return fn(bed, fw)
}

// latVisit runs every point on a fresh bed for c. It returns the runs made;
// the error is a set-up failure or the forwarder dying, after which the
// remaining points are not run.
func latVisit(ctx context.Context, o LatencyOptions, c *LatencyConfig, points []LatencyPoint, rep int, m *latMeter) ([]latRun, error) {
	var runs []latRun
	err := withBed(ctx, o, c, rep, func(bed *testbed.Bed, fw *Forwarder) error {
		for _, p := range points {
			if fw != nil && fw.Exited() {
				return fmt.Errorf("the forwarder exited: %s", lastLines(fw.Output(), 3))
			}
			m.report(c.Name, rep, p.Name)
			res, err := RoundTrips(ctx, bed, RROptions{Rate: float64(p.Rate), Delay: p.Delay, Duration: o.Duration,
				Warmup: o.Warmup, Payload: o.Payload, Drain: drainTime, SenderFIFO: senderFIFO})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.done++
			run := latRun{Config: c.Name, Point: p.Name, LatencySample: LatencySample{Rep: rep}}
			switch {
			case err != nil:
				run.Err = firstLine(err.Error())
			case res.Received == 0:
				run.Err = fmt.Sprintf("no reply to %d requests", res.Sent)
			default:
				run.LatencySample = sampleOf(rep, res)
			}
			if run.Err != "" {
				o.Log.Warn("run failed", "config", c.Name, "rep", rep, "point", p.Name, "err", run.Err)
			}
			runs = append(runs, run)
			if err != nil || res.Rate() < sustainRate*float64(p.Rate) || res.LossPercent() > sustainLoss {
				// Overloaded: let the queues drain before the next point.
				if err := settle(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return runs, err
}

func sampleOf(rep int, res *RRResult) LatencySample {
	q := func(x float64) float64 { return float64(res.RTT.Quantile(x)) }
	return LatencySample{
		Rep: rep, Sent: res.Sent, Arrived: res.Arrived, Received: res.Received, Reordered: res.Reordered,
		Missed: res.Missed, SendErrors: res.SendErrors, Rate: res.Rate(), LossPercent: res.LossPercent(),
		RTT: Percentiles{Min: float64(res.RTT.Min()), P5: q(0.05), P50: q(0.5), P95: q(0.95), P99: q(0.99),
			P999: q(0.999), Max: float64(res.RTT.Max())},
		SendLagP50: float64(res.SendLag.Quantile(0.5)), SendLagP99: float64(res.SendLag.Quantile(0.99)),
		SenderFIFO: res.SenderFIFO, SenderCPU: res.SenderCPU,
	}
}

// latMeter tracks progress and estimates the time left.
type latMeter struct {
	o     LatencyOptions
	start time.Time
	done  int
	total int
}

func (m *latMeter) report(config string, rep int, point string) {
	m.progress(Progress{Config: config, Rep: rep, Reps: m.o.Reps, Workload: point})
}

func (m *latMeter) progress(p Progress) {
	if m.o.Progress == nil {
		return
	}
	p.Done, p.Total = m.done, m.total
	p.Elapsed = time.Since(m.start)
	per := m.o.Duration + m.o.Warmup + 700*time.Millisecond // a run, plus its share of a bed
	if m.done > 0 {
		per = p.Elapsed / time.Duration(m.done)
	}
	p.Left = per * time.Duration(m.total-m.done)
	m.o.Progress(p)
}
