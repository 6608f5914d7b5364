package report

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/stats"
)

func TestNum(t *testing.T) {
	if got := strings.Join([]string{Num(0.5934), Num(1), Num(17.61), Num(308.4), Num(0), Num(math.NaN()), Num(-2.5)}, " "); got != "0.593 1.00 17.6 308 0 - -2.50" {
		t.Errorf("Num of 0.5934 1 17.61 308.4 0 NaN -2.5 = %q", got)
	}
	if Signed(1) != "+1.00" || Signed(-0.5) != "-0.500" || Pct(3.14) != "+3.1%" || Pct(-12.6) != "-13%" {
		t.Errorf("Signed, Pct: %s %s %s %s", Signed(1), Signed(-0.5), Pct(3.14), Pct(-12.6))
	}
	if Est(nil) != "-" || Est(&stats.Estimate{Median: 2, Low: 1, High: 3}) != "2.00 [1.00, 3.00]" || Ratio(&stats.Estimate{Median: 0.756}) != "0.76" {
		t.Error("Est, Ratio")
	}
	d := stats.Difference{Diff: stats.Estimate{Median: 1500, Low: -200, High: 3000}, Percent: stats.Estimate{Median: 12}}
	if got := DiffEst(d, 1e3); got != "+1.50 [-0.200, +3.00] (+12%)" {
		t.Errorf("DiffEst = %q", got)
	}
}

func TestDocument(t *testing.T) {
	cs := []Config{
		Tapfwd("fast", "tapfwd, fast", forwarder.Options{NAPI: forwarder.On}),
		{Name: "slow", Kind: KindTapfwd, Description: "tapfwd, slow", Skipped: "the kernel lacks IFF_NAPI", Setup: [][]string{{"ethtool", "-K", NICToken, "gro", "on"}}},
	}
	d := Document{Title: "tapfwd-bench test", Summary: []string{"one", "two"}, Sections: append([]Section{
		{Title: "Notes", Notes: []string{"a note"}},
		{Title: "Table", Head: []string{"x", "y"}, Rows: [][]string{{"1", "a|b"}}},
		ConfigTable(cs, true),
	}, FailedRuns("row", [][]string{{"fast", "x", "rep 1: boom"}})...)}
	var txt, md bytes.Buffer
	if err := d.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tapfwd-bench test\none\ntwo\n", "\nNotes\n- a note\n", "x  y\n1  a|b\n",
		"fast    tapfwd, fast", "--napi on", "SKIPPED: the kernel lacks IFF_NAPI", "ethtool -K w1 gro on", "Failed runs (left out of the figures)"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
	for _, want := range []string{"## tapfwd-bench test\n\none  \ntwo  \n", "### Notes\n\n- a note\n", "| x | y |\n|---|---|\n| 1 | a\\|b |\n"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	if d.Sections[1].Rows[0][1] != "a|b" {
		t.Error("WriteMarkdown changed the rows")
	}
	if s := ConfigTable(cs, false); len(s.Head) != 2 || len(s.Rows[0]) != 2 {
		t.Errorf("without how: %+v", s)
	}
	if FailedRuns("row", nil) != nil {
		t.Error("a failed-runs table without failures")
	}
}

// TestFailedCells: a row per failure of each cell, in order, after the
// cell's config and what ran; no table when no cell failed.
func TestFailedCells(t *testing.T) {
	type cell struct {
		config, at string
		fails      []string
	}
	of := func(c cell) (string, string, []string) { return c.config, c.at, c.fails }
	got := FailedCells("point", []cell{{"a", "1K", nil}, {"b", "2K", []string{"rep 1: x", "rep 3: y"}}, {"a", "2K", []string{"rep 2: z"}}}, of)
	want := []Section{{Title: "Failed runs (left out of the figures)", Head: []string{"config", "point", "failure"},
		Rows: [][]string{{"b", "2K", "rep 1: x"}, {"b", "2K", "rep 3: y"}, {"a", "2K", "rep 2: z"}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FailedCells = %+v, want %+v", got, want)
	}
	if got := FailedCells("point", []cell{{"a", "1K", nil}}, of); got != nil {
		t.Errorf("no failures: %+v, want no table", got)
	}
}

func TestSelectConfigs(t *testing.T) {
	all := []Config{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	got, err := SelectConfigs(all, []string{"c", "a"})
	if err != nil || len(got) != 2 || got[0].Name != "a" || got[1].Name != "c" {
		t.Errorf("SelectConfigs = %+v, %v; want a, c in all's order", got, err)
	}
	if _, err := SelectConfigs(all, []string{"d"}); err == nil || !strings.Contains(err.Error(), `unknown configuration "d" (known: a, b, c)`) {
		t.Errorf("unknown: %v", err)
	}
	all[1].Skipped = "no"
	if !Ran(all, "a") || Ran(all, "b") || Ran(all, "d") || FindConfig(all, "c") != &all[2] {
		t.Error("Ran, FindConfig")
	}
}

func TestJSON(t *testing.T) {
	type doc struct {
		Header
		Comparisons []Comparison `json:"comparisons"`
	}
	in := doc{Header: Header{Schema: "s/2", Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Host: Host{Kernel: "6.18"}},
		Comparisons: []Comparison{{Workload: "w", A: "a", B: "b", Unit: "kpps",
			Difference: stats.Difference{Diff: stats.Estimate{Median: 1, Low: 0.5, High: 2}, Verdict: stats.Faster}}}}
	var b bytes.Buffer
	if err := WriteJSON(&b, in); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"schema": "s/2"`, `"workload": "w"`, `"difference": {`, `"difference_percent"`, `"verdict": "faster"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), `"point"`) || strings.Contains(b.String(), `"stat"`) {
		t.Errorf("a throughput comparison with latency fields:\n%s", b.String())
	}
	path := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(path, b.Bytes(), 0o644)
	if out, err := ReadJSON[doc](path, "s/1", "s/2"); err != nil || out.Comparisons[0].Diff.High != 2 || out.Host.Kernel != "6.18" {
		t.Errorf("ReadJSON: %+v, %v", out, err)
	}
	if _, err := ReadJSON[doc](path, "s/3"); err == nil || !strings.Contains(err.Error(), `schema "s/2", want "s/3"`) {
		t.Errorf("wrong schema: %v", err)
	}
	var c Comparison
	old := `{"point":"12K/0us","stat":"p50","a":"x","b":"y","difference_ns":{"median":-5,"ci_low":-7,"ci_high":-3},"verdict":"lower"}`
	if err := json.Unmarshal([]byte(old), &c); err != nil || c.Diff.Median != -5 || c.Unit != "ns" || c.Verdict != "lower" || c.Point != "12K/0us" {
		t.Errorf("the latency report's first layout: %+v, %v", c, err)
	}
}

func TestCSV(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCSV(&b, []string{"a", "b"}, [][]string{{"1", "x,y"}}); err != nil || b.String() != "a,b\n1,\"x,y\"\n" {
		t.Errorf("WriteCSV: %q, %v", b.String(), err)
	}
}

func TestWriteChartsEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := WriteCharts(dir, BarGrid{Name: "bars"}, RatioChart{Name: "ratios"}); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("charts without data wrote %d files", len(ents))
	}
}
