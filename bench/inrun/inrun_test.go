package inrun

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/abrun"
	"github.com/tapfwd/tapfwd/bench/stats"
)

// fakeRuns are k runs of pair on row with effect (B/A) eff and a small
// spread from run to run: arm A delivers 1e9 bytes a second, arm B eff
// times that, each bin at its nominal length, the CPU of every role one
// per second.
func fakeRuns(pair, row string, k int, eff float64, cost bool) []abrun.Record {
	var runs []abrun.Record
	for i := range k {
		arms := stats.ABSchedule(uint64(i+1), 40)
		e := eff * (1 + 0.002*float64(i%3-1))
		n := len(arms)
		r := abrun.Record{Pair: pair, Row: row, Rep: i + 1, Cost: cost,
			Windows: make([]stats.ABWindow, n), Switched: make([]bool, n), Retrans: make([]int64, n), OFO: make([]int64, n)}
		for j, arm := range arms {
			rate := [2]float64{1e9, 1e9 * e}[arm]
			r.Windows[j].Arm = arm
			for b := range stats.ABBins {
				d := 20 * time.Millisecond
				if b == stats.ABBins-1 {
					d = abrun.Window - 40*time.Millisecond
				}
				r.Windows[j].Bins[b] = stats.ABBin{Seconds: d.Seconds(), Bytes: rate * d.Seconds(), Frames: rate * d.Seconds() / 100,
					CPU: float64(len(abrun.RoleCPU{})) * d.Seconds()}
			}
			r.Switched[j] = j > 0 && arms[j-1] != arm
		}
		runs = append(runs, r)
	}
	return runs
}

func TestReport(t *testing.T) {
	o := Options{Rows: OneRow(nil), Pairs: []string{PairOn}, Delay: DefaultDelay, KthreadCPU: -1}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	e := &experiment{o: o}
	for _, p := range pairDefs(o.Delay) {
		if p.name != PairThreaded {
			e.pairs = append(e.pairs, p)
		}
	}
	row := o.Rows[0].Name
	e.runs = append(e.runs, fakeRuns(PairOn, row, 5, 1.0, false)...)
	e.runs = append(e.runs, fakeRuns(PairAA, row, 5, 1.0, false)...)
	e.runs = append(e.runs, fakeRuns(PairControl, row, 5, 0.6, false)...)
	e.setups = []Setup{{Instance: instNAPI, Kthreads: 0, Want: 0}, {Instance: instPlain, Kthreads: 0, Want: 0}}
	r := newReport(o)
	r.finish(e)
	if got, of := r.Verdicts(); got != 1 || of != 1 {
		t.Errorf("verdicts %d of %d; want 1 of 1", got, of)
	}
	if !r.Checks.AACovers0 || !r.Checks.ControlDetected || !r.Checks.SetupsOK || r.Checks.GuardsAgree != 1 {
		t.Errorf("checks = %+v", r.Checks)
	}
	if !strings.Contains(r.Answer, "IFF_NAPI against IFF_NAPI off, TCP 64B writes, 1 stream, wire->lab: tapfwd's throughput equivalent") {
		t.Errorf("answer = %q", r.Answer)
	}
	var c Comparison
	for _, c = range r.Comparisons {
		if c.A == PairControl {
			break
		}
	}
	// The columns come from the effect: B is A times the ratio.
	if math.Abs(c.ChangedFigure/c.BaselineFigure-c.Ratio.Median) > 1e-9 || c.Percent.Median > -39 || c.Percent.Median < -41 {
		t.Errorf("control: A %v, B %v, effect %v", c.BaselineFigure, c.ChangedFigure, c.Percent)
	}
	var text bytes.Buffer
	if err := r.Document().WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Answer: IFF_NAPI", "1 of 1 throughput comparisons got a verdict", "control (check)", "Guards:", "ABBA/BAAB"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
}

func TestRowWords(t *testing.T) {
	for in, want := range map[string]string{
		"tcp-64B-P1-w2l": "TCP 64B writes, 1 stream, wire->lab",
		"tcp-4KB-P4-w2l": "TCP 4KB writes, 4 streams, wire->lab",
		"odd":            "odd",
	} {
		if got := rowWords(in); got != want {
			t.Errorf("rowWords(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestSeedRowsPlacement(t *testing.T) {
	rows := SeedRows([]int{0, 1})
	if len(rows) != 6 {
		t.Fatalf("%d seed rows; want 6", len(rows))
	}
	for _, w := range rows {
		if p := w.Placement.Iperf; p.Wire != 1 || p.Lab != 1 {
			t.Errorf("%s: client %d server %d; want both away from the worker, on 1", w.Name, p.Wire, p.Lab)
		}
	}
}

// TestRunEstimates checks that a comparison's estimates come from its own
// finished runs alone: not from its pair's runs of the other observable,
// another row's, or a run that failed.
func TestRunEstimates(t *testing.T) {
	runs := fakeRuns(PairOn, "r1", 3, 1.1, false)
	runs = append(runs, fakeRuns(PairOn, "r1", 2, 2, true)...)
	runs = append(runs, fakeRuns(PairOn, "r2", 2, 2, false)...)
	failed := fakeRuns(PairOn, "r1", 1, 2, false)
	failed[0].Err = "iperf3: connection refused"
	runs = append(runs, failed...)
	d := runEstimates(runs, key{Pair: PairOn, Row: "r1"}, guardHeadline)
	if len(d) != 3 {
		t.Fatalf("%d estimates, want the 3 finished throughput runs of r1: %v", len(d), d)
	}
	for _, v := range d {
		if math.Abs(v-math.Log(1.1)) > 0.01 {
			t.Errorf("estimate %v, want about log(1.1) = %v", v, math.Log(1.1))
		}
	}
	if c := runEstimates(runs, key{Pair: PairOn, Row: "r1", Cost: true}, guardHeadline); len(c) != 2 {
		t.Errorf("%d cost estimates, want 2", len(c))
	}
}
