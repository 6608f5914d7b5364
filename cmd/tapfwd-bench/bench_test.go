package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/tap"
)

// benchCmd runs this test binary as `tapfwd-bench CMD --tapfwd TAPFWD
// ARGS...` (TestMain set TAPFWD_BENCH_TEST_MAIN=1 for children).
func benchCmd(t *testing.T, ctx context.Context, cmd string, args ...string) *exec.Cmd {
	t.Helper()
	return exec.CommandContext(ctx, exe(t), append([]string{cmd, "--tapfwd", testkit.Tapfwd(t)}, args...)...)
}

// runBench runs `tapfwd-bench CMD ARGS...` (benchCmd) for at most limit
// and returns its stdout and stderr; t fails when it does.
func runBench(t *testing.T, limit time.Duration, cmd string, args ...string) (stdout []byte, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var out, errs bytes.Buffer
	c := benchCmd(t, ctx, cmd, args...)
	c.Stdout, c.Stderr = &out, &errs
	start := time.Now()
	if err := c.Run(); err != nil {
		t.Fatalf("tapfwd-bench %s %s: %v\nstderr:\n%s", cmd, strings.Join(args, " "), err, errs.String())
	}
	t.Logf("%s %s took %v", cmd, strings.Join(args, " "), time.Since(start).Round(time.Second))
	return out.Bytes(), errs.String()
}

// decodeReport decodes a bench's --json output into v; t stops when it
// is not JSON.
func decodeReport(t *testing.T, stdout []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(stdout, v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
}

// runQuickJSON runs `tapfwd-bench CMD --quick --json ARGS...`, as CI
// does, decodes its report into v and checks the progress line on
// stderr; it returns the report as printed.
func runQuickJSON(t *testing.T, v any, cmd string, args ...string) (stdout []byte) {
	t.Helper()
	stdout, stderr := runBench(t, 3*time.Minute, cmd, append([]string{"--quick", "--json"}, args...)...)
	if !strings.Contains(stderr, "left") {
		t.Errorf("no progress line on stderr:\n%s", stderr)
	}
	decodeReport(t, stdout, v)
	return stdout
}

// TestBenchQuickJSON runs `tapfwd-bench throughput --quick --json`, as CI
// does, and checks that every configuration and workload has its median,
// interval, ratio to the bridge and repetition count, and that the bridge
// and direct-veth rows are there and non-zero.
func TestBenchQuickJSON(t *testing.T) {
	r := runQuick(t)
	configs := ranConfigs(t, r.Configs)
	for _, must := range []string{throughput.Bridge, throughput.Direct, throughput.NAPIOn, throughput.NAPIOff} {
		if !slices.Contains(configs, must) {
			t.Errorf("configuration %s missing from the quick run: %v", must, configs)
		}
	}
	checkQuickCells(t, r, configs)
	n := 0
	for _, c := range r.Comparisons {
		if c.A == throughput.NAPIOn && c.B == throughput.NAPIOff {
			n++
			if c.Verdict == "" {
				t.Errorf("napi-on against napi-off on %s: no verdict", c.Workload)
			}
		}
	}
	if n != len(r.Workloads) {
		t.Errorf("%d napi-on/napi-off comparisons, want one per workload (%d)", n, len(r.Workloads))
	}
}

// TestBenchQuickVXLAN runs `tapfwd-bench throughput --topology vxlan
// --quick --json`: tapfwd on both hosts of the two-host bed against the
// bridges, every cell with its median, interval, ratio to the bridge and
// cost, the forwarders' own share (both of them) in tapfwd's cost, the
// direct veth absent, and the topology and the forwarders' CPUs in the
// settings.
func TestBenchQuickVXLAN(t *testing.T) {
	r := runQuick(t, "--topology", "vxlan")
	if r.Settings.Topology != "vxlan" {
		t.Errorf("settings.topology %q, want vxlan", r.Settings.Topology)
	}
	if pin := throughput.DefaultPin(); pin != nil && !slices.Equal(r.Settings.HostCPUs, []int{pin.Wire, pin.Lab}) {
		t.Errorf("settings.host_cpus %v, want host 1's tapfwd beside the client (%d), host 2's beside the server (%d)", r.Settings.HostCPUs, pin.Wire, pin.Lab)
	}
	configs := ranConfigs(t, r.Configs)
	if !slices.Equal(configs, []string{throughput.NAPIOn, throughput.Bridge}) {
		t.Errorf("configurations run: %v, want napi-on and bridge", configs)
	}
	checkQuickCells(t, r, configs)
	for _, c := range r.Cells {
		switch {
		case c.Cost == nil || c.Cost.Machine["median"] == nil || *c.Cost.Machine["median"] <= 0:
			t.Errorf("%s / %s: no cost %+v", c.Config, c.Workload, c.Cost)
		case c.Config == throughput.NAPIOn && c.Cost.Forwarder <= 0:
			t.Errorf("%s / %s: the forwarders' own CPU is %v", c.Config, c.Workload, c.Cost.Forwarder)
		}
	}
}

// quickReport is the JSON report of a quick run as a consumer reads it:
// plain structs and maps, not throughput.Report.
type quickReport struct {
	Schema   string `json:"schema"`
	Settings struct {
		Reps     int    `json:"reps"`
		Omit     int    `json:"omit_seconds"`
		Run      int    `json:"run_seconds"`
		Quick    bool   `json:"quick"`
		Topology string `json:"topology"`
		HostCPUs []int  `json:"host_cpus"`
	} `json:"settings"`
	Host struct {
		Kernel string `json:"kernel"`
	} `json:"host"`
	Configs     []configJSON    `json:"configs"`
	Workloads   []quickWorkload `json:"workloads"`
	Cells       []quickCell     `json:"cells"`
	Comparisons []struct {
		A, B, Workload, Verdict string
	} `json:"comparisons"`
}

// runQuick runs `tapfwd-bench throughput --quick --json ARGS` and returns
// its report, checked for the schema, the quick mark and the progress
// line.
func runQuick(t *testing.T, args ...string) quickReport {
	t.Helper()
	testkit.NeedRoot(t, "iperf3")
	var r quickReport
	runQuickJSON(t, &r, "throughput", args...)
	if r.Schema != throughput.Schema || !r.Settings.Quick || r.Settings.Reps < 2 || r.Host.Kernel == "" {
		t.Errorf("schema %q, settings %+v, kernel %q", r.Schema, r.Settings, r.Host.Kernel)
	}
	if len(r.Workloads) < 2 {
		t.Fatalf("only %d workloads", len(r.Workloads))
	}
	return r
}

// configJSON is a configuration of a report as a consumer reads it.
type configJSON struct {
	Name    string `json:"name"`
	Skipped string `json:"skipped"`
}

// ranConfigs are the configurations of cs that ran, in report order; the
// skipped ones are logged.
func ranConfigs(t *testing.T, cs []configJSON) []string {
	var configs []string
	for _, c := range cs {
		if c.Skipped != "" {
			t.Logf("skipped %s: %s", c.Name, c.Skipped)
			continue
		}
		configs = append(configs, c.Name)
	}
	return configs
}

// checkQuickCells checks every cell of configs in r: all repetitions, a
// loss no smaller than its share at the receiving socket, and a positive
// median inside its interval for the value and the ratio to the bridge.
func checkQuickCells(t *testing.T, r quickReport, configs []string) {
	t.Helper()
	rows := names(r.Workloads, func(w quickWorkload) string { return w.Name })
	eachCell(t, r.Cells, configs, rows, func(x quickCell) (string, string) { return x.Config, x.Workload }, func(cell quickCell, c, w string) {
		if cell.Reps != r.Settings.Reps {
			t.Errorf("%s / %s: %d repetitions, want %d", c, w, cell.Reps, r.Settings.Reps)
		}
		// The receiving socket's drops are part of the loss, and their
		// share of what arrived cannot exceed the loss's share of what
		// was sent, but for the window: the socket's counters cover the
		// whole run, iperf3's loss only what follows the omitted start,
		// where a receiver under load drops most. Medians of each, so
		// with some slack.
		omitted := 100 * float64(r.Settings.Omit) / float64(r.Settings.Omit+r.Settings.Run)
		if cell.Rcvbuf < 0 || cell.Rcvbuf > cell.Loss+omitted+2 || cell.Loss > 100 || r.Settings.Run <= 0 {
			t.Errorf("%s / %s: loss %.1f%%, of it at the receiver's socket %.1f%% (over the whole run, %.0f%% of which iperf3 left out)",
				c, w, cell.Loss, cell.Rcvbuf, omitted)
		}
		for what, m := range map[string]map[string]*float64{"value": cell.Value, "ratio_to_bridge": cell.Ratio} {
			estimate(t, c+" / "+w+": "+what, m)
		}
	})
}

// quickWorkload is a workload of a throughput report.
type quickWorkload struct {
	Name string `json:"name"`
}

// names are the names of xs.
func names[T any](xs []T, name func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = name(x)
	}
	return out
}

// eachCell calls check with the cell of a JSON report's cells for each
// configuration of configs and each row of rows (a workload or a point),
// key giving a cell's; a cell missing is said (Errorf) and skipped.
func eachCell[C any](t *testing.T, cells []C, configs, rows []string, key func(C) (config, row string), check func(cell C, config, row string)) {
	t.Helper()
	for _, config := range configs {
		for _, row := range rows {
			i := slices.IndexFunc(cells, func(x C) bool { c, r := key(x); return c == config && r == row })
			if i < 0 {
				t.Errorf("no cell for %s / %s", config, row)
				continue
			}
			check(cells[i], config, row)
		}
	}
}

// estimate checks a median and its interval as a JSON report gives them
// (median, ci_low, ci_high): all there, and the median positive and
// inside the interval. It returns the median, or says what is wrong
// (Errorf) and ok is false.
func estimate(t *testing.T, what string, m map[string]*float64) (_ float64, ok bool) {
	t.Helper()
	med, lo, hi := m["median"], m["ci_low"], m["ci_high"]
	if med == nil || lo == nil || hi == nil {
		t.Errorf("%s lacks median or interval: %v", what, m)
		return 0, false
	}
	if *med <= 0 || !(*lo <= *med && *med <= *hi) {
		t.Errorf("%s %v [%v, %v]: want a positive median inside its interval", what, *med, *lo, *hi)
		return 0, false
	}
	return *med, true
}

// quickCell is a cell of the JSON report as a consumer reads it.
type quickCell struct {
	Config   string              `json:"config"`
	Workload string              `json:"workload"`
	Reps     int                 `json:"reps"`
	Value    map[string]*float64 `json:"value"`
	Ratio    map[string]*float64 `json:"ratio_to_bridge"`
	Loss     float64             `json:"loss_percent_median"`
	Rcvbuf   float64             `json:"rcvbuf_drop_percent_median"`
	Cost     *struct {
		Machine   map[string]*float64 `json:"machine"`
		Forwarder float64             `json:"forwarder_median"`
	} `json:"cost"`
}

// TestBenchMatchesPlainIperf3 checks the bench's figure for one
// configuration against iperf3 run by hand through the same topology
// (tapfwd with IFF_NAPI on, TCP 4 KB writes, wire to lab). The plain runs
// are interleaved with the bench's repetitions (one before each), so the
// machine's drift hits both alike, and both pin iperf3 as the bench's
// default does (client beside tapfwd's worker on CPU 0, server on CPU 1):
// left to the scheduler, where the two processes land moves a run by a
// factor of two or more, and five runs a side can fall on different
// placements. The medians must differ by no more than the spread either
// side measured.
func TestBenchMatchesPlainIperf3(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	cfg, err := report.SelectConfigs(throughput.Configs(throughput.DefaultTAPNAPI), []string{throughput.NAPIOn})
	if err != nil {
		t.Fatal(err)
	}
	features, err := tap.Probe()
	if err != nil {
		t.Fatal(err)
	}
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs to pin iperf3's client and server apart")
	}
	pin := &iperf.Pinning{Wire: 0, Lab: 1}
	plainBed, fw := testkit.Start(t, testkit.Tapfwd(t), cfg[0].Args...)
	var plain []float64
	var plainErr error
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const reps = 5
	r, err := throughput.Run(ctx, throughput.Options{
		Common: matrix.Common{
			Lab:     matrix.Lab{Tapfwd: testkit.Tapfwd(t), Bench: exe(t)},
			Configs: cfg, Reps: reps, TUNFeatures: features,
			Progress: func(matrix.Progress) {
				if plainErr != nil {
					return
				}
				var v float64
				v, plainErr = plainIperf3(ctx, plainBed, 4096, pin)
				plain = append(plain, v)
			},
		},
		Duration: time.Second,
		Workloads: []throughput.Workload{{Name: "tcp-4KB-P1-w2l", Proto: "tcp", Len: 4096, Streams: 1, Direction: throughput.WireToLab,
			Unit: throughput.Gbps, Placement: &throughput.Placement{Name: throughput.Pinned, Iperf: pin}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if plainErr != nil {
		t.Fatalf("plain iperf3: %v\ntapfwd said:\n%s", plainErr, fw.Output())
	}
	cell := r.Cell(throughput.NAPIOn, "tcp-4KB-P1-w2l")
	if cell == nil || cell.Value == nil || cell.Reps != reps || len(plain) != reps {
		t.Fatalf("bench cell %+v, %d plain runs; want %d each", cell, len(plain), reps)
	}
	bm, pm := cell.Value.Median, stats.Median(plain)
	spread := max(slices.Max(cell.Samples)-slices.Min(cell.Samples), slices.Max(plain)-slices.Min(plain))
	t.Logf("bench %.3f Gbit/s [%.3f, %.3f] samples %.3f; plain iperf3 %.3f Gbit/s, runs %.3f; spread %.3f",
		bm, cell.Value.Low, cell.Value.High, cell.Samples, pm, plain, spread)
	if d := bm - pm; d > spread || -d > spread {
		t.Errorf("bench median %.3f Gbit/s and plain iperf3 median %.3f differ by %.3f, more than the measured spread %.3f", bm, pm, d, spread)
	}
}

// plainIperf3 runs iperf3 by hand across bed (a one-shot server in the lab,
// a 1 s client in the wire namespace writing l bytes at a time, each on
// its CPU of pin) and returns what the receiver got in Gbit/s, read
// straight from iperf3's JSON.
func plainIperf3(ctx context.Context, bed *testbed.Bed, l int, pin *iperf.Pinning) (float64, error) {
	port := strconv.Itoa(30000 + rand.IntN(20000))
	addr := bed.LabAddr.Addr().String()
	srv := bed.Command(ctx, bed.LabNS, "iperf3", "-s", "-1", "-B", addr, "-p", port, "-A", strconv.Itoa(pin.Lab))
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	type report struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	var rep report
	for try := 0; ; try++ {
		rep = report{}
		out, err := bed.Command(ctx, bed.WireNS, "iperf3", "-c", addr, "-p", port, "-t", "1", "-l", strconv.Itoa(l), "-A", strconv.Itoa(pin.Wire), "-J").Output()
		if jerr := json.Unmarshal(out, &rep); jerr != nil && err == nil {
			err = jerr
		}
		// Until the server listens, iperf3 says "Connection refused" in
		// its JSON (and may still exit 0).
		if err == nil && rep.Error == "" {
			break
		}
		if try == 50 || ctx.Err() != nil {
			return 0, fmt.Errorf("iperf3 client: %v %s", err, rep.Error)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return rep.End.SumReceived.BitsPerSecond / 1e9, nil
}

var bedIDRE = regexp.MustCompile(`msg=bed config=(\S+) rep=\d+ id=([0-9a-f]+)`)

// TestBenchInterrupt sends SIGINT to a running bench while iperf3 runs
// through tapfwd, and checks that it exits promptly and leaves no
// namespace, TAP or process of its own behind.
func TestBenchInterrupt(t *testing.T) {
	testkit.NeedTools(t, "iperf3")
	seen := interruptBench(t, "throughput", []string{"--configs", throughput.NAPIOn + "," + throughput.Bridge},
		300*time.Millisecond, func(_ string, procs map[int]procID) bool {
			for _, id := range procs {
				if id.comm == "iperf3" {
					return true
				}
			}
			return false
		})
	// pgrep, as a user would check: no iperf3 started by that run.
	if out, err := exec.Command("pgrep", "-x", "iperf3").Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			p, _ := strconv.Atoi(f)
			if id, ok := seen[p]; ok {
				if now, ok := procIdentity(p); ok && now == id {
					t.Errorf("iperf3 pid %d from the bench still runs", p)
				}
			}
		}
	}
}

// interruptBench starts `tapfwd-bench CMD ARGS --quick --verbose --reps 3`,
// waits until running says a run through tapfwd is under way (it sees each
// stderr line and the processes below the bench), lets it run for midRun,
// sends SIGINT, and checks that the bench exits 1 within 10 s saying it was
// interrupted, with no process, namespace or root-namespace interface of
// its own left. It returns the processes seen under the bench.
func interruptBench(t *testing.T, cmdName string, args []string, midRun time.Duration, running func(line string, procs map[int]procID) bool) map[int]procID {
	t.Helper()
	testkit.NeedRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := benchCmd(t, ctx, cmdName, append(args, "--quick", "--verbose", "--reps", "3")...)
	stderrR, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// A safety net if the test fails half-way: nothing must outlive it.
	t.Cleanup(func() { cmd.Process.Kill() })

	// The lines are kept by whoever reads them: the loop below until
	// SIGINT, then the drain, which ends when Wait closes the pipe.
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderrR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	got, ids, seen := waitRunning(t, pid, lines, running)
	logText := func() string { return strings.Join(got, "\n") }
	time.Sleep(midRun)
	maps.Copy(seen, descendants(pid))
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	rest := make(chan []string)
	go func() {
		var r []string
		for l := range lines {
			r = append(r, l)
		}
		rest <- r
	}()
	err = cmd.Wait()
	took := time.Since(sent)
	got = append(got, <-rest...)
	checkInterrupted(t, err, took, logText(), ids, seen)
	return seen
}

// waitRunning reads the bench's stderr lines until running says a run
// through tapfwd is under way, and returns the lines, the beds named in
// them and the processes seen below pid meanwhile.
func waitRunning(t *testing.T, pid int, lines <-chan string, running func(line string, procs map[int]procID) bool) ([]string, map[string]bool, map[int]procID) {
	t.Helper()
	var got []string
	ids := map[string]bool{} // the beds, from the log
	seen := map[int]procID{}
	deadline := time.After(60 * time.Second)
	for up := false; !up; {
		line := ""
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("bench ended before it was interrupted:\n%s", strings.Join(got, "\n"))
			}
			got = append(got, l)
			if m := bedIDRE.FindStringSubmatch(l); m != nil {
				ids[m[2]] = true
			}
			line = l
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no run through tapfwd within 60 s:\n%s", strings.Join(got, "\n"))
		}
		procs := descendants(pid)
		maps.Copy(seen, procs)
		up = len(ids) > 0 && running(line, procs)
	}
	return got, ids, seen
}

// checkInterrupted checks how an interrupted bench ended (err from Wait,
// took after SIGINT, its log) and that nothing of its beds ids or its
// processes seen is left.
func checkInterrupted(t *testing.T, err error, took time.Duration, log string, ids map[string]bool, seen map[int]procID) {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit after SIGINT: %v, want status 1", err)
	}
	if took > 10*time.Second {
		t.Errorf("took %v to exit after SIGINT", took)
	}
	if !strings.Contains(log, "bench interrupted") {
		t.Errorf("no interruption message:\n%s", log)
	}
	t.Logf("exited %v after SIGINT; beds %v; processes seen %v", took.Round(time.Millisecond), ids, seen)
	for p, id := range seen {
		if now, ok := procIdentity(p); ok && now == id {
			t.Errorf("process %d (%s) from the bench is still running", p, id.comm)
		}
	}
	ip := "ip"
	if _, err := exec.LookPath(ip); err != nil {
		ip = "/usr/sbin/ip"
	}
	netns, err := exec.Command(ip, "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	links, err := exec.Command(ip, "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for id := range ids {
		if strings.Contains(string(netns), "tfw-"+id) {
			t.Errorf("namespaces of bed %s left behind:\n%s", id, netns)
		}
		if strings.Contains(string(links), id) {
			t.Errorf("an interface of bed %s is in the root namespace:\n%s", id, links)
		}
	}
}

// procID names a process across pid reuse: its command and start time.
type procID struct {
	comm  string
	start string
}

// procIdentity reads /proc/PID/stat.
func procIdentity(pid int) (procID, bool) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return procID{}, false
	}
	return procID{comm: st.Comm, start: strconv.FormatUint(st.StartTime, 10)}, true
}

func procParent(pid int) int {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return -1
	}
	return st.PPid
}

// descendants lists every live process below pid.
func descendants(pid int) map[int]procID {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		parent[p] = procParent(p)
	}
	out := map[int]procID{}
	for p := range parent {
		for q, hops := parent[p], 0; q > 1 && hops < 16; q, hops = parent[q], hops+1 {
			if q == pid {
				if id, ok := procIdentity(p); ok {
					out[p] = id
				}
				break
			}
		}
	}
	return out
}

// TestBenchErrors checks the one-line errors: not root, iperf3 missing, and
// flag mistakes, of every subcommand, and the help texts.
func TestBenchErrors(t *testing.T) {
	clitest.Check(t, "tapfwd-bench", run, []clitest.Case{
		{nil, 2, "Usage: tapfwd-bench napi|throughput|latency"},
		{[]string{"throughput", "--json", "--csv"}, 2, "pick one"},
		{[]string{"throughput", "--configs", "napi-maybe"}, 2, `unknown configuration "napi-maybe"`},
		{[]string{"throughput", "--sizes", "64,x"}, 2, "--sizes"},
		{[]string{"throughput", "--dirs", "sideways"}, 2, "--dirs"},
		{[]string{"throughput", "--iperf-cpus", "0"}, 2, "want WIRE,LAB"},
		{[]string{"throughput", "--iperf-cpus", "0,4096"}, 2, `"4096" is not a CPU this process may use`},
		{[]string{"throughput", "--iperf-cpus", "x,0"}, 2, `"x" is not a CPU`},
		{[]string{"throughput", "--iperf-cpus", "none"}, 2, "give --placement scheduler"},
		{[]string{"throughput", "--placement", "everywhere"}, 2, `--placement: unknown placement "everywhere"`},
		{[]string{"throughput", "--configs", "napi-off,napi-on", "--reps", "4"}, 2, "--reps 4 with --budget: a sequential run's first stage takes at least 6 repetitions"},
		{[]string{"throughput", "--reps", "1"}, 2, "--reps 1: a first stage needs at least 2 runs"},
		{[]string{"throughput", "--budget", "-1m"}, 2, "--budget -1m0s"},
		{[]string{"throughput", "-h"}, 0, "end past 25m0s (--budget): 10 to 25 minutes"},
		{[]string{"throughput", "-h"}, 0, "\n  --budget duration\n"},
		{[]string{"throughput", "-h"}, 0, "--quick: configurations napi-off, napi-on, bridge, direct"},
		{[]string{"throughput", "-h"}, 0, "Between runs (--configs given): configurations napi-off, napi-on, napi-threaded, bridge, direct"},
		{[]string{"throughput", "-h"}, 0, "Default run (no --configs, preset, workload or --topology flag): IFF_NAPI\non and off inside each run"},
		{[]string{"napi", "--rows", "two"}, 2, `--rows "two": want one, seed, or rows among tcp-64B-P1-w2l,`},
		{[]string{"napi", "--windows", "10"}, 2, "--windows 10: want a multiple of 4"},
		{[]string{"napi", "--delay", "2ms"}, 2, "--delay 2ms: want 0 (calibrated) to 1ms"},
		{[]string{"napi", "-h"}, 0, "Does IFF_NAPI help tapfwd on this kernel?"},
		{[]string{"throughput", "--quick", "--full"}, 2, "--quick and --full: pick one"},
		{[]string{"throughput", "--omit", "-1s"}, 2, "--omit -1s"},
		{[]string{"throughput", "--configs", "napi-on", "--omit", "-1s"}, 2, "--omit -1s"},
		{[]string{"throughput", "--target", "101"}, 2, "--target 101"},
		{[]string{"throughput", "--topology", "gre"}, 2, `--topology: unknown topology "gre" (known: veth, vxlan)`},
		{[]string{"throughput", "-h"}, 0, "--topology vxlan: the same method across two hosts"},
		{[]string{"throughput", "-h"}, 0, "\n  --reps int\n"},
		{[]string{"throughput", "-h"}, 0, "Its default run:\nconfigurations napi-off, napi-on, bridge;"},
		{[]string{"naive-forwarder"}, 2, "--nic is required"},
		{[]string{"latency", "--json", "--markdown"}, 2, "pick one"},
		{[]string{"latency", "--configs", "tapfwd-maybe"}, 2, `unknown configuration "tapfwd-maybe"`},
		{[]string{"latency", "--points", "12K"}, 2, "--points: bad point"},
		{[]string{"latency", "--calibrate", "nowhere"}, 2, "--calibrate: unknown configuration"},
		{[]string{"latency", "--size", "8"}, 2, "--size 8"},
		{[]string{"latency", "--reps", "0"}, 2, "--reps 0"},
		{[]string{"latency", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"latency", "-h"}, 0, "--quick: configurations tapfwd-block, tapfwd-busy, bridge"},
		{[]string{"latency", "-h"}, 0, "\n  --reps int\n"},
		{[]string{"latency", "--from", "/nonexistent/latency.json"}, 1, "no such file"},
	})

	if err := testbed.Available(); err != nil {
		t.Skipf("skipping the privileged cases: %v", err)
	}
	// No iperf3 on PATH (ip is found in /usr/sbin or /sbin anyway).
	cmd := exec.Command(exe(t), "throughput", "--quick")
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
	clitest.OneLineError(t, "without iperf3", cmd, "iperf3 not found: install it with apt-get install iperf3")
	asNobody(t, "bench needs root", "throughput", "--quick")
}

// TestNaiveForwarder checks the bench's naive baseline: TCP passes both
// ways with the veth offloads on (it segments GSO frames and completes
// checksums for its water TAP), and SIGTERM removes its TAP.
func TestNaiveForwarder(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	testkit.NeedTools(t, "iperf3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fw, err := forwarder.StartNaive(ctx, bed, exe(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Stop() })
	for _, rev := range []bool{false, true} {
		r, err := iperf.Run(ctx, bed, iperf.Options{Duration: time.Second, Reverse: rev})
		if err != nil {
			t.Fatalf("TCP reverse=%v: %v\n%s", rev, err, fw.Output())
		}
		t.Logf("TCP reverse=%v: %.2f Gbit/s, %d retransmits", rev, r.BitsPerSecond/1e9, r.Retransmits)
		// Broken checksums or GSO handling stall TCP at a few kilobytes;
		// a slow but working loop moves megabytes even under -race.
		if r.Bytes < 1<<20 {
			t.Errorf("TCP reverse=%v: only %d bytes in 1 s", rev, r.Bytes)
		}
	}
	if err := fw.Stop(); err != nil {
		t.Errorf("naive forwarder did not exit 0 on SIGTERM: %v\n%s", err, fw.Output())
	}
	if !strings.Contains(fw.Output(), "naive totals") {
		t.Errorf("no totals in its log:\n%s", fw.Output())
	}
	if _, err := bed.Run(context.Background(), bed.LabNS, "ip", "link", "show", "dev", bed.LabIf); err == nil {
		t.Error("the water TAP is still there after the naive forwarder exited")
	}
}
