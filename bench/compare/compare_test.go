package compare

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
)

// compareWithB compares the saved run at pathA (called nameA) with
// testdata/compare-b.json, with a fixed bootstrap seed and the default rule.
func compareWithB(t *testing.T, pathA, nameA string) *Result {
	t.Helper()
	a, err := throughput.Read(pathA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := throughput.Read("testdata/compare-b.json")
	if err != nil {
		t.Fatal(err)
	}
	return Reports(a, b, nameA, "b.json", stats.Bootstrap{Seed: 1}, stats.DefaultRule)
}

// TestCompareRuns compares two saved runs made up for the purpose
// (testdata/compare-{a,b}.json): B's napi-on is 30% faster and 30%
// cheaper, napi-off the same, the bridge too noisy in B, napi-on with 64 B
// writes has 3 repetitions in B, and each run has a cell the other lacks.
func TestCompareRuns(t *testing.T) {
	c := compareWithB(t, "testdata/compare-a.json", "a.json")
	type key struct{ config, workload, figure string }
	got := map[key]Row{}
	for _, row := range c.Rows {
		got[key{row.Config, row.Workload, row.Figure}] = row
	}
	for _, tc := range []struct {
		k     key
		want  string
		ratio float64
	}{
		{key{throughput.NAPIOn, "tcp-4KB-P1-w2l", Throughput}, stats.Faster, 1.3},
		{key{throughput.NAPIOn, "tcp-4KB-P1-w2l", Cost}, CostWords.Below, 0.7},
		{key{throughput.NAPIOff, "tcp-4KB-P1-w2l", Throughput}, stats.NoDifference, 1},
		{key{throughput.NAPIOff, "tcp-4KB-P1-w2l", Cost}, stats.NoDifference, 1},
		{key{throughput.Bridge, "tcp-4KB-P1-w2l", Throughput}, stats.TooWide, 0.935},
		{key{throughput.NAPIOn, "tcp-64B-P1-w2l", Throughput}, stats.TooFewSamples, 1.33},
	} {
		row, ok := got[tc.k]
		if !ok {
			t.Errorf("%v: no row", tc.k)
			continue
		}
		if row.Verdict != tc.want || math.Abs(row.Ratio.Median-tc.ratio) > 0.01 || !(row.Ratio.Low <= row.Ratio.Median && row.Ratio.Median <= row.Ratio.High) {
			t.Errorf("%v: %+v, want %q at a ratio of about %v", tc.k, row, tc.want, tc.ratio)
		}
	}
	if len(c.Rows) != 6 || strings.Join(c.OnlyA, " ") != "napi-off/udp-64B-w2l" || strings.Join(c.OnlyB, " ") != "napi-off/tcp-128B-P1-w2l" {
		t.Errorf("%d rows, only in A %v, only in B %v", len(c.Rows), c.OnlyA, c.OnlyB)
	}

	var txt, md, js bytes.Buffer
	if err := c.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := c.Document().WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteJSON(&js, c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kernel 6.18.0-a", "kernel 6.18.0-b", "1.300 [", "interval +-", "too few repetitions", "costs less", "Only in A"} {
		if !strings.Contains(txt.String(), want) || !strings.Contains(md.String(), want) {
			t.Errorf("text or Markdown lacks %q:\n%s", want, txt.String())
		}
	}
	var back Result
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Schema != Schema || len(back.Rows) != 6 || back.Rows[0].Verdict == "" {
		t.Errorf("JSON: %v, %+v", err, back)
	}
}

// TestCompareWithSchemaV1 compares the committed schema 1 run with a
// schema 2 run: the cells both have, throughput only (the old run has no
// cost).
func TestCompareWithSchemaV1(t *testing.T) {
	c := compareWithB(t, "../../docs/results/2026-11-30-throughput-first-schema/throughput.json", "old.json")
	if len(c.Rows) != 5 || len(c.OnlyB) != 0 || len(c.OnlyA) == 0 {
		t.Fatalf("%d rows, only in B %v: want the 5 cells compare-b.json has", len(c.Rows), c.OnlyB)
	}
	for _, row := range c.Rows {
		if row.Figure != Throughput || row.RepsA != 5 || row.Verdict == "" {
			t.Errorf("row %+v", row)
		}
	}
}

// guardReport is a made-up saved run of tapfwd and the bridge over 6
// repetitions: on each workload tapfwd at ratio times the bridge's
// figure, which drifts by up to 20% from one repetition to the next
// (the machine), with 1% noise of its own.
func guardReport(ratio map[string]float64, seed uint64) *throughput.Report {
	rng := rand.New(rand.NewPCG(seed, seed))
	r := &throughput.Report{Settings: throughput.Settings{Method: report.Method{Reps: 6}}}
	for _, c := range []string{throughput.Default, throughput.Bridge} {
		r.Configs = append(r.Configs, report.Config{Name: c})
	}
	for _, w := range slices.Sorted(maps.Keys(ratio)) { // in one order: the draws follow it
		r.Workloads = append(r.Workloads, throughput.Workload{Name: w})
	}
	for _, w := range r.Workloads {
		var vs [2][]float64
		for rep := 1; rep <= 6; rep++ {
			machine := 10 * (1 + 0.2*rng.Float64())
			for i, v := range []float64{machine * ratio[w.Name] * (1 + 0.01*rng.NormFloat64()), machine} {
				vs[i] = append(vs[i], v)
				r.Runs = append(r.Runs, throughput.RunRecord{Config: r.Configs[i].Name, Workload: w.Name, Rep: rep, Value: v})
			}
		}
		for i, c := range r.Configs {
			r.Cells = append(r.Cells, throughput.Cell{Config: c.Name, Workload: w.Name, Samples: vs[i],
				Value: &stats.Estimate{Median: stats.Median(vs[i]), Low: stats.Median(vs[i]), High: stats.Median(vs[i])}})
		}
	}
	return r
}

// TestCompareBridgeRatio compares two guard runs by their ratios to the
// bridge, repetition by repetition: the row whose ratio moved from 0.7
// to 0.8 is listed as moved, the one that stayed at 0.9 is not, and the
// machine's drift, which moves both sides of each pair, leaves the
// ratios' intervals narrow where the throughput's are too wide.
func TestCompareBridgeRatio(t *testing.T) {
	a := guardReport(map[string]float64{"tcp-default-P1-w2l": 0.7, "udp-64B-w2l": 0.9}, 1)
	b := guardReport(map[string]float64{"tcp-default-P1-w2l": 0.8, "udp-64B-w2l": 0.9}, 2)
	c := Reports(a, b, "a.json", "b.json", stats.Bootstrap{Seed: 1, Resamples: 1000}, stats.DefaultRule)
	moved := c.Moved()
	if len(moved) != 1 || moved[0].Figure != BridgeRatio || moved[0].Workload != "tcp-default-P1-w2l" || moved[0].Verdict != stats.Faster ||
		math.Abs(moved[0].Ratio.Median-0.8/0.7) > 0.03 {
		t.Fatalf("moved: %+v", moved)
	}
	for _, r := range c.Rows {
		if r.Figure == BridgeRatio && r.Workload == "udp-64B-w2l" && (r.Verdict != stats.NoDifference || r.HalfWidth > 3) {
			t.Errorf("unchanged ratio: %+v", r)
		}
		if r.Figure == Throughput && r.Config == throughput.Bridge && r.HalfWidth < 3 {
			t.Errorf("the drifting bridge's throughput has a narrow interval: %+v", r)
		}
	}
	var txt bytes.Buffer
	if err := c.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Moved beyond their intervals: 1 of", "Ratio to the bridge", "bridge-ratio"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
	c = Reports(a, a, "a.json", "a.json", stats.Bootstrap{Seed: 1, Resamples: 1000}, stats.DefaultRule)
	txt.Reset()
	c.Document().WriteText(&txt)
	if len(c.Moved()) != 0 || !strings.Contains(txt.String(), "No row moved") {
		t.Errorf("a run against itself moved: %v\n%s", c.Moved(), txt.String())
	}
}
