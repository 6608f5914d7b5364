package throughput_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/bench/throughputview"
)

// The reports the runs make, as package throughputview renders them.

// view is r with its renderings.
func view(r *throughput.Report) throughputview.Report { return throughputview.Report{Report: r} }

// TestGuard checks the guard's analysis: tapfwd is compared with the
// bridge in pairs on every row (and the sequential rule takes those
// pairs), the targets are judged by the whole interval, and a saved
// report gives back the per-repetition ratios that compare reads.
func TestGuard(t *testing.T) {
	r := throughput.GuardRun(t)
	if r.Settings.Reps != stats.Stage1Reps || r.Settings.Sequential.Stopped != matrix.StopTarget || len(r.Comparisons) != len(throughput.GuardRatios) {
		t.Fatalf("%d repetitions, stopped by %q, %d comparisons; want %d, target, %d",
			r.Settings.Reps, r.Settings.Sequential.Stopped, len(r.Comparisons), stats.Stage1Reps, len(throughput.GuardRatios))
	}
	for w, want := range throughput.GuardRatios {
		c := r.Comparison(throughput.Default, throughput.Bridge, w)
		if c == nil || math.Abs(c.Ratio.Median/want-1) > 0.02 || c.Pairs != stats.Stage1Reps {
			t.Errorf("%s: comparison %+v, want a ratio near %v over %d pairs", w, c, want, stats.Stage1Reps)
		}
	}
	var txt bytes.Buffer
	if err := view(r).Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for w, want := range map[string][]string{
		"tcp-default-P1-w2l": {">= 0.95 no", "<= 1.05 no"},
		"tcp-default-P1-l2w": {">= 0.95 yes", "<= 1.05 yes"},
		"tcp-mtu-P1-w2l":     {">= 1.00 open", "<= 1.05 no"},
		"tcp-default-P4-w2l": {">= 0.90 yes"},
		"udp-64B-w2l":        {">= 0.90 no", "] - -"}, // no cost target
	} {
		line := fieldLine(txt.String(), w, throughput.Default)
		for _, s := range want {
			if !strings.Contains(line, s) {
				t.Errorf("%s: the bridge table's row %q lacks %q", w, line, s)
			}
		}
	}
	for _, s := range []string{"Against the bridge", "every forwarder against the bridge"} {
		if !strings.Contains(txt.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, txt.String())
		}
	}
	back, _ := roundTrip(t, r)
	got := back.BridgeRatios(throughput.Default, "udp-64B-w2l")
	want := r.BridgeRatios(throughput.Default, "udp-64B-w2l")
	if len(got) != stats.Stage1Reps || len(want) != len(got) {
		t.Fatalf("bridge ratios from JSON %v, as run %v", got, want)
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-12 || math.Abs(got[i]-0.5) > 0.05 {
			t.Errorf("bridge ratio %d: %v from JSON, %v as run, want about 0.5", i, got[i], want[i])
		}
	}
	dir := t.TempDir()
	if err := view(r).WriteCharts(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "napi.png")); err == nil {
		t.Error("a run without the TAP NAPI modes drew their chart")
	}
}

// fieldLine is the first line of text whose first fields are these, its
// fields joined by single spaces.
func fieldLine(text string, first ...string) string {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(first) && strings.Join(f[:len(first)], " ") == strings.Join(first, " ") {
			return strings.Join(f, " ")
		}
	}
	return ""
}

// TestSequentialRun checks the sequential default run end to end on
// made-up figures: a clear difference stops after the first stage with
// its verdict; moderate noise stops at the pairs its first stage asked
// for; noise that the target cannot be reached through runs to the
// budget and is reported too wide, with the pairs it would have needed.
func TestSequentialRun(t *testing.T) {
	w := "tcp-4KB-P1-w2l"
	r := throughput.SequentialRun(t, 1.3, 0.01, time.Minute, 0)
	c := r.Comparison(throughput.NAPIOn, throughput.NAPIOff, w)
	if r.Settings.Reps != stats.Stage1Reps || r.Settings.Sequential.Stopped != matrix.StopTarget ||
		c.Verdict != stats.Faster || c.Stopped != matrix.StopTarget || c.Pairs != 6 {
		t.Errorf("+30%%, 1%% noise: %d repetitions, stopped by %q; comparison %+v", r.Settings.Reps, r.Settings.Sequential.Stopped, c)
	}

	r = throughput.SequentialRun(t, 1.1, 0.06, time.Minute, 0)
	c = r.Comparison(throughput.NAPIOn, throughput.NAPIOff, w)
	if c.Needed <= 6 || r.Settings.Reps != c.Needed || c.Pairs != c.Needed || c.HalfWidth > stats.TargetHalfWidth || c.Stopped != matrix.StopTarget {
		t.Errorf("+10%%, 6%% noise: %d repetitions; comparison %+v; want the pairs needed, within the target", r.Settings.Reps, c)
	}

	r = throughput.SequentialRun(t, 1, 0.4, 300*time.Millisecond, 10*time.Millisecond)
	c = r.Comparison(throughput.NAPIOn, throughput.NAPIOff, w)
	if r.Settings.Sequential.Stopped != matrix.StopBudget || r.Settings.Reps < stats.Stage1Reps || r.Settings.Reps > 30 ||
		c.Verdict != stats.TooWide || c.Stopped != matrix.StopBudget || c.Needed <= c.Pairs {
		t.Errorf("40%% noise, 0.3 s budget at 10 ms a repetition: %d repetitions, stopped by %q; comparison %+v",
			r.Settings.Reps, r.Settings.Sequential.Stopped, c)
	}
	var txt bytes.Buffer
	if err := view(r).Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sequential: a first stage of 6", "stopped as the next would have overrun the budget",
		"(needs " + strconv.Itoa(c.Needed) + " pairs; budget)", "Stein's two-stage 95% interval", strconv.Itoa(c.Pairs) + "/" + strconv.Itoa(c.Needed), "Repetitions per configuration"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, txt.String())
		}
	}
	n := strconv.Itoa(r.Settings.Reps)
	if !hasRow(txt.String(), throughput.NAPIOn, n, n, "0") {
		t.Errorf("no repetitions row for napi-on: %s repetitions, %s runs, none failed", n, n)
	}
}

// hasRow reports whether text has a line of exactly these fields.
func hasRow(text string, fields ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.Join(strings.Fields(line), " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

// TestTwoModes checks that a cell whose runs fall in two modes says so,
// with the runs of each, and that the report shows what differs between
// the modes in the traces: here the client beside the worker.
func TestTwoModes(t *testing.T) {
	r := throughput.BimodalReport(t)
	c := r.Cell(throughput.NAPIOff, "tcp-128B-P1-w2l")
	if len(c.Modes) != 2 || c.Modes[0].Runs != 4 || fmt.Sprint(c.Modes[0].Reps) != "[2 3 5 8]" || math.Abs(c.Modes[1].Median-0.5858) > 0.01 {
		t.Fatalf("modes %+v", c.Modes)
	}
	var txt bytes.Buffer
	if err := view(r).Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	out := txt.String()
	if !strings.Contains(out, "Runs in two modes") || !strings.Contains(out, "x4 (reps 2,3,5,8)") {
		t.Errorf("text lacks the modes:\n%s", out)
	}
	// The mode table: the client beside the worker 100% of the time in the
	// slow mode, 0% in the fast one.
	var slowRow, fastRow string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 6 && f[0] == throughput.NAPIOff && f[2] == "slow" {
			slowRow = line
		}
		if len(f) > 6 && f[0] == throughput.NAPIOff && f[2] == "fast" {
			fastRow = line
		}
	}
	if f := strings.Fields(slowRow); len(f) < 8 || f[7] != "100" {
		t.Errorf("slow mode row %q: want client beside worker 100", slowRow)
	}
	if f := strings.Fields(fastRow); len(f) < 8 || f[7] != "0.0" {
		t.Errorf("fast mode row %q: want client beside worker 0.0", fastRow)
	}
	if strings.Contains(out, "Trace of every run") {
		t.Error("the per-run trace without Trace set")
	}
	r.Trace = true
	txt.Reset()
	view(r).Document().WriteText(&txt)
	_, tr, _ := strings.Cut(txt.String(), "Trace of every run")
	tr, _, _ = strings.Cut(tr, "Configurations")
	if n := strings.Count(tr, "\nnapi-on   tcp-128B-P1-w2l"); n != 8 {
		t.Errorf("trace section: %d napi-on rows, want 8:\n%s", n, txt.String())
	}
}

// TestPackingSection checks that the runs of a cell are split by how the
// sender's TCP packed them, with each state's median and repetitions, and
// that the per-run trace names each run's state; a cell whose traces do
// not tell is left out.
func TestPackingSection(t *testing.T) {
	r := throughput.BimodalReport(t)
	r.Trace = true
	var txt bytes.Buffer
	if err := view(r).Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(txt.String(), "Runs by how the sender's TCP packed its data")
	sec, _, _ = strings.Cut(sec, "\n\n")
	if !ok {
		t.Fatalf("no packing section:\n%s", txt.String())
	}
	var row string
	for _, line := range strings.Split(sec, "\n") {
		if strings.HasPrefix(line, throughput.NAPIOn) {
			t.Errorf("napi-on, whose traces lack Tcp.OutSegs, listed: %q", line)
		}
		if strings.HasPrefix(line, throughput.NAPIOff) {
			row = line
		}
	}
	// Slow reps 2,3,5,8 at 0.36 x 1.02, 1, 1.02, 1.02 (median 0.3672), fast
	// 1,4,6,7 at 0.58 x 1.01, 1.01, 1, 1.01 (0.5858): 0.627.
	for _, want := range []string{"x4 (reps 2,3,5,8)", "x4 (reps 1,4,6,7)", "0.627"} {
		if !strings.Contains(row, want) {
			t.Errorf("napi-off row %q lacks %q", row, want)
		}
	}
	_, tr, _ := strings.Cut(txt.String(), "Trace of every run")
	if n, m := strings.Count(tr, "slow  per-segment"), strings.Count(tr, "fast  coalesced"); n != 4 || m != 4 {
		t.Errorf("trace table: %d slow per-segment and %d fast coalesced napi-off runs, want 4 and 4:\n%s", n, m, tr)
	}
}

// TestRunsRoundTrip writes a report with its traced runs as JSON and
// reads it back: the runs, their traces and the modes come back, and the
// trace renders from them.
func TestRunsRoundTrip(t *testing.T) {
	r := throughput.BimodalReport(t)
	back, _ := roundTrip(t, r)
	if len(back.Runs) != 16 || back.Runs[0].Trace == nil || len(back.Runs[0].Trace.Threads) != 2 || len(back.Cell(throughput.NAPIOff, "tcp-128B-P1-w2l").Modes) != 2 {
		t.Fatalf("read back: %d runs, first %+v", len(back.Runs), back.Runs[0])
	}
	back.Trace = true
	var a, b bytes.Buffer
	r.Trace = true
	view(r).Document().WriteText(&a)
	view(back).Document().WriteText(&b)
	if a.String() != b.String() {
		t.Errorf("rendered from JSON:\n%s\nwant:\n%s", b.String(), a.String())
	}
}

// TestReadSchemaV2 renders the committed runs of schema 2 again (the
// default run and the VXLAN one): their comparisons as they were made,
// under the rule and the words of then.
func TestReadSchemaV2(t *testing.T) {
	for _, path := range []string{"../../docs/results/2026-12-01-throughput-schema-2/throughput.json", "../../docs/results/2026-12-01-throughput-vxlan/throughput.json"} {
		r, err := throughput.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if r.Schema != throughput.SchemaV2 || r.Settings.Interval != "" || r.Settings.Sequential != nil || len(r.Runs) != 0 {
			t.Errorf("%s: schema %q, settings %+v", path, r.Schema, r.Settings)
		}
		var txt, md bytes.Buffer
		if err := view(r).Document().WriteText(&txt); err != nil {
			t.Fatal(err)
		}
		if err := view(r).Document().WriteMarkdown(&md); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"the median of the per-repetition differences", "9 repetitions interleaved", "iperf3 pinned: the wire side (client) to CPU 0"} {
			if !strings.Contains(txt.String(), want) {
				t.Errorf("%s: text lacks %q", path, want)
			}
		}
		if strings.Contains(txt.String(), "Stein") || strings.Contains(txt.String(), "Placement ") {
			t.Errorf("%s: rendered with what it was not made by", path)
		}
	}
	r, _ := throughput.Read("../../docs/results/2026-12-01-throughput-schema-2/throughput.json")
	var txt bytes.Buffer
	view(r).Document().WriteText(&txt)
	if !strings.Contains(txt.String(), "+0.015 [-0.085, +0.122] (+2.7%)  18%   9      interval +-18%: too wide for a verdict at the +-7.5% target") {
		t.Errorf("the committed 128 B row is not as committed:\n%s", txt.String())
	}
}

func TestThroughputSkipsWhatTheKernelLacks(t *testing.T) {
	all := throughput.Configs(throughput.DefaultTAPNAPI)
	cfgs, err := report.SelectConfigs(all, []string{throughput.NAPIThreaded, throughput.NAPIOn})
	if err != nil {
		t.Fatal(err)
	}
	// No IFF_NAPI: both are skipped before any bed is built, so this runs
	// without privileges.
	r, err := throughput.Run(context.Background(), throughput.Options{Common: matrix.Common{Configs: cfgs, TUNFeatures: unix.IFF_TAP | unix.IFF_VNET_HDR}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Configs) != 2 || r.Configs[0].Name != throughput.NAPIOn || r.Configs[1].Name != throughput.NAPIThreaded {
		t.Fatalf("configs %+v, want napi-on and napi-threaded in report order", r.Configs)
	}
	for _, c := range r.Configs {
		if !strings.Contains(c.Skipped, "IFF_NAPI") {
			t.Errorf("%s: skipped %q, want a reason naming IFF_NAPI", c.Name, c.Skipped)
		}
	}
	if len(r.Cells) != 0 || len(r.Runs) != 0 {
		t.Errorf("skipped configurations produced %d cells, %d runs", len(r.Cells), len(r.Runs))
	}
	var out bytes.Buffer
	if err := view(r).Document().WriteText(&out); err != nil || !strings.Contains(out.String(), "SKIPPED: the kernel lacks IFF_NAPI") {
		t.Errorf("text report does not show the skip (%v):\n%s", err, out.String())
	}
	if _, err := report.SelectConfigs(all, []string{"napi-maybe"}); err == nil || !strings.Contains(err.Error(), "known: napi-off") {
		t.Errorf("unknown configuration: %v", err)
	}
}

// TestThroughputVXLANSkips runs the direct veth and the naive forwarder on
// the VXLAN topology: both are skipped with the reason before any bed is
// built, and the report names the topology.
func TestThroughputVXLANSkips(t *testing.T) {
	cfgs, err := report.SelectConfigs(throughput.Configs(throughput.DefaultTAPNAPI), []string{throughput.Naive, throughput.Direct})
	if err != nil {
		t.Fatal(err)
	}
	r, err := throughput.Run(context.Background(), throughput.Options{Common: matrix.Common{Configs: cfgs, Lab: matrix.Lab{Topology: matrix.VXLAN}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Settings.Topology != "vxlan" || len(r.Cells) != 0 {
		t.Errorf("topology %q, %d cells", r.Settings.Topology, len(r.Cells))
	}
	for _, c := range r.Configs {
		if c.Skipped == "" {
			t.Errorf("%s ran on the VXLAN topology", c.Name)
		}
	}
	var out bytes.Buffer
	if err := view(r).Document().WriteText(&out); err != nil || !strings.Contains(out.String(), "Topology vxlan: two hosts") ||
		!strings.Contains(out.String(), "SKIPPED: no direct path across the two hosts") {
		t.Errorf("text report (%v):\n%s", err, out.String())
	}
}

func TestFormats(t *testing.T) {
	r := throughput.Synthetic(t)
	back, js := roundTrip(t, r)
	if len(back.Cells) != len(r.Cells) || len(back.Comparisons) != len(r.Comparisons) || back.Host.Kernel != "6.18.0-test" {
		t.Errorf("JSON round trip lost data: %d cells, %d comparisons", len(back.Cells), len(back.Comparisons))
	}
	for _, key := range []string{`"ratio_to_bridge"`, `"ci_low"`, `"reps": 5`, `"verdict": "faster"`, `"skipped": "the kernel lacks`} {
		if !strings.Contains(js.String(), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}

	recs := csvRecords(t, r)
	if len(recs) != len(r.Cells)+1 || strings.Join(recs[0], ",") != strings.Join(throughputview.CSVHeader, ",") {
		t.Fatalf("CSV: %d records, header %v", len(recs), recs[0])
	}
	for _, rec := range recs[1:] {
		if rec[0] == throughput.NAPIOn && rec[16] != stats.Faster {
			t.Errorf("CSV napi-on row without its verdict: %v", rec)
		}
		if rec[0] == throughput.Naive && rec[2] == "udp-64B-l2w" && !strings.Contains(rec[23], "rep 2") {
			t.Errorf("CSV naive UDP row without its failure: %v", rec)
		}
	}

	var md bytes.Buffer
	if err := view(r).Document().WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	m := md.String()
	for _, want := range []string{"kernel 6.18.0-test", "### IFF_NAPI off -> on: TCP wire->lab, 1 stream", "| -l | napi-off | napi-on |", "| 64B | ", "faster", "SKIPPED: the kernel lacks IFF_MULTI_QUEUE"} {
		if !strings.Contains(m, want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	// Every table row has as many cells as its header.
	cols := 0
	for _, line := range strings.Split(m, "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|")
		if cols == 0 {
			cols = n
		} else if n != cols {
			t.Errorf("Markdown row with %d separators under a header with %d: %s", n, cols, line)
		}
	}

	var txt bytes.Buffer
	if err := view(r).Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"IFF_NAPI off -> on: UDP 64B, wire->lab", "All configurations: TCP lab->wire", "no significant difference", "rep 2: iperf3: unable to connect"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, txt.String())
		}
	}
}

// csvRecords are r's WriteCSV, read back.
func csvRecords(t *testing.T, r *throughput.Report) [][]string {
	t.Helper()
	var cb bytes.Buffer
	if err := view(r).WriteCSV(&cb); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&cb).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// roundTrip writes r as JSON to a file, reads it back with Read and
// returns what it read and the JSON.
func roundTrip(t *testing.T, r *throughput.Report) (*throughput.Report, *bytes.Buffer) {
	t.Helper()
	var js bytes.Buffer
	if err := report.WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "r.json")
	if err := os.WriteFile(p, js.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := throughput.Read(p)
	if err != nil {
		t.Fatal(err)
	}
	return back, &js
}

func TestWriteCharts(t *testing.T) {
	dir := t.TempDir()
	if err := view(throughput.Synthetic(t)).WriteCharts(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"throughput", "napi"} {
		png, err := os.ReadFile(filepath.Join(dir, name+".png"))
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s.png: not a PNG (%v)", name, err)
		}
		svg, err := os.ReadFile(filepath.Join(dir, name+".svg"))
		if err != nil || !bytes.Contains(svg, []byte("<svg")) {
			t.Errorf("%s.svg: not an SVG (%v)", name, err)
		}
	}
}

// TestCostCells checks the cost of every configuration, the bridge and
// the direct veth included: the machine's figure with its interval, its
// parts, the forwarder's share where there is a forwarder, and the ratio
// to the bridge.
func TestCostCells(t *testing.T) {
	r := throughput.Synthetic(t)
	for _, c := range r.Cells {
		k := c.Cost
		if k == nil {
			t.Errorf("%s/%s: no cost", c.Config, c.Workload)
			continue
		}
		want := throughput.PerGbit
		if strings.HasPrefix(c.Workload, "udp") {
			want = throughput.PerMpkt
		}
		if k.Unit != want || len(k.Samples) != c.Reps || !(k.Machine.Low <= k.Machine.Median && k.Machine.Median <= k.Machine.High) {
			t.Errorf("%s/%s: cost %+v", c.Config, c.Workload, k)
		}
		if math.Abs(k.User+k.System+k.Softirq-k.Machine.Median) > 1e-9 {
			t.Errorf("%s/%s: parts %v + %v + %v, machine %v", c.Config, c.Workload, k.User, k.System, k.Softirq, k.Machine.Median)
		}
		kind := r.Config(c.Config).Kind
		if hasFwd := report.Userspace(kind); hasFwd != (k.Forwarder > 0) {
			t.Errorf("%s/%s (%s): forwarder's share %v", c.Config, c.Workload, kind, k.Forwarder)
		}
		if math.Abs(k.ForwarderUser+k.ForwarderSystem-k.Forwarder) > 1e-9 || math.Abs(k.ForwarderSystem-3*k.ForwarderUser) > 1e-9 {
			t.Errorf("%s/%s: forwarder %v = user %v + kernel %v?", c.Config, c.Workload, k.Forwarder, k.ForwarderUser, k.ForwarderSystem)
		}
		if k.RatioToBridge == nil || !(k.RatioToBridge.Low <= k.RatioToBridge.Median && k.RatioToBridge.Median <= k.RatioToBridge.High) {
			t.Errorf("%s/%s: cost ratio to the bridge %+v", c.Config, c.Workload, k.RatioToBridge)
		}
	}
	w := r.Workloads[0].Name
	if k := r.Cell(throughput.Bridge, w).Cost; *k.RatioToBridge != (stats.Estimate{Median: 1, Low: 1, High: 1}) {
		t.Errorf("bridge's cost ratio to itself %+v", k.RatioToBridge)
	}
	if k := r.Cell(throughput.NAPIOn, w).Cost; math.Abs(k.RatioToBridge.Median-1.5) > 1e-9 || math.Abs(k.Machine.Median-0.45*1.06) > 1e-9 {
		t.Errorf("napi-on's cost %v, ratio to the bridge %v; want 0.477 and 1.5", k.Machine.Median, k.RatioToBridge.Median)
	}
	if k := r.Cell(throughput.Direct, w).Cost; math.Abs(k.RatioToBridge.Median-2.0/3) > 1e-9 {
		t.Errorf("direct's cost ratio to the bridge %v, want 0.667", k.RatioToBridge.Median)
	}

	var txt bytes.Buffer
	if err := view(r).Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "Cost: CPU seconds of the whole machine per unit delivered") {
		t.Error("text report lacks the cost table")
	}
	rows := 0
	for _, line := range strings.Split(txt.String(), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == "udp-64B-w2l" && f[2] == throughput.PerMpkt {
			rows++
		}
	}
	if rows != 9 {
		t.Errorf("%d cost rows for udp-64B-w2l in s/Mpkt, want one per configuration that ran (9)", rows)
	}
	if strings.Contains(txt.String(), "Forwarder CPU per gigabit delivered") {
		t.Error("text report has the schema 1 forwarder-only table beside the cost table")
	}
	recs := csvRecords(t, r)
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, rec := range recs[1:] {
		if rec[col["cost_unit"]] == "" || rec[col["cost_machine_median"]] == "" || rec[col["cost_ratio_to_bridge"]] == "" {
			t.Errorf("CSV row without its cost: %v", rec)
		}
		if fwd := rec[col["cost_forwarder_median"]] != "0"; fwd != (rec[col["cost_forwarder_system_median"]] != "") {
			t.Errorf("CSV row: forwarder %q, its kernel share %q", rec[col["cost_forwarder_median"]], rec[col["cost_forwarder_system_median"]])
		}
	}
}

// TestVerdictRule checks the verdicts the report gives and how it words
// them: too few repetitions at 3, a verdict at 4 with a narrow interval,
// and an interval wider than the target named with its width instead of
// a verdict.
func TestVerdictRule(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reps   int
		spread float64
		want   string
	}{
		{"3 repetitions", 3, 0.01, stats.TooFewSamples},
		{"4 repetitions", 4, 0.01, stats.Faster},
		{"10 repetitions, noisy", 10, 0.25, stats.TooWide},
	} {
		r := throughput.Noisy(t, tc.reps, tc.spread)
		c := r.Comparison(throughput.NAPIOn, throughput.NAPIOff, r.Workloads[0].Name)
		if c == nil || c.Verdict != tc.want || c.Pairs != tc.reps {
			t.Errorf("%s: comparison %+v, want verdict %q over %d pairs", tc.name, c, tc.want, tc.reps)
			continue
		}
		var txt bytes.Buffer
		if err := view(r).Document().WriteText(&txt); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if tc.want == stats.TooWide {
			want = "interval +-" + report.PctAbs(c.HalfWidth) + ": too wide for a verdict at the +-7.5% target"
			if c.HalfWidth <= 7.5 {
				t.Errorf("%s: half-width %v", tc.name, c.HalfWidth)
			}
		}
		if !strings.Contains(txt.String(), want) || !strings.Contains(txt.String(), "at least 4 pairs") {
			t.Errorf("%s: text report lacks %q or the rule:\n%s", tc.name, want, txt.String())
		}
	}
}

// TestReadSchemaV1 renders the committed run of the first schema again:
// its verdicts as they were made, under the rule they were made by.
func TestReadSchemaV1(t *testing.T) {
	r, err := throughput.Read("../../docs/results/2026-11-30-throughput-first-schema/throughput.json")
	if err != nil {
		t.Fatal(err)
	}
	if r.Schema != throughput.SchemaV1 || r.Settings.Rule() != (stats.Rule{MinReps: 3}) || r.Settings.Paired {
		t.Errorf("schema %q, rule %+v, paired %v", r.Schema, r.Settings.Rule(), r.Settings.Paired)
	}
	var txt, md bytes.Buffer
	if err := view(r).Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := view(r).Document().WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"at least 3 repetitions each", "IFF_NAPI off -> on: TCP wire->lab, 1 stream", "4.27 [3.12, 4.76]", "Forwarder CPU per gigabit delivered", "no significant difference"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text of the schema 1 report lacks %q", want)
		}
	}
	if strings.Contains(txt.String(), "Cost:") || strings.Contains(txt.String(), "too wide") {
		t.Error("schema 1 report rendered with cost or the width target it was not made under")
	}
}

// TestPeerAndFloor: each tapfwd configuration is set against the userspace
// peer that delivered most on the workload (here Open vSwitch, 2.4 to the
// naive forwarder's 1), with both sides' losses; the floor row prices two
// copies per byte at the run's copy bandwidth and sets each userspace
// forwarder's own threads against it.
func TestPeerAndFloor(t *testing.T) {
	r := throughput.Synthetic(t)
	w := r.Workloads[0]
	on := r.Cell(throughput.NAPIOn, w.Name)
	if on.Peer != throughput.OVS || on.RatioToPeer == nil || math.Abs(on.RatioToPeer.Median-3/2.4) > 1e-9 ||
		!(on.RatioToPeer.Low <= on.RatioToPeer.Median && on.RatioToPeer.Median <= on.RatioToPeer.High) {
		t.Errorf("napi-on against the best peer: %q %+v, want ovs at 1.25", on.Peer, on.RatioToPeer)
	}
	for _, name := range []string{throughput.OVS, throughput.Naive, throughput.Bridge} {
		if c := r.Cell(name, w.Name); c.RatioToPeer != nil || c.Peer != "" {
			t.Errorf("%s set against a peer: %q %+v", name, c.Peer, c.RatioToPeer)
		}
	}
	var txt bytes.Buffer
	if err := view(r).Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	out := txt.String()
	_, peer, ok := strings.Cut(out, "Against the best userspace peer")
	if !ok || !strings.Contains(peer, "napi-on") || !strings.Contains(peer, "1.25") {
		t.Errorf("no peer section with napi-on at 1.25:\n%s", out)
	}
	// 10 GB/s: two copies of a gigabit cost 0.025 s.
	_, floor, ok := strings.Cut(out, "The floor: two copies per byte at 10.0 GB/s")
	floor, _, _ = strings.Cut(floor, "\n\n")
	if !ok || !strings.Contains(floor, "0.025") {
		t.Fatalf("no floor section at 0.025 s/Gbit:\n%s", out)
	}
	var rows int
	for _, line := range strings.Split(floor, "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == w.Name {
			rows++
			if f[1] == throughput.Bridge || f[1] == throughput.Direct {
				t.Errorf("floor row of an in-kernel path: %q", line)
			}
		}
	}
	// The floor and 7 userspace configurations that ran (5 tapfwd, naive, ovs).
	if rows != 8 {
		t.Errorf("%d floor rows on %s, want 8:\n%s", rows, w.Name, floor)
	}
	r.Settings.CopyBandwidth = 0
	txt.Reset()
	view(r).Document().WriteText(&txt)
	if strings.Contains(txt.String(), "The floor") {
		t.Error("a floor without a copy bandwidth (a report from before it)")
	}
}
