package matrix

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// fakeVisits scripts the visits of a plan: fail says how a visit of
// config in rep goes (nil: every row runs).
type fakeVisits struct {
	order []string
	calls map[string]int
	fail  func(config string, rep, call int) (rows int, err error)
}

func (f *fakeVisits) visit(rows []string, m *Meter) func(context.Context, *report.Config, int) ([]Record[int], error) {
	return func(_ context.Context, c *report.Config, rep int) ([]Record[int], error) {
		f.calls[c.Name]++
		f.order = append(f.order, c.Name)
		n, err := len(rows), error(nil)
		if f.fail != nil {
			if k, e := f.fail(c.Name, rep, f.calls[c.Name]); e != nil {
				n, err = k, e
			}
		}
		var out []Record[int]
		for _, r := range rows[:n] {
			m.Step(c.Name, rep, r)
			m.Done()
			out = append(out, Record[int]{Config: c.Name, Row: r, Rep: rep, Sample: rep})
		}
		return out, err
	}
}

func plan(cfgs []report.Config, rows []string, reps int, f *fakeVisits, progress func(Progress)) Plan[int] {
	m := NewMeter(progress, Active(cfgs)*reps*len(rows), reps, time.Second)
	return Plan[int]{Configs: cfgs, Rows: rows, Reps: reps, Meter: m, Log: slog.New(slog.DiscardHandler), Visit: f.visit(rows, m)}
}

func TestRunInterleaves(t *testing.T) {
	cfgs := []report.Config{{Name: "a"}, {Name: "b"}, {Name: "skipped", Skipped: "no"}, {Name: "c"}}
	f := &fakeVisits{calls: map[string]int{}}
	var last Progress
	recs, end, err := Run(context.Background(), plan(cfgs, []string{"x", "y"}, 3, f, func(p Progress) { last = p }))
	if err != nil {
		t.Fatal(err)
	}
	if end != (Ending{Reps: 3, Stopped: StopReps}) {
		t.Errorf("ending %+v, want the 3 repetitions asked for", end)
	}
	if got := strings.Join(f.order, " "); got != "a b c b c a c a b" {
		t.Errorf("visits %q, want each repetition to start one further along", got)
	}
	if len(recs) != 3*3*2 || last.Total != 18 || last.Done != 17 || last.Reps != 3 {
		t.Errorf("%d records; last progress %+v", len(recs), last)
	}
}

func TestRunSkipsAndRecordsFailures(t *testing.T) {
	cfgs := []report.Config{{Name: "broken"}, {Name: "flaky"}, {Name: "late"}, {Name: "ok"}}
	f := &fakeVisits{calls: map[string]int{}, fail: func(c string, rep, call int) (int, error) {
		switch {
		case c == "broken":
			return 0, errors.New("no bed")
		case c == "flaky" && call == 1:
			return 0, errors.New("slow machine") // tried once more
		case c == "late" && rep == 2:
			return 1, errors.New("the forwarder exited")
		}
		return 0, nil
	}}
	p := plan(cfgs, []string{"x", "y", "z"}, 2, f, nil)
	recs, _, err := Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if cfgs[0].Skipped != "no bed" || f.calls["broken"] != 2 {
		t.Errorf("broken: skipped %q after %d visits, want skipped after 2", cfgs[0].Skipped, f.calls["broken"])
	}
	if cfgs[1].Skipped != "" || f.calls["flaky"] != 3 || cfgs[2].Skipped != "" {
		t.Errorf("flaky: skipped %q, %d visits; late: skipped %q", cfgs[1].Skipped, f.calls["flaky"], cfgs[2].Skipped)
	}
	var failed []string
	for _, r := range recs {
		if r.Err != "" {
			failed = append(failed, r.Config+"/"+r.Row)
		}
	}
	if strings.Join(failed, " ") != "late/y late/z" {
		t.Errorf("failed records %v, want late's rows after its failure in rep 2", failed)
	}
	if want := 3*2*3 - 2; p.Meter.total != want {
		t.Errorf("runs planned %d, want %d (the skipped configuration's taken off, late's lost rows too)", p.Meter.total, want)
	}
}

func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeVisits{calls: map[string]int{}, fail: func(string, int, int) (int, error) {
		cancel()
		return 0, context.Canceled
	}}
	_, _, err := Run(ctx, plan([]report.Config{{Name: "a"}}, []string{"x"}, 3, f, nil))
	if !errors.Is(err, ErrInterrupted) || f.calls["a"] != 1 {
		t.Errorf("%v after %d visits, want ErrInterrupted after 1 (no retry)", err, f.calls["a"])
	}
}

// TestRunSequential runs a first stage of 3 repetitions, then as many as
// More asks for: until it asks for none, or until the budget would be
// overrun at the time a repetition took so far (a fake clock: 10 s a
// visit); the meter's plan follows.
func TestRunSequential(t *testing.T) {
	cfgs := []report.Config{{Name: "a"}, {Name: "b"}}
	var clock time.Time
	f := &fakeVisits{calls: map[string]int{}, fail: func(string, int, int) (int, error) {
		clock = clock.Add(10 * time.Second)
		return 0, nil
	}}
	var asked []int
	var last Progress
	p := plan(cfgs, []string{"x"}, 3, f, func(pr Progress) { last = pr })
	p.now = func() time.Time { return clock }
	p.More = func(recs []Record[int]) int {
		asked = append(asked, len(recs))
		return max(0, 5-len(recs)/2) // records for 5 repetitions, then none
	}
	recs, end, err := Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if end != (Ending{Reps: 5, Stopped: StopTarget}) || len(recs) != 10 || fmt.Sprint(asked) != "[6 8 10]" {
		t.Errorf("ending %+v with %d records, More asked at %v; want 5 repetitions, stopped by the target", end, len(recs), asked)
	}
	if last.Reps != 5 || last.Total != 10 {
		t.Errorf("last progress %+v, want 5 repetitions of 2 runs planned", last)
	}

	// Always more: the budget ends it. 20 s a repetition within 100 s: 5.
	f.calls, clock = map[string]int{}, time.Time{}
	p = plan([]report.Config{{Name: "a"}, {Name: "b"}}, []string{"x"}, 3, f, nil)
	p.now = func() time.Time { return clock }
	p.More = func([]Record[int]) int { return 50 }
	p.Budget = 100 * time.Second
	if _, end, _ = Run(context.Background(), p); end != (Ending{Reps: 5, Stopped: StopBudget}) || p.Meter.total != 10 {
		t.Errorf("budget of 100 s at 20 s a repetition: %+v, %d runs planned; want 5 repetitions, stopped by the budget", end, p.Meter.total)
	}
	// The first stage runs whatever the budget.
	clock = time.Time{}
	p.Budget = 30 * time.Second
	if _, end, _ = Run(context.Background(), p); end != (Ending{Reps: 3, Stopped: StopBudget}) {
		t.Errorf("budget shorter than the first stage: %+v, want its 3 repetitions", end)
	}
}

func TestMeterEstimates(t *testing.T) {
	var got []Progress
	m := NewMeter(func(p Progress) { got = append(got, p) }, 4, 2, 3*time.Second)
	m.Step("a", 1, "x")
	m.Note(Progress{Config: "calibrating on a", Row: "probe"})
	if got[0].Left != 12*time.Second || got[0].Rep != 1 || got[0].Reps != 2 || got[1].Reps != 0 || got[1].Total != 4 {
		t.Errorf("before any run: %+v", got)
	}
	m.start = time.Now().Add(-10 * time.Second)
	m.Done()
	m.Step("a", 1, "y")
	if l := got[2].Left; l < 29*time.Second || l > 31*time.Second {
		t.Errorf("after one run of about 10 s with 3 to go: %v left, want about 30 s", l)
	}
}

func TestCheckKernel(t *testing.T) {
	c := report.Tapfwd("x", "", forwarder.Options{NAPI: forwarder.On, Queues: 2})
	if !CheckKernel(&c, unix.IFF_TAP|unix.IFF_NAPI|unix.IFF_MULTI_QUEUE) || c.Skipped != "" {
		t.Fatalf("all there: %q", c.Skipped)
	}
	if CheckKernel(&c, unix.IFF_TAP) {
		t.Fatal("nothing there, yet it can run")
	}
	if !strings.Contains(c.Skipped, "the kernel lacks IFF_NAPI, IFF_MULTI_QUEUE (TUNGETFEATURES 0x2)") {
		t.Errorf("skipped %q", c.Skipped)
	}
	bridge := report.Config{Name: report.Bridge, Kind: report.KindBridge}
	if !CheckKernel(&bridge, 0) {
		t.Error("the bridge needs nothing of the TUN driver")
	}
}

func TestCheckFlags(t *testing.T) {
	c := report.Tapfwd("uring", "", forwarder.Options{NAPI: forwarder.On, TAPIO: "uring", GROWindow: time.Microsecond})
	if !CheckFlags(&c, nil) || c.Skipped != "" {
		t.Fatalf("unchecked: %q", c.Skipped)
	}
	if !CheckFlags(&c, map[string]bool{"napi": true, "tap-io": true, "gro-window": true}) || c.Skipped != "" {
		t.Fatalf("all there: %q", c.Skipped)
	}
	if CheckFlags(&c, map[string]bool{"napi": true}) {
		t.Fatal("a binary without --tap-io runs it")
	}
	if c.Skipped != "the tapfwd binary has no --gro-window, --tap-io (built before it)" {
		t.Errorf("skipped %q", c.Skipped)
	}
	bridge := report.Config{Name: report.Bridge, Kind: report.KindBridge}
	if !CheckFlags(&bridge, map[string]bool{}) {
		t.Error("the bridge needs no tapfwd flag")
	}
}

func TestTopologyFit(t *testing.T) {
	for _, s := range []string{"", "veth", "vxlan"} {
		if _, err := ParseTopology(s); err != nil {
			t.Errorf("ParseTopology(%q): %v", s, err)
		}
	}
	if _, err := ParseTopology("gre"); err == nil || !strings.Contains(err.Error(), `unknown topology "gre" (known: veth, vxlan)`) {
		t.Errorf("ParseTopology(gre): %v", err)
	}
	mk := func() []report.Config {
		return []report.Config{
			report.Tapfwd("napi-on", "tapfwd", forwarder.Options{NAPI: forwarder.On}),
			{Name: report.Bridge, Kind: report.KindBridge, Description: "bridge"},
			{Name: report.Direct, Kind: report.KindDirect},
			{Name: "naive", Kind: report.KindNaive},
		}
	}
	for _, c := range mk() {
		if !Veth.Fit(&c) || !Topology("").Fit(&c) || c.Skipped != "" {
			t.Errorf("veth: %s does not fit (%q)", c.Name, c.Skipped)
		}
	}
	cs := mk()
	want := []bool{true, true, false, false}
	for i := range cs {
		if got := VXLAN.Fit(&cs[i]); got != want[i] || (cs[i].Skipped == "") != want[i] {
			t.Errorf("vxlan: %s fits %v (skipped %q), want %v", cs[i].Name, got, cs[i].Skipped, want[i])
		}
	}
	if !strings.Contains(cs[0].Description, "each host's VXLAN device") || !strings.Contains(cs[1].Description, "enslaving its VXLAN device") {
		t.Errorf("vxlan descriptions: %q, %q", cs[0].Description, cs[1].Description)
	}
	skipped := report.Config{Name: "x", Kind: report.KindTapfwd, Skipped: "no IFF_NAPI"}
	if VXLAN.Fit(&skipped) || skipped.Skipped != "no IFF_NAPI" {
		t.Errorf("an already skipped configuration: %+v", skipped)
	}
}

// TestVisitVXLAN visits the bridge on the VXLAN topology: the bed handed
// over is the view from host 1's lab toward host 2's, the labs reach each
// other, no forwarder runs, and the two-host bed is gone afterwards.
func TestVisitVXLAN(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	c := report.Config{Name: report.Bridge, Kind: report.KindBridge}
	var seen []string
	err := Lab{Topology: VXLAN}.Visit(context.Background(), &c, 0, func(bed *testbed.Bed, fws Forwarders) error {
		seen = []string{bed.WireNS, bed.FwdNS, bed.LabNS}
		if fws.Len() != 0 || fws.Alive() != nil || len(fws.Pids()) != 0 {
			t.Errorf("forwarders %v on the bridge", fws)
		}
		if !strings.HasSuffix(bed.WireNS, "-lab1") || !strings.HasSuffix(bed.FwdNS, "-host2") || !strings.HasSuffix(bed.LabNS, "-lab2") {
			t.Errorf("view %v: want lab 1 -> host 2 -> lab 2", seen)
		}
		return bed.WaitLabReachable(context.Background(), 5*time.Second)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range seen {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("namespace %s left behind", ns)
		}
	}
	naive := report.Config{Name: "naive", Kind: report.KindNaive}
	if err := (Lab{Topology: VXLAN}).Visit(context.Background(), &naive, 0, nil); err == nil {
		t.Error("the naive forwarder visited on the VXLAN topology")
	}
}

// TestVisitOVS visits Open vSwitch's configuration on the veth topology:
// its two daemons are the visit's forwarders (their pids the run's own
// threads), the lab answers through it, and nothing is left afterwards.
func TestVisitOVS(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	need.Tools(t, "ovs-vswitchd", "ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovs-appctl")
	c := report.Config{Name: report.OVS, Kind: report.KindOVS}
	var ns string
	err := Lab{}.Visit(context.Background(), &c, 0, func(bed *testbed.Bed, fws Forwarders) error {
		ns = bed.FwdNS
		if fws.Len() != 2 || fws.Alive() != nil {
			t.Errorf("forwarders %+v: want ovs-vswitchd and ovsdb-server running", fws)
		}
		for _, pid := range fws.Pids() {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
				t.Errorf("pid %d: %v", pid, err)
			}
		}
		return bed.WaitLabReachable(context.Background(), 5*time.Second)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + ns); !os.IsNotExist(err) {
		t.Errorf("namespace %s left behind", ns)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "tfw-ovs-*")); len(left) > 0 {
		t.Errorf("Open vSwitch's directories left behind: %v", left)
	}
	if VXLAN.Fit(&c) {
		t.Errorf("OVS fits the VXLAN topology: %+v", c)
	}
}
