package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/abrun"
	"github.com/tapfwd/tapfwd/bench/inrun"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestBenchNAPI runs `tapfwd-bench napi` short (3 runs of 1.2 s per
// comparison, the threaded pair too) against the real tapfwd and checks
// what the report must carry: every comparison with its interval and its
// guards, both arms delivering in every run, the positive control
// detected (1 ms per 1,500 bytes: a cap of 12 Mbit/s, under what the
// row delivers however loaded the machine; 200 us, a cap of 60 Mbit/s,
// went undetected under CI's parallel packages, whose load kept the row
// below it), the kernel's view of the queues (no NAPI kthread without
// threaded NAPI, exactly one with it, fed in arm B's windows), the
// background load measured, and the answer in one sentence.
func TestBenchNAPI(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	stdout, stderr := runBench(t, 5*time.Minute, "napi", "--json", "--threaded", "--windows", "12", "--reps", "3", "--omit", "0s", "--budget", "1s", "--delay", "1ms")
	var r inrun.Report
	decodeReport(t, stdout, &r)
	if r.Schema != inrun.Schema || r.Settings.StoppedBy == "" || !strings.Contains(stderr, "rep 3") {
		t.Errorf("schema %q, stopped by %q; stderr:\n%s", r.Schema, r.Settings.StoppedBy, stderr)
	}
	want := map[string]bool{}
	for _, p := range []string{inrun.PairOn, inrun.PairThreaded, inrun.PairAA, inrun.PairControl} {
		want[p+" "+inrun.Throughput], want[p+" "+inrun.Cost] = true, true
	}
	for _, c := range r.Comparisons {
		delete(want, c.A+" "+c.Observable)
		if c.Runs < 3 || len(c.Guards) != stats.ABBins || c.B != inrun.Baseline || c.BaselineFigure <= 0 || c.Started.IsZero() ||
			!(c.Percent.Low <= c.Percent.Median && c.Percent.Median <= c.Percent.High) {
			t.Errorf("comparison %+v", c)
		}
	}
	if len(want) > 0 {
		t.Errorf("comparisons missing: %v", want)
	}
	checkNAPIRuns(t, r)
	ch := r.Checks
	if !ch.ControlDetected || !ch.SetupsOK || ch.KthreadShareB < 0.9 {
		t.Errorf("checks: control detected %v, setups %v (%+v), kthread's share in B %.3f", ch.ControlDetected, ch.SetupsOK, r.Setups, ch.KthreadShareB)
	}
	if !strings.HasPrefix(r.Answer, "IFF_NAPI against IFF_NAPI off, TCP 64B writes, 1 stream, wire->lab: tapfwd's throughput ") || strings.Count(r.Answer, "\n") > 0 {
		t.Errorf("answer %q", r.Answer)
	}
}

// checkNAPIRuns checks every run of r: both arms delivered in the
// windows, the CPU of tapfwd and of both iperf3 processes counted, the
// background load in range.
func checkNAPIRuns(t *testing.T, r inrun.Report) {
	t.Helper()
	for _, run := range r.Runs {
		if run.Err != "" {
			t.Errorf("run %s %s rep %d failed: %s", run.Pair, run.Row, run.Rep, run.Err)
			continue
		}
		a, b := stats.ABSums(run.Windows, 1)
		if len(run.Windows) != 12 || a.Bytes <= 0 || b.Bytes <= 0 || a.Frames <= 0 || b.Frames <= 0 {
			t.Errorf("run %s rep %d: %d windows, A %+v, B %+v", run.Pair, run.Rep, len(run.Windows), a, b)
		}
		for _, role := range []abrun.Role{abrun.RoleTapfwd, abrun.RoleClient, abrun.RoleServer} {
			if run.ArmCPU[0][role]+run.ArmCPU[1][role] <= 0 {
				t.Errorf("run %s rep %d: no CPU counted for %s", run.Pair, run.Rep, role)
			}
		}
		if run.Background < -0.5 || run.Background > 2 || run.Own <= 0 {
			t.Errorf("run %s rep %d: background %.2f CPUs, own %.2f CPU-s", run.Pair, run.Rep, run.Background, run.Own)
		}
		if run.Pair == inrun.PairOn && run.ArmCPU[0][abrun.RoleKthread]+run.ArmCPU[1][abrun.RoleKthread] != 0 {
			t.Errorf("IFF_NAPI without threaded: a NAPI kthread ran")
		}
	}
}
