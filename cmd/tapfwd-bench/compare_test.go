package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/compare"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
)

const (
	fixtureA = "../../bench/compare/testdata/compare-a.json"
	fixtureB = "../../bench/compare/testdata/compare-b.json"
	oldRun   = "../../docs/results/2026-11-30-throughput-first-schema/throughput.json"
)

// TestCompareCLI runs `tapfwd-bench compare` on two saved runs in each
// form, flags before or after the files, and on the committed run of the
// first schema against a run of the second.
func TestCompareCLI(t *testing.T) {
	clitest.Check(t, "tapfwd-bench", run, []clitest.Case{
		{[]string{"compare", fixtureA, fixtureB}, 0, "faster"},
		{[]string{"compare", "--markdown", fixtureA, fixtureB}, 0, "| napi-on | tcp-4KB-P1-w2l | Gbit/s |"},
		{[]string{"compare", fixtureA, fixtureB, "--target", "50"}, 0, "no significant difference"},
		{[]string{"compare", oldRun, fixtureB}, 0, "tapfwd-bench-throughput/1"},
		{[]string{"compare", "-h"}, 0, "Usage: tapfwd-bench compare [flags] A.json B.json"},
		{[]string{"compare", "-h"}, 0, "\n  --target float\n"},
		{[]string{"compare", fixtureA}, 2, "compare takes two reports, A.json and B.json; got 1"},
		{[]string{"compare", "--json", "--markdown", fixtureA, fixtureB}, 2, "pick one"},
		{[]string{"compare", "--target", "-1", fixtureA, fixtureB}, 2, "--target -1"},
		{[]string{"compare", fixtureA, "/nonexistent/b.json"}, 1, "no such file"},
	})
	var out, errb bytes.Buffer
	if code := run([]string{"compare", fixtureA, fixtureB, "--json"}, &out, &errb); code != 0 {
		t.Fatalf("compare --json: exit %d: %s", code, errb.String())
	}
	var c compare.Result
	if err := json.Unmarshal(out.Bytes(), &c); err != nil {
		t.Fatal(err)
	}
	if c.Schema != compare.Schema || c.A.Path != fixtureA || c.TargetHalfWidth != stats.TargetHalfWidth || len(c.Rows) == 0 {
		t.Errorf("compare --json: %+v", c)
	}
	out.Reset()
	if code := run([]string{"compare", "--target", "50", fixtureA, fixtureB}, &out, &errb); code != 0 || strings.Contains(out.String(), "too wide") {
		t.Errorf("--target 50: exit %d, still too wide:\n%s", code, out.String())
	}
}

// TestThroughputOptions checks what the default run, --full and --quick
// measure, and that flags given override them.
func TestThroughputOptions(t *testing.T) {
	opts := func(args ...string) throughput.Options {
		t.Helper()
		var errb bytes.Buffer
		fs, f := throughputFlagSet(&errb)
		if err := parse(fs, args); err != nil {
			t.Fatalf("%q: %v %s", args, err, errb.String())
		}
		o, err := f.options(fs)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return o
	}
	names, workloads := configNames, workloadNames
	o := opts()
	if names(o) != "napi-off,napi-on,napi-threaded,bridge,direct" || o.Reps != 6 || o.Budget != 25*time.Minute || o.Duration != 2*time.Second ||
		o.Omit != time.Second || o.Rule != stats.DefaultRule ||
		workloads(o) != "tcp-64B-P1-w2l,tcp-128B-P1-w2l,tcp-4KB-P1-w2l,tcp-64B-P4-w2l,tcp-128B-P4-w2l,tcp-4KB-P4-w2l" {
		t.Errorf("default run: %s; %s; %d reps then to %v, runs of %v after %v; rule %+v", names(o), workloads(o), o.Reps, o.Budget, o.Duration, o.Omit, o.Rule)
	}
	checkAutoPlacement(t, o)
	if o = opts("--placement", "scheduler"); o.Workloads[0].Placement.Name != throughput.Scheduler || o.Workloads[0].Placement.Iperf != nil {
		t.Errorf("--placement scheduler: %+v", o.Workloads[0].Placement)
	}
	if o = opts("--placement", "pinned", "--iperf-cpus", "1,0"); o.Workloads[5].Placement.Iperf == nil || o.Workloads[5].Placement.Iperf.Wire != 1 {
		t.Errorf("--placement pinned --iperf-cpus 1,0: %+v", o.Workloads[5].Placement)
	}
	if o = opts("--placement", "both", "--sizes", "64", "--streams", "4"); workloads(o) != "tcp-64B-P4-w2l@pinned,tcp-64B-P4-w2l@scheduler" {
		t.Errorf("--placement both: %s", workloads(o))
	}
	if o = opts("--reps", "9", "--budget", "0"); o.Reps != 9 || o.Budget != 0 {
		t.Errorf("--reps 9 --budget 0: %d reps, budget %v", o.Reps, o.Budget)
	}
	o = opts("--full")
	if len(o.Configs) != len(throughput.Configs(throughput.DefaultTAPNAPI)) || len(o.Workloads) != 15 || o.Reps != 5 || o.Budget != 0 || o.Omit != time.Second {
		t.Errorf("--full: %s; %d workloads; %d reps, omit %v", names(o), len(o.Workloads), o.Reps, o.Omit)
	}
	o = opts("--full", "--reps", "8", "--configs", "napi-off,bridge", "--udp=false")
	if names(o) != "napi-off,bridge" || o.Reps != 8 || len(o.Workloads) != 13 {
		t.Errorf("--full with flags: %s; %d workloads; %d reps", names(o), len(o.Workloads), o.Reps)
	}
	o = opts("--quick")
	if names(o) != "napi-off,napi-on,bridge,direct" || o.Reps != 2 || o.Budget != 0 || o.Omit != 0 || workloads(o) != "tcp-4KB-P1-w2l,tcp-4KB-P1-l2w,udp-64B-w2l" {
		t.Errorf("--quick: %s; %s; %d reps, omit %v", names(o), workloads(o), o.Reps, o.Omit)
	}
	if o = opts("--target", "0"); o.Rule.MaxHalfWidth != 0 || o.Rule.MinReps != stats.MinReps {
		t.Errorf("--target 0: rule %+v", o.Rule)
	}
	if o = opts(); o.Lab.Topology != matrix.Veth {
		t.Errorf("default topology %q", o.Lab.Topology)
	}
	checkVXLANOptions(t, opts, names, workloads)
}

// configNames and workloadNames list a run's configurations and
// workloads by name, comma-separated.
func configNames(o throughput.Options) string {
	var n []string
	for _, c := range o.Configs {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

func workloadNames(o throughput.Options) string {
	var n []string
	for _, w := range o.Workloads {
		n = append(n, w.Name)
	}
	return strings.Join(n, ",")
}

// checkAutoPlacement checks the default run's placement (auto): one
// stream pinned, several by the scheduler.
func checkAutoPlacement(t *testing.T, o throughput.Options) {
	t.Helper()
	// auto: one stream pinned to the first two CPUs this process may use
	// (the client on the first, beside tapfwd's worker), several streams
	// by the scheduler; the scheduler everywhere with one CPU.
	want := throughput.DefaultPin()
	switch {
	case want == nil && !singleAffinity():
		t.Error("auto placement: none, with two CPUs or more")
	case want != nil && want.Wire >= want.Lab:
		t.Errorf("auto placement %+v: want the client on the lower CPU", want)
	}
	for _, w := range o.Workloads {
		name, pin := throughput.Pinned, want
		if w.Streams > 1 || want == nil {
			name, pin = throughput.Scheduler, nil
		}
		if w.Placement == nil || w.Placement.Name != name || !reflect.DeepEqual(w.Placement.Iperf, pin) {
			t.Errorf("default run, %s: placement %+v, want %s %+v", w.Name, w.Placement, name, pin)
		}
	}
}

// checkVXLANOptions checks what --topology vxlan measures by default, with
// --quick and --full, and that flags given override it.
func checkVXLANOptions(t *testing.T, opts func(...string) throughput.Options, names, workloads func(throughput.Options) string) {
	o := opts("--topology", "vxlan")
	if o.Lab.Topology != matrix.VXLAN || names(o) != "napi-off,napi-on,bridge" || o.Reps != 6 || o.Budget != 25*time.Minute || o.Duration != 2*time.Second ||
		workloads(o) != "tcp-4KB-P1-w2l,tcp-128KB-P1-w2l,tcp-4KB-P4-w2l,tcp-128KB-P4-w2l,udp-64B-w2l" {
		t.Errorf("--topology vxlan: %q; %s; %s; %d reps of %v", o.Lab.Topology, names(o), workloads(o), o.Reps, o.Duration)
	}
	o = opts("--topology", "vxlan", "--configs", "napi-threaded,bridge", "--sizes", "64", "--streams", "1")
	if names(o) != "napi-threaded,bridge" || workloads(o) != "tcp-64B-P1-w2l" {
		t.Errorf("--topology vxlan with flags: %s; %s", names(o), workloads(o))
	}
	o = opts("--topology", "vxlan", "--quick")
	if o.Lab.Topology != matrix.VXLAN || names(o) != "napi-on,bridge" || o.Reps != 2 || workloads(o) != "tcp-4KB-P1-w2l,tcp-4KB-P1-l2w,udp-64B-w2l" {
		t.Errorf("--topology vxlan --quick: %s; %s; %d reps", names(o), workloads(o), o.Reps)
	}
	// --full names every configuration; the run skips those the two
	// hosts cannot have (bench/throughput: TestThroughputVXLANSkips).
	if o = opts("--topology", "vxlan", "--full"); len(o.Configs) != len(throughput.Configs(throughput.DefaultTAPNAPI)) || len(o.Workloads) != 15 {
		t.Errorf("--topology vxlan --full: %s; %d workloads", names(o), len(o.Workloads))
	}
}

// singleAffinity reports whether this process may run on one CPU only.
func singleAffinity() bool {
	var set unix.CPUSet
	return unix.SchedGetaffinity(0, &set) == nil && set.Count() < 2
}
