package cpuprofile

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPerfScript reads perf script's output (testdata/perf-script.txt:
// two samples of a real tapfwd, a packet socket recvmsg and a TAP
// write, then made-up ones) and groups it: by path over the run's own
// tasks, by task over all, and the kernel's top functions.
func TestPerfScript(t *testing.T) {
	f, err := os.Open("testdata/perf-script.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	samples, err := ParsePerfScript(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 9 {
		t.Fatalf("%d samples, want 9", len(samples))
	}
	s := samples[1]
	if s.Comm != "tapfwd" || s.TID != 954 || s.CPU != 0 || len(s.Kernel) != 27 || s.Kernel[2] != "_raw_spin_unlock_irqrestore" ||
		s.User[4] != module+"tap.(*Queue).Write" || samples[5].TID != -1 || samples[4].Kernel[1] != "default_idle" || samples[6].Kernel[0] != "br_handle_frame" {
		t.Errorf("samples: %+v", samples)
	}
	own := map[int]string{954: TaskTapfwd, 968: TaskIperf}
	v := KernelSummary(samples, own, 2, 3)
	if v.Samples != 9 || v.OwnSamples != 5 || math.Abs(v.OwnCores-5.0/perfHz/2) > 1e-12 {
		t.Errorf("summary: %d samples, %d own, %v cores", v.Samples, v.OwnSamples, v.OwnCores)
	}
	paths := map[string]float64{}
	for _, p := range v.Paths {
		paths[p.Name] = p.Percent
	}
	for name, want := range map[string]float64{KTAPWrite: 20, KPacketRecv: 20, KSend: 20, KIdle: 20, KBridge: 20, KSched: 0, KUser: 0} {
		if math.Abs(paths[name]-want) > 1e-9 {
			t.Errorf("path %q: %v%%, want %v%%", name, paths[name], want)
		}
	}
	tasks := map[string]TaskShare{}
	for _, ts := range v.Tasks {
		tasks[ts.Name] = ts
	}
	ninth := 100.0 / 9
	for name, want := range map[string][2]float64{
		TaskTapfwd: {2 * ninth, 0}, TaskIperf: {ninth, 0}, TaskIdle: {ninth, 0}, TaskSoftirqd: {ninth, 0}, TaskPerf: {ninth, 0},
		TaskOther: {2 * ninth, ninth}, TaskNAPI: {0, 0},
	} {
		if ts := tasks[name]; math.Abs(ts.Kernel-want[0]) > 1e-9 || math.Abs(ts.User-want[1]) > 1e-9 {
			t.Errorf("task %q: %+v, want %v%% kernel, %v%% user", name, ts, want[0], want[1])
		}
	}
	if len(v.Top) != 3 || v.Top[0].FlatPct != 20 {
		t.Errorf("top: %+v", v.Top)
	}
	for _, bad := range []string{"no header here\n", "tapfwd x [0]\n"} {
		if _, err := ParsePerfScript(strings.NewReader(bad)); err == nil {
			t.Errorf("ParsePerfScript(%q) took it", bad)
		}
	}
}

// TestProbePerf asks this machine's perf: either it samples (a note
// saying how) or the note says why not. Where it samples, a recording
// of a second reads back with samples.
func TestProbePerf(t *testing.T) {
	p, note := ProbePerf(context.Background())
	if note == "" {
		t.Fatal("no note")
	}
	t.Logf("perf: %s", note)
	if p == nil {
		if !strings.Contains(note, "perf") {
			t.Errorf("note %q names no cause", note)
		}
		return
	}
	file := t.TempDir() + "/perf.data"
	if err := p.Record(context.Background(), file, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	samples, err := p.Samples(context.Background(), file)
	if err != nil || len(samples) == 0 {
		t.Fatalf("%d samples, %v", len(samples), err)
	}
}

// TestTaskOf: the run's own threads go to the group ownThreads gave them,
// whatever their name: tapfwd's busy-poll thread (tapfwd-busypoll) is
// tapfwd, rr's threads (tapfwd-bench's) are the load; a tapfwd or an
// iperf3 that is not the run's is another process.
func TestTaskOf(t *testing.T) {
	own := map[int]string{10: TaskTapfwd, 11: TaskTapfwd, 20: TaskIperf, 21: TaskIperf}
	for _, tc := range []struct {
		comm string
		tid  int
		want string
	}{
		{"tapfwd", 10, TaskTapfwd},
		{"tapfwd-busypoll", 11, TaskTapfwd},
		{"iperf3", 20, TaskIperf},
		{"tapfwd-bench", 21, TaskIperf},
		{"tapfwd", 30, TaskOther},
		{"iperf3", 31, TaskOther},
		{"ksoftirqd/1", 32, TaskSoftirqd},
		{"napi/w1-8193", 33, TaskNAPI},
		{"swapper/0", 0, TaskIdle},
		{"perf", 34, TaskPerf},
	} {
		if got := taskOf(PerfSample{Comm: tc.comm, TID: tc.tid}, own); got != tc.want {
			t.Errorf("%s (tid %d): %q, want %q", tc.comm, tc.tid, got, tc.want)
		}
	}
}
