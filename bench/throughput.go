package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/tapfwd/tapfwd/bench/iperf"
	"github.com/tapfwd/tapfwd/bench/testbed"
)

// ThroughputOptions configure Throughput.
type ThroughputOptions struct {
	Exe      string        // tapfwd binary, started as `tapfwd run` in the bed
	Args     []string      // extra `tapfwd run` flags
	Duration time.Duration // per iperf3 run; 0 means 5 s
	Reps     int           // repetitions per configuration; 0 means 3
	Streams  int           // iperf3 -P; 0 means 1
	Progress io.Writer     // one line per run; nil for none
}

// Direction names.
const (
	WireToLab = "wire->lab"
	LabToWire = "lab->wire"
)

// Result holds the repetitions of one configuration in one direction.
type Result struct {
	Config    string    `json:"config"`
	Direction string    `json:"direction"`
	Gbps      []float64 `json:"gbps"`
	Median    float64   `json:"median_gbps"`
}

// ThroughputReport is the outcome of Throughput.
type ThroughputReport struct {
	Results []Result `json:"results"`
}

// Find returns the result for config and direction.
func (r *ThroughputReport) Find(config, dir string) *Result {
	for i := range r.Results {
		if r.Results[i].Config == config && r.Results[i].Direction == dir {
			return &r.Results[i]
		}
	}
	return nil
}

// Throughput measures single-configuration TCP throughput through tapfwd and
// through the Linux bridge in the same topology, interleaved (one
// repetition of each before the next), on a fresh bed per run.
func Throughput(ctx context.Context, o ThroughputOptions) (*ThroughputReport, error) {
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Reps <= 0 {
		o.Reps = 3
	}
	if o.Streams <= 0 {
		o.Streams = 1
	}
	configs := []struct {
		name string
		mode testbed.Mode
	}{{"tapfwd", testbed.Forwarder}, {"bridge", testbed.Bridge}}
	rep := &ThroughputReport{}
	for _, c := range configs {
		for _, d := range []string{WireToLab, LabToWire} {
			rep.Results = append(rep.Results, Result{Config: c.name, Direction: d})
		}
	}
	for r := 0; r < o.Reps; r++ {
		for i := range configs {
			// Alternate which configuration goes first: A B B A ...
			c := configs[(i+r)%len(configs)]
			for _, d := range []string{WireToLab, LabToWire} {
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "rep %d/%d  %-7s %s ...\n", r+1, o.Reps, c.name, d)
				}
				bps, err := runOnce(ctx, c.mode, o, d == LabToWire)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", c.name, d, err)
				}
				res := rep.Find(c.name, d)
				res.Gbps = append(res.Gbps, bps/1e9)
			}
		}
	}
	for i := range rep.Results {
		rep.Results[i].Median = median(rep.Results[i].Gbps)
	}
	return rep, nil
}

func runOnce(ctx context.Context, mode testbed.Mode, o ThroughputOptions, reverse bool) (float64, error) {
	bed, err := testbed.New(ctx, testbed.Config{Mode: mode})
	if err != nil {
		return 0, err
	}
	defer bed.Close()
	if mode == testbed.Forwarder {
		fw, err := StartForwarder(ctx, bed, o.Exe, o.Args...)
		if err != nil {
			return 0, err
		}
		defer fw.Stop()
	} else if err := bed.WaitLabReachable(ctx, 10*time.Second); err != nil {
		return 0, err
	}
	res, err := iperf.Run(ctx, bed, iperf.Options{Duration: o.Duration, Streams: o.Streams, Reverse: reverse})
	if err != nil {
		return 0, err
	}
	return res.BitsPerSecond, nil
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteTable prints the medians side by side with the tapfwd/bridge ratio.
func (r *ThroughputReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%-10s %14s %14s %7s\n", "direction", "tapfwd Gbit/s", "bridge Gbit/s", "ratio")
	for _, d := range []string{WireToLab, LabToWire} {
		t, b := r.Find("tapfwd", d), r.Find("bridge", d)
		ratio := 0.0
		if b.Median > 0 {
			ratio = t.Median / b.Median
		}
		fmt.Fprintf(w, "%-10s %14.2f %14.2f %7.2f\n", d, t.Median, b.Median, ratio)
	}
}
