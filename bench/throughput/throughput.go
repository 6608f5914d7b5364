package throughput

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tapfwd/tapfwd/bench/cost"
	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/trace"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Options configure Run.
type Options struct {
	// Common: Configs nil means Configs(DefaultTAPNAPI); Reps is the
	// number of repetitions, or with Budget the first stage.
	matrix.Common
	// Workloads to run on each configuration's bed; nil means
	// Workloads([64 128 4096], [1 4], both directions, true) and
	// MTUWorkload, placed by PlaceAuto.
	Workloads []Workload
	// Duration of each iperf3 run (whole seconds); 0 means 1 s.
	Duration time.Duration
	// Omit is how long each iperf3 run goes before its measured part
	// (iperf3 -O, whole seconds): left out of the figures.
	Omit time.Duration
	// Rule decides the verdicts of the comparisons; the zero Rule means
	// stats.DefaultRule.
	Rule stats.Rule
	// Budget, when positive, makes the run sequential: after the first
	// Reps repetitions (the first stage, at least stats.Stage1Reps), it
	// goes on until every comparison has the pairs its first stage says
	// it needs for an interval within Rule's target (stats.PairsNeeded),
	// or until the next repetition would end past Budget.
	Budget time.Duration
	// AgainstBridge compares every forwarder configuration with the
	// bridge in pairs, as the TAP NAPI modes are compared with NAPIOff:
	// the geometric mean of the per-repetition ratios with its interval,
	// which the sequential rule then also takes pairs for.
	AgainstBridge bool
}

// sample is what one iperf3 run of one configuration and workload gave.
type sample struct {
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
	// Cost is the whole machine's CPU (and the forwarder's) per unit
	// delivered over the run; valid when HasCost.
	Cost    cost.PerUnit
	HasCost bool
	// Trace is what the machine did during the run.
	Trace *trace.Run
}

type record = matrix.Record[sample]

func (o *Options) defaults() error {
	o.Defaults(func() []report.Config { return Configs(DefaultTAPNAPI) })
	if o.Workloads == nil {
		var err error
		if o.Workloads, err = Place(append(Workloads(DefaultSizes, DefaultStreams, DefaultDirs, true), MTUWorkload()), PlaceAuto, DefaultPin()); err != nil {
			return err
		}
	}
	if o.Duration <= 0 {
		o.Duration = time.Second
	}
	if o.Rule == (stats.Rule{}) {
		o.Rule = stats.DefaultRule
	}
	if o.Budget > 0 && o.Reps < stats.Stage1Reps {
		return fmt.Errorf("throughput: a sequential run's first stage of %d repetitions is fewer than %d", o.Reps, stats.Stage1Reps)
	}
	cpus := FirstCPUs(2)
	switch {
	case len(cpus) < 2:
	case o.Lab.Topology == matrix.VXLAN && o.Lab.HostCPUs == nil:
		// Two hosts on one machine: each host's forwarder on a CPU of its
		// own, rather than both on the first CPU.
		o.Lab.HostCPUs = cpus
	case o.Lab.Topology != matrix.VXLAN:
		o.Configs = pinKthreads(o.Configs, cpus[1])
	}
	if len(o.Configs) == 0 || len(o.Workloads) == 0 {
		return errors.New("throughput: nothing to measure: no configuration or no workload")
	}
	return nil
}

// pinKthreads pins the TAP's NAPI kthread of every configuration that
// runs one, and does not place it itself, to cpu: left to the scheduler it
// lands beside tapfwd's worker in some visits and not in others, which
// makes a configuration's runs differ by where it landed.
func pinKthreads(cs []report.Config, cpu int) []report.Config {
	cs = slices.Clone(cs)
	for i := range cs {
		if c := &cs[i]; c.Run.TAPNAPIThreaded && c.Run.TAPNAPICPU == nil {
			c.Run.TAPNAPICPU = forwarder.CPU(cpu)
			c.Args = c.Run.Args()
			c.Description += fmt.Sprintf("; its NAPI kthread on CPU %d", cpu)
		}
	}
	return cs
}

// Run measures every configuration with every workload, in the interleaved
// repetitions of matrix.Run: each visit builds a fresh test bed, starts the
// forwarder if any, runs every workload on it (traced), and removes the
// bed. With a Budget the repetitions go on as the comparisons need.
//
// A configuration that the kernel cannot do (Options.TUNFeatures), or
// that gives a flag the tapfwd binary lacks (Options.TapfwdFlags), is
// skipped with the reason before anything runs; the rest follows
// matrix.Run's rules. A failed iperf3 run is recorded in its cell. When ctx
// ends, everything started is stopped and removed, and the error wraps
// matrix.ErrInterrupted.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	r := newReport(o)
	// The floor's price of a copy, on a machine as quiet as the run's.
	r.Settings.CopyBandwidth = cost.CopyBandwidth(500 * time.Millisecond)
	for i := range r.Configs {
		if c := &r.Configs[i]; !o.Lab.Topology.Fit(c) || !matrix.CheckKernel(c, o.TUNFeatures) || !matrix.CheckFlags(c, o.TapfwdFlags) {
			o.Log.Info("skipping configuration", "config", c.Name, "reason", c.Skipped)
		}
	}
	runs, end, err := matrix.Run(ctx, r.plan(o, func(ctx context.Context, c *report.Config, rep int, m *matrix.Meter) ([]record, error) {
		return visit(ctx, o, c, rep, m)
	}))
	if err != nil {
		return nil, err
	}
	r.finish(runs, end, o.Bootstrap)
	return r, nil
}

// plan is the matrix of r's configurations and o's workloads, each
// visit made by visit: o.Reps repetitions, or with o.Budget as many as
// r's comparisons need.
func (r *Report) plan(o Options, visit func(context.Context, *report.Config, int, *matrix.Meter) ([]record, error)) matrix.Plan[sample] {
	// A first guess per run: the run itself plus about half a second
	// around it.
	guess := time.Duration(iperfSeconds(o.Duration)+omitSeconds(o.Omit))*time.Second + 500*time.Millisecond
	m := matrix.NewMeter(o.Progress, matrix.Active(r.Configs)*o.Reps*len(o.Workloads), o.Reps, guess)
	rows := make([]string, len(o.Workloads))
	for i, w := range o.Workloads {
		rows[i] = w.Name
	}
	p := matrix.Plan[sample]{
		Configs: r.Configs, Rows: rows, Reps: o.Reps, Meter: m, Log: o.Log,
		Visit: func(ctx context.Context, c *report.Config, rep int) ([]record, error) {
			return visit(ctx, c, rep, m)
		},
	}
	if o.Budget > 0 {
		p.More, p.Budget = r.more, o.Budget
	}
	return p
}

// newReport is the report of a run of o, before it runs.
func newReport(o Options) *Report {
	s := Settings{Method: report.NewMethod(o.Reps, o.Bootstrap), RunSeconds: iperfSeconds(o.Duration),
		OmitSeconds: omitSeconds(o.Omit), Paired: true, Interval: SteinInterval,
		MinReps: o.Rule.MinReps, TargetHalfWidth: o.Rule.MaxHalfWidth, Topology: o.Lab.Topology.String(), HostCPUs: o.Lab.HostCPUs,
		AgainstBridge: o.AgainstBridge}
	if c := FirstCPUs(1); len(c) == 1 {
		s.WorkerCPU = &c[0]
	}
	if o.Budget > 0 {
		s.Sequential = &Sequential{Stage1Reps: o.Reps, BudgetSeconds: o.Budget.Seconds()}
	}
	return &Report{
		Header:    report.Header{Schema: Schema, Started: time.Now().UTC(), Host: matrix.ProbeHost(o.TUNFeatures, true)},
		Settings:  s,
		Configs:   append([]report.Config(nil), o.Configs...),
		Workloads: o.Workloads,
	}
}

// iperfSeconds is the run length iperf3 actually uses (-t takes seconds).
func iperfSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(1, s)
}

// omitSeconds is the omitted start iperf3 actually uses (-O, seconds).
func omitSeconds(d time.Duration) int {
	return max(0, int((d+time.Second-1)/time.Second))
}

// visit runs every workload on a fresh bed for c.
func visit(ctx context.Context, o Options, c *report.Config, rep int, m *matrix.Meter) ([]record, error) {
	var runs []record
	err := o.Lab.Visit(ctx, c, rep, func(bed *testbed.Bed, fws matrix.Forwarders) error {
		tap := ""
		if c.Kind == report.KindTapfwd && o.Lab.Topology != matrix.VXLAN {
			tap = bed.LabIf
		}
		for _, w := range o.Workloads {
			if err := fws.Alive(); err != nil {
				return err
			}
			m.Step(c.Name, rep, w.Name)
			s, runErr, err := measure(ctx, o, bed, fws, tap, w)
			if err != nil {
				return err
			}
			m.Done()
			run := record{Config: c.Name, Row: w.Name, Rep: rep, Sample: s}
			if runErr != nil {
				run = record{Config: c.Name, Row: w.Name, Rep: rep, Err: matrix.ErrLine(runErr), Sample: sample{Trace: s.Trace}}
				o.Log.Warn("iperf3 failed", "config", c.Name, "rep", rep, "workload", w.Name, "err", runErr)
			}
			runs = append(runs, run)
		}
		return nil
	})
	return runs, err
}

// measure runs workload w across bed, traced (tap names the bed's TAP,
// when it has one). runErr is iperf3 failing (recorded in the cell); err
// ends the visit (ctx ended, the bed failing).
func measure(ctx context.Context, o Options, bed *testbed.Bed, fws matrix.Forwarders, tap string, w Workload) (s sample, runErr, err error) {
	undo, err := w.Prepare(ctx, bed)
	if err != nil {
		return s, nil, err
	}
	defer undo()
	// What reached the receiver, and where UDP datagrams are lost: the
	// receiver's socket buffer, or on the way.
	sndNS, rcvNS := bed.WireNS, bed.LabNS
	if w.Direction == LabToWire {
		sndNS, rcvNS = rcvNS, sndNS
	}
	in0, udp0, err := receiverStats(bed, rcvNS)
	if err != nil {
		return s, nil, err
	}
	win, err := cost.Start(fws.Pids()...)
	if err != nil {
		return s, nil, err
	}
	tr := trace.Start(ctx, trace.Targets{Bed: bed, Forwarders: fws.Pids(), TAP: tap, Sender: sndNS, Receiver: rcvNS})
	res, runErr := iperf.Run(ctx, bed, w.Iperf(o.Duration, o.Omit))
	spent, err := win.Stop()
	run := tr.Stop(res.Raw)
	s.Trace = &run
	if ctx.Err() != nil {
		return s, nil, ctx.Err()
	}
	if err != nil || runErr != nil {
		return s, runErr, err
	}
	s.Value, s.Retransmits = res.BitsPerSecond/1e9, res.Retransmits
	s.SenderCPU, s.ReceiverCPU, s.LossPercent = res.SenderCPU, res.ReceiverCPU, res.LostPercent
	if w.Unit == Kpps {
		s.Value = res.BitsPerSecond / 8 / float64(w.Len) / 1e3
	}
	in1, udp1, err := receiverStats(bed, rcvNS)
	if err != nil {
		return s, nil, err
	}
	if w.Proto == "udp" {
		s.RcvbufPercent = procfs.RcvbufPercent(udp0, udp1)
	}
	s.setCost(w, spent, in1.Sub(in0), fws.Len() > 0)
	return s, nil, nil
}

// Prepare sets bed up for w (with WireMTU: TSO and GSO off on the
// wire's veth); undo puts it back.
func (w Workload) Prepare(ctx context.Context, bed *testbed.Bed) (undo func(), err error) {
	if !w.WireMTU {
		return func() {}, nil
	}
	if _, err := bed.Run(ctx, bed.WireNS, "ethtool", "-K", bed.WireIf, "tso", "off", "gso", "off"); err != nil {
		return nil, fmt.Errorf("turning TSO/GSO off on the wire: %w", err)
	}
	return func() {
		bed.Run(context.Background(), bed.WireNS, "ethtool", "-K", bed.WireIf, "tso", "on", "gso", "on")
	}, nil
}

// Iperf is w's iperf3 run: d measured after omit left out.
func (w Workload) Iperf(d, omit time.Duration) iperf.Options {
	return iperf.Options{Duration: d, Omit: omit, Len: w.Len, Streams: w.Streams,
		Reverse: w.Direction == LabToWire, UDP: w.Proto == "udp", Bitrate: bitrate(w), Pin: w.pin()}
}

// pin is where w's iperf3 processes are pinned; nil for the scheduler.
func (w Workload) pin() *iperf.Pinning {
	if w.Placement == nil {
		return nil
	}
	return w.Placement.Iperf
}

// tcpHeaderBytes is what IpExt InOctets counts beyond the payload of each
// TCP packet: a 20-byte IPv4 header and a 32-byte TCP header (20 and the
// timestamp option, which Linux puts on every segment by default).
const tcpHeaderBytes = 52

// setCost divides what the run spent by what the receiving namespace took
// in over the same window (the whole iperf3 run, its omitted start
// included): gigabits of TCP payload (IP bytes less the headers of each
// packet) or millions of UDP datagrams queued to the socket.
func (s *sample) setCost(w Workload, spent cost.Spent, in procfs.Received, forwarder bool) {
	units := float64(in.IPOctets-tcpHeaderBytes*in.IPPackets) * 8 / 1e9
	gbit := units
	if w.Proto == "udp" {
		units = float64(in.UDPDatagrams) / 1e6
		gbit = float64(in.UDPDatagrams) * float64(w.Len) * 8 / 1e9
	}
	s.Cost, s.HasCost = spent.Per(units)
	if forwarder && gbit > 0 {
		s.FwdCPUPerGbit = spent.Process.Seconds() / gbit
	}
}

// Cost units: CPU seconds per gigabit of TCP payload delivered, or per
// million UDP datagrams delivered.
const (
	PerGbit = "s/Gbit"
	PerMpkt = "s/Mpkt"
)

// CostUnit is the unit of w's cost figures.
func (w Workload) CostUnit() string {
	if w.Proto == "udp" {
		return PerMpkt
	}
	return PerGbit
}

func bitrate(w Workload) string {
	if w.Proto == "udp" {
		return "0" // unlimited: as many datagrams as the sender can write
	}
	return ""
}

// udpStats reads the UDP receive counters of namespace ns.
func udpStats(b *testbed.Bed, ns string) (procfs.UDP, error) {
	var u procfs.UDP
	err := b.Do(ns, func() (err error) {
		u, err = procfs.ReadUDP()
		return err
	})
	return u, err
}

// receiverStats reads what namespace ns took in, and its UDP receive
// counters.
func receiverStats(b *testbed.Bed, ns string) (in procfs.Received, u procfs.UDP, err error) {
	if u, err = udpStats(b, ns); err != nil {
		return in, u, err
	}
	err = b.Do(ns, func() (err error) {
		in, err = procfs.ReadReceived()
		return err
	})
	return in, u, err
}
