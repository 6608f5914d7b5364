package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/latency"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// latencyJSON is the --json report as a consumer reads it: plain fields,
// not latency.Report.
type latencyJSON struct {
	Schema   string `json:"schema"`
	Settings struct {
		Reps       int     `json:"reps"`
		RunSeconds float64 `json:"run_seconds"`
		Quick      bool    `json:"quick"`
	} `json:"settings"`
	Host struct {
		Kernel string `json:"kernel"`
		CPUs   int    `json:"cpus"`
	} `json:"host"`
	Notes       []string           `json:"notes"`
	Configs     []configJSON       `json:"configs"`
	Points      []latencyPointJSON `json:"points"`
	Cells       []latencyCellJSON  `json:"cells"`
	Comparisons []struct {
		Point, Stat, A, B, Verdict string
	} `json:"comparisons"`
}

type latencyCellJSON struct {
	Config      string                         `json:"config"`
	Point       string                         `json:"point"`
	Reps        int                            `json:"reps"`
	Failures    []string                       `json:"failures"`
	RTT         map[string]map[string]*float64 `json:"rtt_ns"`
	Rate        map[string]*float64            `json:"rate"`
	LossPercent map[string]*float64            `json:"loss_percent"`
	Samples     []struct {
		Sent     uint64             `json:"sent"`
		Received uint64             `json:"received"`
		RTT      map[string]float64 `json:"rtt_ns"`
	} `json:"samples"`
}

// TestBenchLatencyQuickJSON runs `tapfwd-bench latency --quick --json`, as
// CI does, and checks the report's structure, and that the bridge and
// tapfwd rows have positive, ordered round-trip percentiles with intervals,
// a rate and a loss.
func TestBenchLatencyQuickJSON(t *testing.T) {
	testkit.NeedRoot(t)
	var r latencyJSON
	stdout := runQuickJSON(t, &r, "latency")
	if r.Schema != latency.Schema || !r.Settings.Quick || r.Settings.Reps != 2 || r.Settings.RunSeconds != 2 || r.Host.Kernel == "" || r.Host.CPUs == 0 {
		t.Errorf("schema %q, settings %+v, host %+v", r.Schema, r.Settings, r.Host)
	}
	if len(r.Points) != 1 || r.Points[0].Name != "12K/0us" || r.Points[0].Rate != 12000 || r.Points[0].DelayNS != 0 {
		t.Errorf("points %+v", r.Points)
	}
	if len(r.Notes) == 0 {
		t.Error("no notes")
	}
	ran := ranConfigs(t, r.Configs)
	for _, must := range []string{latency.Block, latency.Bridge} {
		if !slices.Contains(ran, must) {
			t.Errorf("configuration %s did not run: %v", must, r.Configs)
		}
	}
	if !slices.ContainsFunc(r.Configs, func(c configJSON) bool { return c.Name == latency.Busy }) {
		t.Errorf("%s not in the quick run", latency.Busy)
	}
	checkLatencyCells(t, &r, ran)
	n := 0
	for _, c := range r.Comparisons {
		if c.A == latency.Block && c.B == latency.Bridge {
			n++
			if c.Verdict != stats.TooFewSamples {
				t.Errorf("tapfwd-block against the bridge with 2 repetitions: verdict %q, want %q", c.Verdict, stats.TooFewSamples)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d block/bridge comparisons, want p50 and p99", n)
	}

	checkLatencyFrom(t, stdout)
}

// latencyPointJSON is a load point of a latency report.
type latencyPointJSON struct {
	Name      string `json:"name"`
	Rate      int    `json:"rate"`
	AskedRate int    `json:"asked_rate"`
	DelayNS   int64  `json:"delay_ns"`
}

// checkLatencyCells checks every cell of the configurations that ran:
// each repetition accounted for, percentiles in order, a rate and a loss.
func checkLatencyCells(t *testing.T, r *latencyJSON, ran []string) {
	t.Helper()
	points := names(r.Points, func(p latencyPointJSON) string { return p.Name })
	eachCell(t, r.Cells, ran, points, func(x latencyCellJSON) (string, string) { return x.Config, x.Point }, func(cell latencyCellJSON, c, point string) {
		// Every repetition gives a value or a reason (a loaded machine
		// can lose one to a run without replies); none goes missing.
		if cell.Reps+len(cell.Failures) != r.Settings.Reps || len(cell.Samples) != cell.Reps {
			t.Errorf("%s: %d repetitions, %d samples, failures %q, want %d", c, cell.Reps, len(cell.Samples), cell.Failures, r.Settings.Reps)
		} else if len(cell.Failures) > 0 {
			t.Logf("%s: %d of %d repetitions gave no value: %q", c, len(cell.Failures), r.Settings.Reps, cell.Failures)
		}
		prev := 0.0
		for _, st := range latency.Stats {
			med, ok := estimate(t, c+": rtt_ns."+st, cell.RTT[st])
			if ok && med < prev {
				t.Errorf("%s: rtt_ns.%s %v: below the percentile before (%v)", c, st, med, prev)
			}
			prev = max(prev, med)
		}
		if cell.Rate["median"] == nil || *cell.Rate["median"] <= 0 || cell.LossPercent["median"] == nil {
			t.Errorf("%s: rate %v loss %v", c, cell.Rate, cell.LossPercent)
		}
		for _, s := range cell.Samples {
			if s.Sent == 0 || s.Received == 0 || s.Received > s.Sent || s.RTT["p50"] <= 0 {
				t.Errorf("%s: sample %+v", c, s)
			}
		}
		if cell.Reps == 0 {
			t.Errorf("%s: no repetition gave a value: %v", c, cell.Failures)
			return
		}
		t.Logf("%s %s: p50 %.1f us, p99 %.1f us, %.0f requests/s, %.2f%% lost", c, point,
			*cell.RTT["p50"]["median"]/1e3, *cell.RTT["p99"]["median"]/1e3, *cell.Rate["median"], *cell.LossPercent["median"])
	})
}

// checkLatencyFrom renders a saved report again with --from, and checks
// that --out writes every format.
func checkLatencyFrom(t *testing.T, report []byte) {
	t.Helper()
	// --from renders the saved report again; --out writes every format.
	saved := filepath.Join(t.TempDir(), "latency.json")
	if err := os.WriteFile(saved, report, 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var md, errb bytes.Buffer
	if code := run([]string{"latency", "--from", saved, "--markdown", "--out", out}, &md, &errb); code != 0 {
		t.Fatalf("--from: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(md.String(), "| rate + delay | "+latency.Block) || !strings.Contains(md.String(), "12 Kpkt/s + 0 us") {
		t.Errorf("--from --markdown:\n%s", md.String())
	}
	for _, f := range []string{"latency.txt", "latency.md", "latency.json"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("--out: %s: %v", f, err)
		}
	}
}

// TestBenchLatencyInterrupt sends SIGINT to a latency bench while requests
// flow through tapfwd, and checks that it exits promptly and leaves no
// namespace, interface or process of its own behind.
func TestBenchLatencyInterrupt(t *testing.T) {
	started := false
	seen := interruptBench(t, "latency", []string{"--configs", latency.Block + "," + latency.Bridge},
		700*time.Millisecond, func(line string, _ map[int]procID) bool {
			// The progress line comes just before the requests.
			started = started || strings.HasPrefix(line, "bench: [1/") && strings.Contains(line, latency.Block)
			return started
		})
	forwarder := false
	for _, id := range seen {
		forwarder = forwarder || strings.HasPrefix(id.comm, "tapfwd")
	}
	if !forwarder {
		t.Errorf("never saw tapfwd run under the bench: %v", seen)
	}
}

// TestBenchLatencyNeedsRoot: latency refuses to run as another user
// than root (its flag mistakes are in TestBenchErrors).
func TestBenchLatencyNeedsRoot(t *testing.T) {
	if testbed.Available() != nil {
		t.Skip("needs root to run as nobody")
	}
	asNobody(t, "bench needs root", "latency", "--quick")
}
