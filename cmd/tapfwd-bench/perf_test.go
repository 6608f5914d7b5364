package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
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
	if strings.Join(cfgs, ",") != "tapfwd,bridge" || !o.AgainstBridge || o.Budget != perfBudget || o.Reps != stats.Stage1Reps ||
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
	if o, _ := opts("--against-bridge"); !o.AgainstBridge || len(o.Workloads) != 6 {
		t.Errorf("--against-bridge alone: paired %v on %d workloads", o.AgainstBridge, len(o.Workloads))
	}
	for _, args := range [][]string{{"--perf", "--quick"}, {"--perf", "--full"}, {"--perf", "--topology", "vxlan"}, {"--gro-window", "0"}} {
		if _, err := opts(args...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
