package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestPerfOptions checks what --perf picks: tapfwd as it ships against
// the bridge in pairs on the guard's five rows with their targets,
// sequential within its budget; levers join through --configs, and the
// flags it conflicts with are refused.
func TestPerfOptions(t *testing.T) {
	opts := func(args ...string) (throughput.Options, error) {
		t.Helper()
		var errb bytes.Buffer
		fs, f := throughputFlagSet(&errb)
		if err := parse(fs, args); err != nil {
			t.Fatalf("%q: %v %s", args, err, errb.String())
		}
		return f.options(fs)
	}
	o, err := opts("--perf")
	if err != nil {
		t.Fatal(err)
	}
	var cfgs, ws []string
	for _, c := range o.Configs {
		cfgs = append(cfgs, c.Name)
	}
	for _, w := range o.Workloads {
		ws = append(ws, w.Name)
		if w.Targets == nil || w.Placement == nil {
			t.Errorf("%s: targets %+v, placement %+v", w.Name, w.Targets, w.Placement)
		}
	}
	if strings.Join(cfgs, ",") != "tapfwd,ovs,bridge" || !o.AgainstBridge || o.Budget != perfBudget || o.Reps != stats.Stage1Reps ||
		strings.Join(ws, ",") != "tcp-default-P1-w2l,tcp-default-P1-l2w,tcp-mtu-P1-w2l,tcp-default-P4-w2l,udp-64B-w2l" {
		t.Errorf("--perf: %v on %v, paired %v, %d reps within %v", cfgs, ws, o.AgainstBridge, o.Reps, o.Budget)
	}
	if len(o.Configs[0].Args) != 0 {
		t.Errorf("tapfwd as it ships runs with flags %v", o.Configs[0].Args)
	}
	o, err = opts("--perf", "--configs", "tapfwd,tap-io-uring,gro-window,bridge", "--gro-window", "30us", "--budget", "0", "--reps", "5")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Configs) != 4 || strings.Join(o.Configs[2].Args, " ") != "--gro-window 30us" || strings.Join(o.Configs[1].Args, " ") != "--tap-io uring" ||
		o.Budget != 0 || o.Reps != 5 {
		t.Errorf("levers: %+v, budget %v, reps %d", o.Configs, o.Budget, o.Reps)
	}
	if o, err := opts("--perf", "--before", "true"); err != nil || len(o.Configs) != 4 || o.Configs[1].Name != throughput.Before ||
		!filepath.IsAbs(o.Configs[1].Binary) || len(o.Configs[1].Args) != 0 {
		t.Errorf("--before: %+v, %v", o.Configs, err)
	}
	if _, err := opts("--before", "/nonexistent/tapfwd"); err == nil || !strings.HasPrefix(err.Error(), "--before: ") {
		t.Errorf("--before a missing binary: %v", err)
	}
	if o, _ := opts("--against-bridge"); !o.AgainstBridge || len(o.Workloads) != 6 {
		t.Errorf("--against-bridge alone: paired %v on %d workloads", o.AgainstBridge, len(o.Workloads))
	}
	for _, args := range [][]string{{"--perf", "--quick"}, {"--perf", "--full"}, {"--perf", "--topology", "vxlan"}, {"--gro-window", "0"}} {
		if _, err := opts(args...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestBenchPerf runs the guard briefly (2 repetitions of 1 s runs) with
// the io_uring lever and a --before binary (here the same build): tapfwd
// as it ships, the lever and the before binary are each compared with the
// bridge in pairs on all five rows against their targets, and
// the report compared with itself moves no row. (A lever a binary lacks
// is skipped: matrix's TestCheckFlags.)
func TestBenchPerf(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	out := t.TempDir()
	_, stderr := runBench(t, 4*time.Minute, "throughput", "--perf", "--configs", "tapfwd,tap-io-uring,bridge", "--reps", "2", "--budget", "0",
		"--duration", "1s", "--omit", "0", "--before", testkit.Tapfwd(t), "--out", out)
	if strings.Contains(stderr, "skipped tap-io-uring") {
		t.Errorf("the lever was skipped:\n%s", stderr)
	}
	r, err := throughput.Read(filepath.Join(out, "throughput.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Settings.AgainstBridge || len(r.Workloads) != 5 {
		t.Fatalf("settings %+v, %d workloads", r.Settings, len(r.Workloads))
	}
	for _, w := range r.Workloads {
		c := r.Comparison(throughput.Default, throughput.Bridge, w.Name)
		if w.Targets == nil || c == nil || c.Pairs != 2 || !(c.Ratio.Low <= c.Ratio.Median && c.Ratio.Median <= c.Ratio.High) ||
			len(r.BridgeRatios(throughput.Default, w.Name)) != 2 {
			t.Errorf("%s: targets %+v, comparison with the bridge %+v", w.Name, w.Targets, c)
		}
		if l := r.Comparison(throughput.TAPIOURing, throughput.Bridge, w.Name); l == nil || l.Pairs != 2 {
			t.Errorf("%s: the lever against the bridge: %+v", w.Name, l)
		}
		if b := r.Comparison(throughput.Before, throughput.Bridge, w.Name); b == nil || b.Pairs != 2 {
			t.Errorf("%s: --before against the bridge: %+v", w.Name, b)
		}
	}
	txt, _ := os.ReadFile(filepath.Join(out, "throughput.txt"))
	if !strings.Contains(string(txt), "Against the bridge") || !strings.Contains(string(txt), ">= 0.95") {
		t.Errorf("the report lacks the bridge table:\n%s", txt)
	}
	var cmp bytes.Buffer
	c := exec.Command(exe(t), "compare", filepath.Join(out, "throughput.json"), filepath.Join(out, "throughput.json"))
	c.Stdout = &cmp
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cmp.String(), "Moved beyond their intervals: 0 of") || !strings.Contains(cmp.String(), "Ratio to the bridge (each repetition") {
		t.Errorf("compare with itself:\n%s", cmp.String())
	}
}
