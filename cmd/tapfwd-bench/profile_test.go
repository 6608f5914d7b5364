package main

import (
	"bytes"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/cpuprofile"
	"github.com/tapfwd/tapfwd/bench/profile"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestBenchProfile runs `tapfwd-bench profile` on UDP 64 B from the wire
// under tapfwd and the bridge: tapfwd's Go profile is there, in shares
// that add up, with the TAP write among them and the raw profile kept;
// its batches count the frames; the machine is there per CPU with
// tapfwd's pinned worker; the bridge has no Go profile; the kernel side
// is there where perf works (the TAP write path under tapfwd, the bridge
// under the bridge) and says why where it does not; and the saved report
// renders again.
func TestBenchProfile(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	out := t.TempDir()
	js, _ := runBench(t, 3*time.Minute, "profile", "--workload", "udp-64B-w2l", "--seconds", "2", "--warmup", "1s", "--json", "--out", out)
	var r profile.Report
	decodeReport(t, js, &r)
	fw, br := r.Result(throughput.Default, "udp-64B-w2l"), r.Result(throughput.Bridge, "udp-64B-w2l")
	if r.Schema != profile.Schema || len(r.Results) != 2 || fw == nil || br == nil || fw.Err != "" || br.Err != "" {
		t.Fatalf("results: %+v", r.Results)
	}
	checkGoView(t, fw.Go, out)
	if len(fw.Batches) != 2 || fw.Batches[0].Frames == 0 || fw.Batches[0].FramesPerWakeup < 1 || fw.Batches[0].WritesPerFrame <= 0 || fw.Batches[0].WritesPerFrame > 1 {
		t.Errorf("batches: %+v", fw.Batches)
	}
	worker := false
	for _, th := range fw.Threads {
		worker = worker || strings.HasPrefix(th.Role, "tapfwd worker (pinned to CPU")
	}
	if !worker || len(fw.CPUs) != runtime.NumCPU() || fw.Trace == nil || fw.WindowSeconds < 2 || fw.Figure <= 0 {
		t.Errorf("tapfwd's machine: worker %v, %d CPUs, trace %v, window %v s, figure %v", worker, len(fw.CPUs), fw.Trace != nil, fw.WindowSeconds, fw.Figure)
	}
	if br.Go != nil || br.Batches != nil || len(br.CPUs) != runtime.NumCPU() {
		t.Errorf("the bridge: Go %v, batches %v, %d CPUs", br.Go, br.Batches, len(br.CPUs))
	}
	checkKernelViews(t, r.Perf, fw, br)

	var md bytes.Buffer
	from := exec.Command(exe(t), "profile", "--from", filepath.Join(out, "profile.json"), "--markdown")
	from.Stdout = &md
	if err := from.Run(); err != nil {
		t.Fatal(err)
	}
	txt, _ := os.ReadFile(filepath.Join(out, "profile.txt"))
	for _, want := range []string{"### Where tapfwd's CPU goes", "### tapfwd's batches"} {
		if !strings.Contains(md.String(), want) || !strings.Contains(string(txt), strings.TrimPrefix(want, "### ")) {
			t.Errorf("--from --markdown or profile.txt lacks %q", want)
		}
	}
}

// TestBenchProfileRR profiles a request/response point under the AF_XDP
// backend and the bridge: the round trips are there, rr's three threads
// are followed with the CPU they used, tapfwd's Go profile is there and
// the bridge has none.
func TestBenchProfileRR(t *testing.T) {
	testkit.NeedRoot(t)
	js, _ := runBench(t, 3*time.Minute, "profile", "--workload", "rr-2K-0us", "--configs", "xdp-block,bridge",
		"--seconds", "2", "--warmup", "1s", "--perf", "off", "--json")
	var r profile.Report
	decodeReport(t, js, &r)
	fw, br := r.Result("xdp-block", "rr-2K-0us"), r.Result("bridge", "rr-2K-0us")
	if len(r.Results) != 2 || fw == nil || br == nil || fw.Err != "" || br.Err != "" {
		t.Fatalf("results: %+v", r.Results)
	}
	for _, res := range []*profile.Result{fw, br} {
		if rt := res.RTT; rt == nil || rt.Rate < 1000 || rt.P50 <= 0 || rt.P99 < rt.P50 || res.Figure != rt.P50 || res.Unit != profile.RRUnit {
			t.Errorf("%s: round trips %+v, figure %v %s", res.Config, res.RTT, res.Figure, res.Unit)
		}
		roles := map[string]float64{}
		for _, th := range res.Trace.Threads {
			roles[th.Role] += th.RunSeconds
		}
		for _, role := range []string{"rr sender", "rr receiver", "rr echo"} {
			if roles[role] <= 0 {
				t.Errorf("%s: thread %q not followed or never ran: %v", res.Config, role, roles)
			}
		}
	}
	if fw.Go == nil || fw.Go.CPUSeconds <= 0 || br.Go != nil {
		t.Errorf("Go profiles: xdp-block %+v, bridge %+v", fw.Go, br.Go)
	}
}

// checkGoView checks tapfwd's Go profile: CPU sampled, shares that add
// up with the TAP write among them, and the raw profile kept in dir.
func checkGoView(t *testing.T, g *profile.GoView, dir string) {
	t.Helper()
	if g == nil {
		t.Fatal("no Go profile of tapfwd")
	}
	sum, write := 0.0, 0.0
	for _, s := range g.Shares {
		sum += s.Percent
		if s.Name == cpuprofile.TAPWrite {
			write = s.Percent
		}
	}
	if g.CPUSeconds <= 0 || math.Abs(sum-100) > 0.01 || write <= 0 || len(g.Top) == 0 || len(g.Syscalls) == 0 {
		t.Errorf("Go profile: %+v (shares add up to %v)", g, sum)
	}
	b, err := os.ReadFile(filepath.Join(dir, g.File))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cpuprofile.ParsePprof(b); err != nil || len(p.Samples) == 0 {
		t.Errorf("kept profile %s: %v", g.File, err)
	}
}

// checkKernelViews checks the kernel side: where perf sampled, tapfwd's
// TAP writes and the bridge's forwarding are there; where not, the note
// says why and there is none.
func checkKernelViews(t *testing.T, note string, fw, br *profile.Result) {
	t.Helper()
	if !strings.HasPrefix(note, "perf record") {
		t.Logf("no kernel side here: %s", note)
		if fw.Kernel != nil || br.Kernel != nil || note == "" {
			t.Errorf("perf note %q, yet kernel views %v %v", note, fw.Kernel, br.Kernel)
		}
		return
	}
	path := func(k *cpuprofile.KernelView, name string) float64 {
		if k == nil {
			return -1
		}
		for _, p := range k.Paths {
			if p.Name == name {
				return p.Percent
			}
		}
		return -1
	}
	if w := path(fw.Kernel, cpuprofile.KTAPWrite); w <= 0 || path(fw.Kernel, cpuprofile.KBridge) != 0 {
		t.Errorf("tapfwd's kernel side: TAP write %v%%: %+v", w, fw.Kernel)
	}
	if b := path(br.Kernel, cpuprofile.KBridge); b <= 0 || path(br.Kernel, cpuprofile.KTAPWrite) != 0 {
		t.Errorf("the bridge's kernel side: bridge %v%%: %+v", b, br.Kernel)
	}
}

// TestProfileErrors checks the profile command's one-line errors.
func TestProfileErrors(t *testing.T) {
	clitest.Check(t, "tapfwd-bench", run, []clitest.Case{
		{[]string{"profile", "--seconds", "0"}, 2, "--seconds 0: want 1 to 600"},
		{[]string{"profile", "--workload", "tcp-sideways"}, 2, `--workload "tcp-sideways": unknown (known: tcp-default-P1-w2l,`},
		{[]string{"profile", "--configs", "napi-maybe"}, 2, `unknown configuration "napi-maybe"`},
		{[]string{"profile", "--perf", "on"}, 2, `--perf "on": want auto or off`},
		{[]string{"profile", "--placement", "both"}, 2, "profile one placement at a time"},
		{[]string{"profile", "--json", "--markdown"}, 2, "pick one"},
		{[]string{"profile", "-h"}, 0, "All of the guard's under tapfwd and the bridge: about"},
		{[]string{"profile", "--workload", "rr-5K"}, 2, `--workload: workload "rr-5K": want rr-RATE-DELAY`},
		{[]string{"profile", "--workload", "rr-5K-0us,udp-64B-w2l"}, 2, "in separate runs"},
		{[]string{"profile", "--workload", "rr-5K-0us", "--configs", "napi-on"}, 2, `unknown configuration "napi-on"`},
		{[]string{"-h"}, 0, "profile: where the time goes"},
	})
}

// TestSharedFlags checks that the flags the benches share are declared
// once: every flag two of them define means the same in each (usage and
// default), but for the few each bench sets itself; profile's
// --placement is throughput's without both.
func TestSharedFlags(t *testing.T) {
	var out bytes.Buffer
	tfs, _ := throughputFlagSet(&out)
	pfs, _ := profileFlagSet(&out)
	nfs, _ := napiFlagSet(&out)
	lfs, _ := latencyFlagSet(&out)
	cfs, _ := compareFlagSet(&out)
	own := map[string]bool{"configs": true, "duration": true, "omit": true, "budget": true, "target": true, "quick": true,
		"perf": true, "warmup": true, "reps": true, "out": true, "from": true, "verbose": true, "placement": true, "json": true, "markdown": true}
	sets := []*flag.FlagSet{tfs, pfs, nfs, lfs, cfs}
	shared := 0
	for i, a := range sets {
		for _, b := range sets[i+1:] {
			a.VisitAll(func(fa *flag.Flag) {
				fb := b.Lookup(fa.Name)
				if fb == nil || own[fa.Name] {
					return
				}
				shared++
				if fa.Usage != fb.Usage || fa.DefValue != fb.DefValue {
					t.Errorf("--%s: %s says %q (default %q), %s %q (default %q)", fa.Name, a.Name(), fa.Usage, fa.DefValue, b.Name(), fb.Usage, fb.DefValue)
				}
			})
		}
	}
	if shared < 10 {
		t.Errorf("%d shared flags compared", shared)
	}
	tp, pp := tfs.Lookup("placement").Usage, pfs.Lookup("placement").Usage
	if !strings.HasPrefix(tp, pp) || strings.Contains(pp, "both") || !strings.Contains(tp, "both") {
		t.Errorf("--placement: profile %q, throughput %q", pp, tp)
	}
	for _, fs := range []*flag.FlagSet{tfs, pfs, nfs, lfs} {
		if j, m := fs.Lookup("json").Usage, fs.Lookup("markdown").Usage; j != "print the report as JSON" || m != "print the report as Markdown" {
			t.Errorf("%s: --json %q, --markdown %q", fs.Name(), j, m)
		}
	}
}
