package latency

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/napi"
)

func TestParsePoints(t *testing.T) {
	got, err := ParsePoints("12K/0us, 32k/30, 125K/6µs,500/1ms,12.5K/0.5us")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		rate  int
		delay time.Duration
	}{
		{"12K/0us", 12000, 0}, {"32K/30us", 32000, 30 * time.Microsecond}, {"125K/6us", 125000, 6 * time.Microsecond},
		{"500/1000us", 500, time.Millisecond}, {"12.5K/500ns", 12500, 500 * time.Nanosecond},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d points: %+v", len(got), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || g.Rate != w.rate || g.AskedRate != w.rate || g.Delay != w.delay {
			t.Errorf("point %d: %+v, want %+v", i, g, w)
		}
	}
	for _, bad := range []string{"", "12K", "12K/x", "0/0", "3M/0", "1K/20ms", "K/1us", "12K/5h"} {
		if _, err := ParsePoints(bad); err == nil {
			t.Errorf("ParsePoints(%q): no error", bad)
		}
	}
	var names []string
	for _, p := range ReferencePoints {
		names = append(names, p.Name)
	}
	if s := strings.Join(names, ","); s != "12K/0us,32K/30us,125K/6us,12K/78us,25K/38us" {
		t.Errorf("reference points %s", s)
	}
}

func TestNAPISupports(t *testing.T) {
	all := napi.Features{NAPIGet: true, NAPISet: true, Threaded: true, BusyPoll: true}
	if err := napiSupports(all, napi.ThreadedBusyPoll); err != nil {
		t.Errorf("all features: %v", err)
	}
	k618 := all
	k618.BusyPoll = false
	if err := napiSupports(k618, napi.ThreadedEnabled); err != nil {
		t.Errorf("6.18, threaded: %v", err)
	}
	err := napiSupports(k618, napi.ThreadedBusyPoll)
	if err == nil || !strings.Contains(err.Error(), "busy-poll") || !strings.Contains(err.Error(), "6.19") {
		t.Errorf("6.18, busy-poll: %v", err)
	}
	if err := napiSupports(napi.Features{NAPIGet: true, NAPISet: true}, napi.ThreadedEnabled); err == nil || !strings.Contains(err.Error(), "6.17") {
		t.Errorf("6.16, threaded: %v", err)
	}
}

// syntheticLatency builds a report from made-up runs: 4 repetitions, two
// points (one capped), tapfwd-block, tapfwd-busy (lower latency), bridge,
// and nic-napi-busy-poll skipped.
func syntheticLatency(t *testing.T) *Report {
	t.Helper()
	cfgs, err := report.SelectConfigs(Configs(), []string{Block, Busy, NICBusyPoll, Bridge})
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{
		Header: report.Header{Schema: Schema, Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
			Finished: time.Date(2026, 11, 30, 12, 5, 0, 0, time.UTC),
			Host:     report.Host{Kernel: "6.18.0-test", Machine: "x86_64", CPUs: 2, Go: "go1.26"}},
		Configs: cfgs,
		Points:  []Point{point(12000, 0), point(125000, 6*time.Microsecond)},
		Settings: Settings{Method: report.Method{Reps: 4, Intervals: report.Intervals{Seed: 1, Resamples: 1000, Level: stats.Level}},
			RunSeconds: 2, WarmupSeconds: 0.2, PayloadBytes: 64, SenderFIFO: 50, CalibratedOn: Block},
	}
	r.Points[1].Rate = 40000
	r.Points[1].Capped = "125K not reachable here: capped at 40K"
	r.Config(NICBusyPoll).Skipped = "napi: threaded NAPI busy polling (threaded busy-poll) needs Linux 6.19 or later; this kernel is 6.18.0-test"
	base := map[string]float64{Block: 50e3, Busy: 30e3, Bridge: 40e3}
	for rep := 1; rep <= 4; rep++ {
		for _, c := range []string{Block, Busy, Bridge} {
			for i, p := range r.Points {
				b := base[c] * float64(1+i) * (1 + 0.01*float64(rep))
				s := Sample{Rep: rep, Sent: 24000, Arrived: 24000, Received: 24000, Rate: float64(p.Rate),
					RTT: Percentiles{Min: b / 2, P5: 0.8 * b, P50: b, P95: 1.5 * b, P99: 2 * b, P999: 3 * b, Max: 5 * b}, SendLagP99: 20e3, SenderFIFO: true}
				if c == Block && i == 1 && rep == 4 {
					r.runs = append(r.runs, record{Config: c, Row: p.Name, Rep: rep, Err: "no reply to 80000 requests"})
					continue
				}
				r.runs = append(r.runs, record{Config: c, Row: p.Name, Rep: rep, Sample: s})
			}
		}
	}
	r.notes()
	r.analyze(stats.Bootstrap{Seed: 1, Resamples: 1000})
	return r
}

// readBack writes js to path, reads it with Read and checks that the
// report renders as text the same as want; what names the JSON in errors.
func readBack(t *testing.T, path string, js []byte, want, what string) *Report {
	t.Helper()
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	var txt bytes.Buffer
	r.Document().WriteText(&txt)
	if txt.String() != want {
		t.Errorf("text from %s differs:\n%s\n---\n%s", what, txt.String(), want)
	}
	return r
}

func TestLatencyAnalyze(t *testing.T) {
	r := syntheticLatency(t)
	if len(r.Cells) != 3*2 {
		t.Fatalf("%d cells, want 6 (skipped configuration left out)", len(r.Cells))
	}
	c := r.Cell(Block, "12K/0us")
	if c == nil || c.Reps != 4 || c.RTT == nil || c.RTT.P50.Median != 50e3*1.025 {
		t.Fatalf("tapfwd-block 12K cell: %+v", c)
	}
	if !(c.RTT.P50.Low <= c.RTT.P50.Median && c.RTT.P50.Median <= c.RTT.P50.High) || c.RTT.P99.Median != 2*c.RTT.P50.Median {
		t.Errorf("p50 %+v p99 %+v", c.RTT.P50, c.RTT.P99)
	}
	if c := r.Cell(Block, "125K/6us"); c.Reps != 3 || len(c.Failures) != 1 || !strings.HasPrefix(c.Failures[0], "rep 4: no reply") {
		t.Errorf("failed run: %+v", c)
	}
	// Busy is 40% lower everywhere: the verdict says lower latency; block
	// against the bridge is higher.
	cmp := r.Comparison(Busy, Block, "12K/0us", "p50")
	if cmp == nil || cmp.Verdict != stats.LowerLatency || cmp.Diff.Median >= 0 || cmp.Percent.High >= 0 {
		t.Errorf("busy vs block: %+v", cmp)
	}
	if cmp := r.Comparison(Block, Bridge, "12K/0us", "p99"); cmp == nil || cmp.Verdict != stats.HigherLatency {
		t.Errorf("block vs bridge: %+v", cmp)
	}
	// The 125K point has 3 repetitions of block: still enough.
	if cmp := r.Comparison(Busy, Block, "125K/6us", "p50"); cmp == nil || cmp.Verdict != stats.LowerLatency {
		t.Errorf("busy vs block at 125K: %+v", cmp)
	}
	if r.Comparison(NICBusyPoll, NICGRO, "12K/0us", "p50") != nil {
		t.Error("a comparison with a skipped configuration")
	}
	if stats.Verdict(-1, 1, 3, 3, stats.Latency) != stats.NoDifference || stats.Verdict(1, 2, 2, 3, stats.Latency) != stats.TooFewSamples {
		t.Error("Verdict with the latency words")
	}
}

func TestLatencyRender(t *testing.T) {
	r := syntheticLatency(t)
	var txt bytes.Buffer
	if err := r.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"tapfwd-bench latency", "kernel 6.18.0-test",
		"Round-trip time p50 / p99, us (medians of 4 repetitions)",
		"12 Kpkt/s + 0 us", "125 Kpkt/s + 6 us (ran at 40 Kpkt/s)",
		"51.2 / 102", // tapfwd-block at 12K: 50 us * 1.025, p99 twice that
		"capped at 40K", "spins one whole CPU (of 2 here)", "The sender thread runs SCHED_FIFO 50",
		"SKIPPED: napi: threaded NAPI busy polling", "rep 4: no reply",
		"tapfwd-busy vs tapfwd-block", "lower", "higher",
	} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
	// The main table: a row per point, a column per configuration that ran.
	i := strings.Index(txt.String(), "rate + delay")
	head := strings.Fields(strings.SplitN(txt.String()[i:], "\n", 2)[0])
	if strings.Join(head, " ") != "rate + delay tapfwd-block tapfwd-busy bridge" {
		t.Errorf("main table head %q", head)
	}
	var md bytes.Buffer
	if err := r.Document().WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| rate + delay | tapfwd-block | tapfwd-busy | bridge |") || !strings.Contains(md.String(), "\n- 125K/6us: 125K not reachable") {
		t.Errorf("markdown:\n%s", md.String())
	}

	// JSON: the documented layout, and it reads back to the same tables.
	var js bytes.Buffer
	if err := report.WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "started", "finished", "host", "settings", "notes", "configs", "points", "cells", "comparisons"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	cell := m["cells"].([]any)[0].(map[string]any)
	rtt := cell["rtt_ns"].(map[string]any)
	for _, st := range Stats {
		e, ok := rtt[st].(map[string]any)
		if !ok || e["median"] == nil || e["ci_low"] == nil || e["ci_high"] == nil {
			t.Errorf("cell rtt_ns.%s: %v", st, rtt[st])
		}
	}
	p := m["points"].([]any)[1].(map[string]any)
	if p["rate"].(float64) != 40000 || p["asked_rate"].(float64) != 125000 || p["delay_ns"].(float64) != 6000 {
		t.Errorf("point: %v", p)
	}
	path := filepath.Join(t.TempDir(), "latency.json")
	readBack(t, path, js.Bytes(), txt.String(), "the JSON")
	// The first layout: "difference_ns", no unit.
	v1 := strings.ReplaceAll(js.String(), `"schema": "`+Schema+`"`, `"schema": "`+SchemaV1+`"`)
	v1 = strings.ReplaceAll(v1, `"difference": {`, `"difference_ns": {`)
	v1 = strings.ReplaceAll(v1, `"unit": "ns",`, "")
	if v1 == js.String() || strings.Contains(v1, `"difference":`) {
		t.Fatal("no comparison to rewrite in the first layout")
	}
	old := readBack(t, path, []byte(v1), txt.String(), "the first layout's JSON")
	if c := old.Comparison(Busy, Block, "12K/0us", "p50"); c == nil || c.Unit != "ns" || c.Diff.Median >= 0 {
		t.Errorf("comparison read from the first layout: %+v", c)
	}
	os.WriteFile(path, []byte(`{"schema":"tapfwd-bench-throughput/1"}`), 0o644)
	if _, err := Read(path); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Errorf("wrong schema: %v", err)
	}
}

// TestLatencyCalibrates runs the bench on the direct veth with a rate no
// machine sustains through this tool, and checks that calibration caps it,
// says so, and runs the matrix at the cap.
func TestLatencyCalibrates(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 10 s privileged run")
	}
	needBeds(t)
	cfgs, _ := report.SelectConfigs(Configs(), []string{Direct})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pts, _ := ParsePoints("2000K/0us")
	r, err := Run(ctx, Options{Common: matrix.Common{Configs: cfgs, Reps: 1}, Points: pts, Duration: 300 * time.Millisecond, Calibrate: Direct})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Points[0]
	t.Logf("capped to %d: %s", p.Rate, p.Capped)
	if p.Rate >= p.AskedRate || p.Rate < capFloor || p.Rate%capRound != 0 || p.Capped == "" {
		t.Errorf("point after calibration: %+v", p)
	}
	if r.Settings.CalibratedOn != Direct || len(r.Notes) == 0 || !strings.Contains(r.Notes[0], "2000K/0us: ") {
		t.Errorf("settings %+v notes %q", r.Settings, r.Notes)
	}
	c := r.Cell(Direct, p.Name)
	if c == nil || c.Reps != 1 || c.Rate == nil || c.Rate.Median > 1.05*float64(p.Rate) {
		t.Errorf("cell %+v", c)
	}
}

func TestCheckConfigs(t *testing.T) {
	cs, _ := report.SelectConfigs(Configs(), []string{Block, TAPThreaded, Bridge})
	checkConfigs(cs, 0x7173)
	if cs[0].Skipped != "" || cs[1].Skipped != "" || cs[2].Skipped != "" {
		t.Errorf("skipped: %q, %q, %q", cs[0].Skipped, cs[1].Skipped, cs[2].Skipped)
	}
	cs, _ = report.SelectConfigs(Configs(), []string{TAPThreaded})
	checkConfigs(cs, 0x7163)
	if !strings.Contains(cs[0].Skipped, "the kernel lacks IFF_NAPI") {
		t.Errorf("without IFF_NAPI: %q", cs[0].Skipped)
	}
}

// needBeds skips t when test beds cannot be built here.
func needBeds(t *testing.T) {
	t.Helper()
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
}
