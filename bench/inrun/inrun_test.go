package inrun

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/stats"
)

const netDev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
tfwtap-a1b2c3: 123456789  4567    0    3    0     0          0         0   987654    321    0    0    0     0       0          0
`

func TestDevCounters(t *testing.T) {
	b, p, err := devCounters([]byte(netDev), "tfwtap-a1b2c3", true)
	if err != nil || b != 123456789 || p != 4567 {
		t.Errorf("rx = %d, %d, %v; want 123456789, 4567", b, p, err)
	}
	b, p, err = devCounters([]byte(netDev), "tfwtap-a1b2c3", false)
	if err != nil || b != 987654 || p != 321 {
		t.Errorf("tx = %d, %d, %v; want 987654, 321", b, p, err)
	}
	if _, _, err := devCounters([]byte(netDev), "tfwtap-a1b2c", true); err == nil {
		t.Error("a name that is only a prefix of a device was found")
	}
	if _, _, err := devCounters([]byte("x: 1 2\n"), "x", true); err == nil {
		t.Error("a short line gave no error")
	}
}

func TestFirstInt(t *testing.T) {
	for in, want := range map[string]int64{"123 456 7\n": 123, "0": 0, "98765432101234 1 1": 98765432101234} {
		if v, ok := firstInt([]byte(in)); !ok || v != want {
			t.Errorf("firstInt(%q) = %d, %v; want %d", in, v, ok, want)
		}
	}
	if _, ok := firstInt([]byte(" 1")); ok {
		t.Error("a leading space parsed")
	}
}

// samplesFor makes the samples of windows whose arms are arms: arm A
// delivers rateA bytes a second, arm B rateB, each bin at its nominal
// length, the CPU of every role one per second.
func samplesFor(arms []int, rateA, rateB float64) []sample {
	var out []sample
	var at time.Duration
	var bytesN float64
	var cpu RoleCPU
	add := func() {
		out = append(out, sample{at: at, bytes: uint64(bytesN), frames: uint64(bytesN / 100), cpu: cpu})
	}
	for _, arm := range arms {
		for b := range stats.ABBins {
			add()
			d := 20 * time.Millisecond
			if b == stats.ABBins-1 {
				d = Window - 40*time.Millisecond
			}
			rate := rateA
			if arm == 1 {
				rate = rateB
			}
			at += d
			bytesN += rate * d.Seconds()
			for i := range cpu {
				cpu[i] += d.Seconds()
			}
		}
	}
	add()
	return out
}

func TestFill(t *testing.T) {
	arms := stats.ABSchedule(7, 8)
	smp := samplesFor(arms, 1e9, 1.2e9)
	tcp := make([]tcpSample, len(arms)+1)
	for i := range tcp {
		tcp[i] = tcpSample{retrans: int64(3 * i), ofo: int64(i)}
	}
	var r Record
	r.fill(arms, smp, tcp)
	if len(r.Windows) != 8 || r.Seconds < 0.79 || r.Seconds > 0.81 {
		t.Fatalf("%d windows over %.3f s; want 8 over 0.8", len(r.Windows), r.Seconds)
	}
	d, ok := stats.RunEffect(r.Windows, guardHeadline)
	if !ok || math.Abs(math.Exp(d)-1.2) > 1e-6 {
		t.Errorf("effect = %v (%v); want log 1.2", math.Exp(d), ok)
	}
	for i := range arms {
		if r.Retrans[i] != 3 || r.OFO[i] != 1 || r.Switched[i] != (i > 0 && arms[i-1] != arms[i]) {
			t.Fatalf("window %d: retrans %d ofo %d switched %v", i, r.Retrans[i], r.OFO[i], r.Switched[i])
		}
	}
	if got := r.Own; math.Abs(got-float64(nRoles)*0.8) > 1e-9 {
		t.Errorf("own CPU = %v; want %v", got, float64(nRoles)*0.8)
	}
	if a, b := r.ArmCPU[0][RoleTapfwd], r.ArmCPU[1][RoleTapfwd]; math.Abs(a-0.4) > 1e-9 || math.Abs(b-0.4) > 1e-9 {
		t.Errorf("tapfwd's CPU by arm = %v, %v; want 0.4 each (ABBA: half the windows each)", a, b)
	}
}

// fakeRuns are k runs of pair on row with effect (B/A) eff and a small
// spread from run to run.
func fakeRuns(pair, row string, k int, eff float64, cost bool) []Record {
	var runs []Record
	for i := range k {
		arms := stats.ABSchedule(uint64(i+1), 40)
		e := eff * (1 + 0.002*float64(i%3-1))
		var r Record
		r.fill(arms, samplesFor(arms, 1e9, 1e9*e), make([]tcpSample, len(arms)+1))
		r.Pair, r.Row, r.Rep, r.Cost = pair, row, i+1, cost
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
