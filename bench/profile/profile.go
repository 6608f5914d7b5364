package profile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/cpuprofile"
	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/rr"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/bench/trace"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Options configure Run.
type Options struct {
	// Lab names the binaries; Lab.Topology must be the one-host bed.
	Lab matrix.Lab
	// Configs to profile; their tapfwd runs with its profiler on
	// (forwarder.Options.PProf).
	Configs []report.Config
	// Workloads, each profiled under every configuration.
	Workloads []Workload
	// Window is how long each profile samples; Warmup how long iperf3
	// runs before it (slow start, the first scheduling of a fresh path).
	Window, Warmup time.Duration
	// Top is how many functions the top lists keep.
	Top int
	// Perf, when set, also samples the kernel (ProbePerf).
	Perf *cpuprofile.Perf
	// Dir, when set, keeps the raw profiles there: CONFIG-WORKLOAD.pprof
	// (go tool pprof) and CONFIG-WORKLOAD.perf.data (perf report -i).
	Dir string
	// TUNFeatures and TapfwdFlags skip what the kernel or the tapfwd
	// binary cannot do (matrix.CheckKernel, matrix.CheckFlags).
	TUNFeatures uint32
	TapfwdFlags map[string]bool
	Progress    func(matrix.Progress)
	Log         *slog.Logger
}

// tail is how long iperf3 runs on after a window: the profiler's answer
// may come a little after the window ends.
const tail = 3 * time.Second

// Run profiles every workload under every configuration, one fresh bed
// each, the configurations of a workload in turn. A configuration the
// kernel or the binary cannot do is skipped with the reason; a failed
// profile is recorded in its result. When ctx ends, everything started
// is stopped and removed, and the error wraps matrix.ErrInterrupted.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Lab.Log = o.Log
	if o.Lab.Topology == matrix.VXLAN || len(o.Configs) == 0 || len(o.Workloads) == 0 || o.Window < time.Second {
		return nil, errors.New("profile: want the one-host bed, a configuration, a workload and a window of at least 1 s")
	}
	r := &Report{Header: report.Header{Schema: Schema, Started: time.Now().UTC(), Host: matrix.ProbeHost(o.TUNFeatures, true)},
		WindowSeconds: o.Window.Seconds(), WarmupSeconds: o.Warmup.Seconds(), Workloads: o.Workloads}
	if o.Perf != nil {
		r.Perf = o.Perf.Note
	}
	for _, c := range o.Configs {
		if c.Kind == report.KindTapfwd {
			c.Run.PProf = true
			c.Args = c.Run.Args()
		}
		if matrix.CheckKernel(&c, o.TUNFeatures) && matrix.CheckFlags(&c, o.TapfwdFlags) {
			r.Configs = append(r.Configs, c)
		} else {
			r.Skipped = append(r.Skipped, c)
		}
	}
	m := matrix.NewMeter(o.Progress, len(r.Configs)*len(o.Workloads), 1, o.Warmup+o.Window+tail+5*time.Second)
	for _, w := range o.Workloads {
		for i := range r.Configs {
			c := &r.Configs[i]
			m.Step(c.Name, 1, w.Name)
			res := o.one(ctx, c, w)
			if ctx.Err() != nil {
				return nil, matrix.Interrupted(ctx)
			}
			m.Done()
			r.Results = append(r.Results, res)
		}
	}
	r.Finished = time.Now().UTC()
	return r, nil
}

// one profiles w under c on a fresh bed.
func (o Options) one(ctx context.Context, c *report.Config, w Workload) Result {
	res := Result{Config: c.Name, Workload: w.Name, Unit: w.Unit}
	err := o.Lab.Visit(ctx, c, 1, func(bed *testbed.Bed, fws matrix.Forwarders) error {
		undo, err := w.Prepare(ctx, bed)
		if err != nil {
			return err
		}
		defer undo()
		done := make(chan error, 1)
		own := new(rrThreads)
		go func() { done <- load(ctx, bed, w, o.Warmup+o.Window+tail, &res, own) }()
		select {
		case err := <-done:
			return fmt.Errorf("the load ended before the window: %v", err)
		case <-ctx.Done():
			<-done
			return ctx.Err()
		case <-time.After(o.Warmup):
		}
		o.window(ctx, &res, c, w, bed, fws, own.get())
		return <-done
	})
	if err != nil {
		res.Err = matrix.ErrLine(err)
		o.Log.Warn("profile failed", "config", c.Name, "workload", w.Name, "err", err)
	}
	return res
}

// window takes the profiles of one window while iperf3 runs, and what
// the machine and tapfwd's counters did over it: from the snapshot
// before the profilers start to the one o.Window later (the profilers'
// answers come after).
func (o Options) window(ctx context.Context, res *Result, c *report.Config, w Workload, bed *testbed.Bed, fws matrix.Forwarders, own map[int]string) {
	tapfwd := c.Kind == report.KindTapfwd
	snd, rcv := bed.WireNS, bed.LabNS
	if w.Direction == throughput.LabToWire {
		snd, rcv = rcv, snd
	}
	tap := ""
	client := nsClient(bed, bed.FwdNS)
	var m0 metrics
	if tapfwd {
		tap = bed.LabIf
		m0 = res.scrape(ctx, client)
	}
	s0, err0 := takeSnapshot(fws.Pids())
	tr := trace.Start(ctx, trace.Targets{Bed: bed, Forwarders: fws.Pids(), TAP: tap, Sender: snd, Receiver: rcv, Own: own})
	end := time.After(o.Window)
	// The Go profile and perf sample the same window, side by side.
	var goErr, perfErr error
	goDone, perfDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(goDone)
		if tapfwd {
			res.Go, goErr = o.goProfile(ctx, client, c, w)
		}
	}()
	perfFile, cleanup := o.perfFile(c, w)
	defer cleanup()
	go func() {
		defer close(perfDone)
		if perfFile != "" {
			perfErr = o.Perf.Record(ctx, perfFile, o.Window)
		}
	}()
	select {
	case <-end:
	case <-ctx.Done():
	}
	s1, err1 := takeSnapshot(fws.Pids())
	run := tr.Stop(nil)
	res.Trace = &run
	res.WindowSeconds = s1.at.Sub(s0.at).Seconds()
	if err := errors.Join(err0, err1); err != nil {
		res.note("machine: %v", err)
	} else {
		res.CPUs, res.Threads = machine(s0, s1)
	}
	if tapfwd {
		res.Batches = batches(m0, res.scrape(ctx, client), bed.NIC, tap)
	}
	<-goDone
	<-perfDone
	for _, err := range []error{goErr, perfErr} {
		if err != nil {
			res.note("%v", err)
		}
	}
	if perfFile != "" && perfErr == nil {
		var err error
		if res.Kernel, err = o.kernelView(ctx, perfFile, ownThreads(s1, run), res.WindowSeconds); err != nil {
			res.note("%v", err)
		}
	}
}

// ownThreads are the threads of the run's tapfwd (TaskTapfwd, its
// busy-poll thread included) and of its load (TaskIperf: iperf3, or rr's
// threads in this process).
func ownThreads(s snapshot, run trace.Run) map[int]string {
	own := map[int]string{}
	for tid, t := range s.threads {
		if strings.HasPrefix(t.role, "tapfwd") {
			own[tid] = cpuprofile.TaskTapfwd
		}
	}
	for _, t := range run.Threads {
		switch t.Role {
		case trace.Client, trace.Server, rr.Sender, rr.Receiver, rr.Echo:
			own[t.TID] = cpuprofile.TaskIperf
		}
	}
	return own
}

// scrape reads tapfwd's metrics; empty (with a note) when it cannot.
func (res *Result) scrape(ctx context.Context, c *http.Client) metrics {
	b, err := get(ctx, c, "http://"+forwarder.MetricsAddr+"/metrics", 10*time.Second)
	if err != nil {
		res.note("metrics: %v", err)
		return metrics{}
	}
	m, err := parseMetrics(string(b))
	if err != nil {
		res.note("metrics: %v", err)
	}
	return m
}

func (res *Result) note(format string, a ...any) {
	res.Notes = append(res.Notes, fmt.Sprintf(format, a...))
}

// rawPath is where the raw profile of c on w is kept, with ext; empty
// without a Dir.
func (o Options) rawPath(c *report.Config, w Workload, ext string) string {
	if o.Dir == "" {
		return ""
	}
	return filepath.Join(o.Dir, c.Name+"-"+w.Name+ext)
}

// goProfile fetches tapfwd's CPU profile over the window; with an
// error, what it has (the view, when only keeping the file failed).
func (o Options) goProfile(ctx context.Context, client *http.Client, c *report.Config, w Workload) (*GoView, error) {
	secs := int(o.Window.Round(time.Second).Seconds())
	b, err := get(ctx, client, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", forwarder.MetricsAddr, secs), o.Window+20*time.Second)
	if err != nil {
		return nil, fmt.Errorf("tapfwd's Go profile: %w", err)
	}
	p, err := cpuprofile.ParsePprof(b)
	if err != nil {
		return nil, fmt.Errorf("tapfwd's Go profile: %w", err)
	}
	v := &GoView{CPUSeconds: p.Total().Seconds(), Shares: cpuprofile.GoShares(p), Top: p.Top(o.Top), Syscalls: cpuprofile.SyscallSites(p, o.Top)}
	if path := o.rawPath(c, w, ".pprof"); path != "" {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return v, fmt.Errorf("keeping the Go profile: %w", err)
		}
		v.File = filepath.Base(path)
	}
	return v, nil
}

// perfFile is where perf records c on w: in Dir, else in a temporary
// directory that cleanup removes; empty without perf, or when it cannot
// be made.
func (o Options) perfFile(c *report.Config, w Workload) (path string, cleanup func()) {
	if o.Perf == nil {
		return "", func() {}
	}
	if path := o.rawPath(c, w, ".perf.data"); path != "" {
		return path, func() {}
	}
	dir, err := os.MkdirTemp("", "tapfwd-perf")
	if err != nil {
		return "", func() {}
	}
	return filepath.Join(dir, "perf.data"), func() { os.RemoveAll(dir) }
}

// kernelView reads perf's samples of a window of seconds.
func (o Options) kernelView(ctx context.Context, file string, own map[int]string, seconds float64) (*cpuprofile.KernelView, error) {
	samples, err := o.Perf.Samples(ctx, file)
	if err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	v := cpuprofile.KernelSummary(samples, own, seconds, o.Top)
	if o.Dir != "" {
		v.File = filepath.Base(file)
	}
	return v, nil
}
