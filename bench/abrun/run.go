package abrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Window is the length of one arm's turn, and binEdges where its bins
// begin after the switch (stats.ABGuards).
const Window = 100 * time.Millisecond

// Record is one run of one pair on one row: the windows in the order they
// ran, and what the run did besides.
type Record struct {
	Pair string `json:"pair"`
	Row  string `json:"row"`
	Rep  int    `json:"rep"`
	// Cost says whether the run offered a fixed rate (RateGbit) for the
	// cost observable, rather than as much as iperf3 could send.
	Cost     bool    `json:"cost,omitempty"`
	RateGbit float64 `json:"offered_gbit,omitempty"`
	Seed     uint64  `json:"seed"`
	// Swapped says arm B was on TAP queue 0 and arm A on queue 1.
	Swapped bool `json:"swapped,omitempty"`
	// Windows are the run's windows with their bins.
	Windows []stats.ABWindow `json:"windows"`
	// Switched[i] says whether window i followed a window of the other
	// arm; Retrans and OFO are the sender's retransmitted segments and
	// the receiver's out-of-order queueings in window i.
	Switched []bool  `json:"switched"`
	Retrans  []int64 `json:"retrans"`
	OFO      []int64 `json:"ofo"`
	// ArmCPU is the CPU-seconds of each role in each arm's windows (A,
	// then B), every bin counted.
	ArmCPU [2]RoleCPU `json:"arm_cpu"`
	// Seconds is the windows' length; Busy the machine's busy CPU-seconds
	// over it (/proc/stat) and Own the run's own threads'; Background is
	// (Busy - Own) / Seconds, in CPUs.
	Seconds    float64 `json:"seconds"`
	Busy       float64 `json:"busy_cpu_seconds"`
	Own        float64 `json:"own_cpu_seconds"`
	Background float64 `json:"background_cpus"`
	// Flagged says whether Background passed Options.BackgroundLimit.
	Flagged bool `json:"flagged,omitempty"`
	// Started and Finished bound the run, iperf3's start to its end.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Iperf3's own figures for the whole run (both arms).
	Gbit        float64 `json:"iperf_gbit"`
	Retransmits int     `json:"iperf_retransmits"`
	Err         string  `json:"error,omitempty"`
}

// Spec is what one run needs: the bed and its tapfwd, the control
// FIFO, the pair's control bytes, the workload and its timing.
type Spec struct {
	Bed      *testbed.Bed
	Tapfwd   int
	Ctl      *os.File
	Kthreads []int
	Arms     [2]byte
	Workload throughput.Workload
	Windows  int
	Omit     time.Duration
	Seed     uint64
	Rate     float64 // offered Gbit/s in all; 0: unlimited
	Swapped  bool    // arm B on queue 0
}

// Measure makes one run: iperf3 runs for the omitted start, the windows
// and a short tail (whole seconds: what they add up to, rounded up);
// once past the omitted start, the bench switches
// the arms on the schedule and reads the probe at each window's bins.
func Measure(ctx context.Context, s Spec) (r Record, err error) {
	r = Record{Seed: s.Seed, Cost: s.Rate > 0, RateGbit: s.Rate, Started: time.Now().UTC()}
	defer func() { r.Finished = time.Now().UTC() }()
	pids := make(chan [2]int, 1)
	opt := s.Workload.Iperf(s.Omit+time.Duration(s.Windows)*Window+300*time.Millisecond, 0)
	if s.Rate > 0 {
		opt.Bitrate = fmt.Sprintf("%.0f", s.Rate*1e9/float64(max(s.Workload.Streams, 1)))
	}
	opt.Started = func(server, client int) { pids <- [2]int{server, client} }
	type result struct {
		res iperf.Result
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		res, err := iperf.Run(ctx, s.Bed, opt)
		done <- result{res, err}
	}()
	var p [2]int
	select {
	case p = <-pids:
	case d := <-done:
		return r, fmt.Errorf("iperf3 did not start: %w", d.err)
	}
	werr := s.windowsOf(ctx, &r, p[0], p[1])
	d := <-done
	if err := errors.Join(werr, d.err); err != nil {
		return r, err
	}
	r.Gbit, r.Retransmits = d.res.BitsPerSecond/1e9, d.res.Retransmits
	return r, nil
}

// windowsOf waits out the omitted start, then runs the schedule and
// fills r's windows.
func (s Spec) windowsOf(ctx context.Context, r *Record, server, client int) error {
	pr, err := newProbe(s.Bed.LabIf, s.Workload.Direction != throughput.LabToWire, s.Tapfwd, server, client, s.Kthreads)
	if err != nil {
		return err
	}
	defer pr.close()
	if err := sleepCtx(ctx, s.Omit); err != nil {
		return err
	}
	defer s.switchTo(0)
	pr.rescan()
	arms := stats.ABSchedule(s.Seed, s.Windows)
	m0, _ := procfs.ReadCPUTimes()
	samples, tcp, err := s.schedule(ctx, pr, arms)
	m1, _ := procfs.ReadCPUTimes()
	if err != nil {
		return err
	}
	r.fill(arms, samples, tcp)
	r.Busy = busySeconds(m1.Sub(m0))
	r.Background = (r.Busy - r.Own) / r.Seconds
	return nil
}

// schedule switches the arms window by window and samples the probe at
// each bin's start: samples[i*ABBins+b] opens bin b of window i, and the
// last sample closes the last window.
func (s Spec) schedule(ctx context.Context, pr *probe, arms []int) ([]sample, []tcpSample, error) {
	samples := make([]sample, 0, len(arms)*stats.ABBins+1)
	tcp := make([]tcpSample, 0, len(arms)+1)
	t0 := time.Now()
	for i, arm := range arms {
		start := t0.Add(time.Duration(i) * Window)
		if err := sleepUntil(ctx, start); err != nil {
			return nil, nil, err
		}
		if err := s.switchTo(s.Arms[arm]); err != nil {
			return nil, nil, err
		}
		for b := range stats.ABBins {
			if err := sleepUntil(ctx, start.Add(stats.ABGuards[b])); err != nil {
				return nil, nil, err
			}
			smp, err := pr.read()
			if err != nil {
				return nil, nil, err
			}
			samples = append(samples, smp)
		}
		tcp = append(tcp, pr.tcp())
		if i%10 == 9 {
			pr.rescan()
		}
	}
	if err := sleepUntil(ctx, t0.Add(time.Duration(len(arms))*Window)); err != nil {
		return nil, nil, err
	}
	last, err := pr.read()
	tcp = append(tcp, pr.tcp())
	return append(samples, last), tcp, err
}

// switchTo writes control byte b to tapfwd.
func (s Spec) switchTo(b byte) error {
	if _, err := s.Ctl.Write([]byte{b}); err != nil {
		return fmt.Errorf("inrun: switching tapfwd's arm: %w", err)
	}
	return nil
}

// fill turns the samples into r's windows and tallies.
func (r *Record) fill(arms []int, samples []sample, tcp []tcpSample) {
	r.Windows = make([]stats.ABWindow, len(arms))
	r.Switched = make([]bool, len(arms))
	r.Retrans = make([]int64, len(arms))
	r.OFO = make([]int64, len(arms))
	for i, arm := range arms {
		w := &r.Windows[i]
		w.Arm = arm
		for b := range stats.ABBins {
			from, to := samples[i*stats.ABBins+b], samples[i*stats.ABBins+b+1]
			cpu := to.cpu.sub(from.cpu)
			w.Bins[b] = stats.ABBin{Seconds: (to.at - from.at).Seconds(), Bytes: float64(to.bytes - from.bytes),
				Frames: float64(to.frames - from.frames), CPU: cpu.Total()}
			for k, v := range cpu {
				r.ArmCPU[arm][k] += v
			}
		}
		r.Switched[i] = i > 0 && arms[i-1] != arm
		r.Retrans[i] = tcp[i+1].retrans - tcp[i].retrans
		r.OFO[i] = tcp[i+1].ofo - tcp[i].ofo
	}
	first, last := samples[0], samples[len(samples)-1]
	r.Seconds = (last.at - first.at).Seconds()
	r.Own = last.cpu.sub(first.cpu).Total()
}

// busySeconds is the CPU time of d that was not idle.
func busySeconds(d procfs.CPUTimes) float64 {
	return (d.User + d.Nice + d.System + d.IRQ + d.SoftIRQ).Seconds()
}

func sleepUntil(ctx context.Context, t time.Time) error {
	return sleepCtx(ctx, time.Until(t))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
