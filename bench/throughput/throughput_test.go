package throughput

import (
	"bytes"
	"context"
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/cost"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
)

// synthetic builds a report from made-up runs: 5 repetitions, every
// configuration but queues-2 (skipped), TCP 64 B and 4 KB one stream both
// ways plus UDP; naive loses one UDP run.
func synthetic(t *testing.T) *Report {
	t.Helper()
	r := &Report{
		Header: report.Header{Schema: Schema, Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
			Finished: time.Date(2026, 11, 30, 12, 7, 0, 0, time.UTC),
			Host:     report.Host{Kernel: "6.18.0-test", Machine: "x86_64", CPUs: 2, Go: "go1.26", TUNFeatures: []string{"TAP", "NAPI"}}},
		Configs:   Configs(DefaultTAPNAPI),
		Workloads: Workloads([]int{64, 4096}, []int{1}, DefaultDirs, true),
		Settings: Settings{Method: report.Method{Reps: 5, Seed: 1, Resamples: 1000, Level: stats.Level}, RunSeconds: 1,
			OmitSeconds: 1, Paired: true, Interval: SteinInterval, MinReps: stats.MinReps, TargetHalfWidth: stats.TargetHalfWidth},
	}
	r.Config(Queues2).Skipped = "the kernel lacks IFF_MULTI_QUEUE (TUNGETFEATURES 0x7073)"
	for _, n := range []string{PacketBusy, XDPBlock, XDPKernel, XDPKernelCPU, XDPThreaded} {
		r.Config(n).Skipped = "not in this synthetic run"
	}
	base := map[string]float64{NAPIOff: 2, NAPIOn: 3, NAPIThreaded: 2.05, NAPIGRO: 1, VnetOff: 1.5, Naive: 1, Bridge: 4, Direct: 5}
	costBase := map[string]float64{NAPIOff: 0.5, NAPIOn: 0.45, NAPIThreaded: 0.5, NAPIGRO: 0.6, VnetOff: 0.7, Naive: 1.2, Bridge: 0.3, Direct: 0.2}
	for rep := 1; rep <= 5; rep++ {
		for _, c := range r.Configs {
			if c.Skipped != "" {
				continue
			}
			for _, w := range r.Workloads {
				// Every configuration drifts up 1% a repetition but
				// napi-threaded, which drifts down: its small edge over
				// napi-off (2.5%) changes sign within a repetition, so
				// the paired comparison finds no difference.
				drift := 1 + 0.01*float64(rep)
				if c.Name == NAPIThreaded {
					drift = 1 + 0.01*float64(6-rep)
				}
				run := record{Config: c.Name, Row: w.Name, Rep: rep, Sample: sample{
					Value: base[c.Name] * float64(w.Len) / 64 * drift, Retransmits: rep, SenderCPU: 50, ReceiverCPU: 40}}
				if w.Proto == "udp" {
					run.Sample.LossPercent = 10
				}
				// Cost: the machine's CPU per unit, in three parts that
				// add up; the forwarder's share for tapfwd and naive.
				k := costBase[c.Name] * (1 + 0.02*float64(rep))
				run.Sample.Cost = cost.PerUnit{User: k / 4, System: k / 4, Softirq: k / 2, Total: k}
				if c.Kind == report.KindTapfwd || c.Kind == report.KindNaive {
					run.Sample.Cost.Process, run.Sample.Cost.ProcessUser, run.Sample.Cost.ProcessSystem = k/3, k/12, k/4
				}
				run.Sample.HasCost = true
				if c.Name == Naive && w.Name == "udp-64B-l2w" && rep == 2 {
					run = record{Config: c.Name, Row: w.Name, Rep: rep, Err: "iperf3: unable to connect"}
				}
				r.runs = append(r.runs, run)
			}
		}
	}
	r.analyze(stats.Bootstrap{Seed: 1, Resamples: 1000})
	return r
}

func TestAnalyze(t *testing.T) {
	r := synthetic(t)
	if got, want := len(r.Cells), 8*len(r.Workloads); got != want {
		t.Fatalf("%d cells, want %d (8 configurations that ran x %d workloads)", got, want, len(r.Workloads))
	}
	if r.Cell(Queues2, r.Workloads[0].Name) != nil {
		t.Error("the skipped configuration has cells")
	}
	for _, c := range r.Cells {
		if c.Value == nil || !(c.Value.Low <= c.Value.Median && c.Value.Median <= c.Value.High) {
			t.Errorf("%s/%s: value %+v", c.Config, c.Workload, c.Value)
		}
		if c.RatioToBridge == nil || !(c.RatioToBridge.Low <= c.RatioToBridge.Median && c.RatioToBridge.Median <= c.RatioToBridge.High) {
			t.Errorf("%s/%s: ratio to bridge %+v", c.Config, c.Workload, c.RatioToBridge)
		}
	}
	w := r.Workloads[0].Name
	if c := r.Cell(Bridge, w); *c.RatioToBridge != (stats.Estimate{Median: 1, Low: 1, High: 1}) {
		t.Errorf("bridge's ratio to itself %+v", c.RatioToBridge)
	}
	if c := r.Cell(NAPIOn, w); math.Abs(c.RatioToBridge.Median-0.75) > 1e-12 || c.Reps != 5 || c.Retransmits != 3 {
		t.Errorf("napi-on: ratio %v, reps %d, retransmits %v; want 0.75, 5, 3", c.RatioToBridge.Median, c.Reps, c.Retransmits)
	}
	nv := r.Cell(Naive, "udp-64B-l2w")
	if nv.Reps != 4 || len(nv.Failures) != 1 || !strings.Contains(nv.Failures[0], "rep 2: iperf3: unable to connect") {
		t.Errorf("naive UDP: reps %d, failures %q; want 4 and the rep 2 failure", nv.Reps, nv.Failures)
	}
	if nv.LossPercent != 10 {
		t.Errorf("naive UDP loss %v, want 10", nv.LossPercent)
	}
	for _, tc := range []struct{ a, want string }{
		{NAPIOn, stats.Faster}, {NAPIGRO, stats.Slower}, {NAPIThreaded, stats.NoDifference},
	} {
		for _, wl := range r.Workloads {
			c := r.Comparison(tc.a, NAPIOff, wl.Name)
			if c == nil {
				t.Fatalf("no comparison %s against %s on %s", tc.a, NAPIOff, wl.Name)
			}
			if c.Verdict != tc.want {
				t.Errorf("%s against napi-off on %s: %q (difference %+v), want %q", tc.a, wl.Name, c.Verdict, c.Diff, tc.want)
			}
		}
	}
	on := r.Comparison(NAPIOn, NAPIOff, w)
	if math.Abs(on.Percent.Median-50) > 1e-9 || math.Abs(on.Ratio.Median-1.5) > 1e-12 {
		t.Errorf("napi-on against napi-off: %+v, want +50%%, ratio 1.5", on)
	}
}

func TestThroughputSkipsWhatTheKernelLacks(t *testing.T) {
	all := Configs(DefaultTAPNAPI)
	cfgs, err := report.SelectConfigs(all, []string{NAPIThreaded, NAPIOn})
	if err != nil {
		t.Fatal(err)
	}
	// No IFF_NAPI: both are skipped before any bed is built, so this runs
	// without privileges.
	r, err := Run(context.Background(), Options{Common: matrix.Common{Configs: cfgs, TUNFeatures: unix.IFF_TAP | unix.IFF_VNET_HDR}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Configs) != 2 || r.Configs[0].Name != NAPIOn || r.Configs[1].Name != NAPIThreaded {
		t.Fatalf("configs %+v, want napi-on and napi-threaded in report order", r.Configs)
	}
	for _, c := range r.Configs {
		if !strings.Contains(c.Skipped, "IFF_NAPI") {
			t.Errorf("%s: skipped %q, want a reason naming IFF_NAPI", c.Name, c.Skipped)
		}
	}
	if len(r.Cells) != 0 || len(r.runs) != 0 {
		t.Errorf("skipped configurations produced %d cells, %d runs", len(r.Cells), len(r.runs))
	}
	var out bytes.Buffer
	if err := r.Document().WriteText(&out); err != nil || !strings.Contains(out.String(), "SKIPPED: the kernel lacks IFF_NAPI") {
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
	cfgs, err := report.SelectConfigs(Configs(DefaultTAPNAPI), []string{Naive, Direct})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), Options{Common: matrix.Common{Configs: cfgs, Lab: matrix.Lab{Topology: matrix.VXLAN}}})
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
	if err := r.Document().WriteText(&out); err != nil || !strings.Contains(out.String(), "Topology vxlan: two hosts") ||
		!strings.Contains(out.String(), "SKIPPED: no direct path across the two hosts") {
		t.Errorf("text report (%v):\n%s", err, out.String())
	}
}

func TestWorkloads(t *testing.T) {
	w := Workloads([]int{64, 4096}, []int{1, 4}, DefaultDirs, true)
	if len(w) != 2*2*2+2 {
		t.Fatalf("%d workloads, want 10", len(w))
	}
	if w[0].Name != "tcp-64B-P1-w2l" || w[3].Name != "tcp-4KB-P4-w2l" || w[4].Direction != LabToWire || w[9].Name != "udp-64B-l2w" || w[9].Unit != Kpps {
		t.Errorf("unexpected workloads: %+v", w)
	}
}

// TestNICGROLevers: the NIC GRO lever is a pair, tapfwd with --nic-gro on
// and the bridge with GRO turned on on its port to the wire (the bed's
// NIC) before the run, so that each is measured against the other under
// the same setting; a tapfwd without --nic-gro skips the first.
func TestNICGROLevers(t *testing.T) {
	cs, err := report.SelectConfigs(KnownConfigs(DefaultTAPNAPI, DefaultLevers()), []string{NICGRO, BridgeNICGRO})
	if err != nil || len(cs) != 2 {
		t.Fatalf("select: %+v, %v", cs, err)
	}
	if got := strings.Join(cs[0].Args, " "); cs[0].Kind != report.KindTapfwd || got != "--nic-gro on" || len(cs[0].Setup) != 0 {
		t.Errorf("%s: kind %s, args %q, setup %q", NICGRO, cs[0].Kind, got, cs[0].Setup)
	}
	if b := cs[1]; b.Kind != report.KindBridge || len(b.Setup) != 1 || strings.Join(b.Setup[0], " ") != "ethtool -K "+report.NICToken+" gro on" {
		t.Errorf("%s: kind %s, setup %q", BridgeNICGRO, b.Kind, b.Setup)
	}
	if matrix.CheckFlags(&cs[0], map[string]bool{"nic": true}) || !strings.Contains(cs[0].Skipped, "--nic-gro") {
		t.Errorf("a tapfwd without --nic-gro: %q, want it skipped", cs[0].Skipped)
	}
}

func TestFormats(t *testing.T) {
	r := synthetic(t)
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
	if len(recs) != len(r.Cells)+1 || strings.Join(recs[0], ",") != strings.Join(CSVHeader, ",") {
		t.Fatalf("CSV: %d records, header %v", len(recs), recs[0])
	}
	for _, rec := range recs[1:] {
		if rec[0] == NAPIOn && rec[16] != stats.Faster {
			t.Errorf("CSV napi-on row without its verdict: %v", rec)
		}
		if rec[0] == Naive && rec[2] == "udp-64B-l2w" && !strings.Contains(rec[23], "rep 2") {
			t.Errorf("CSV naive UDP row without its failure: %v", rec)
		}
	}

	var md bytes.Buffer
	if err := r.Document().WriteMarkdown(&md); err != nil {
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
	if err := r.Document().WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"IFF_NAPI off -> on: UDP 64B, wire->lab", "All configurations: TCP lab->wire", "no significant difference", "rep 2: iperf3: unable to connect"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, txt.String())
		}
	}
}

// csvRecords are r's WriteCSV, read back.
func csvRecords(t *testing.T, r *Report) [][]string {
	t.Helper()
	var cb bytes.Buffer
	if err := r.WriteCSV(&cb); err != nil {
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
func roundTrip(t *testing.T, r *Report) (*Report, *bytes.Buffer) {
	t.Helper()
	var js bytes.Buffer
	if err := report.WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "r.json")
	if err := os.WriteFile(p, js.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	return back, &js
}

func TestWriteCharts(t *testing.T) {
	dir := t.TempDir()
	if err := synthetic(t).WriteCharts(dir); err != nil {
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
