package testkit

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is t whose Fatal and Fatalf are recorded instead of
// ending the test, for the kit's failure paths.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatal(args ...any)                 { r.fatal = fmt.Sprint(args...) }
func (r *fatalRecorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

// TestTotals parses the queue totals as the daemon logs them (slog's text
// handler, its keys in its order) from a log with other lines around.
func TestTotals(t *testing.T) {
	var log bytes.Buffer
	l := slog.New(slog.NewTextHandler(&log, nil))
	l.Info("forwarding", "queues", 2)
	for q, n := range []int{10, 20} {
		l.Info("queue totals", "queue", q, "nic_rx_packets", n+1, "tap_tx_packets", n+2, "tap_rx_packets", n+3,
			"nic_tx_packets", n+4, "drops", n+5, "errors", n+6, "kernel_drops", 0)
	}
	got := Totals(t, log.String())
	want := map[int]QueueTotals{0: {11, 12, 13, 14, 15, 16}, 1: {21, 22, 23, 24, 25, 26}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Totals = %v, want %v", got, want)
	}
	r := &fatalRecorder{TB: t}
	if got := Totals(r, "level=INFO msg=forwarding\n"); len(got) != 0 || !strings.Contains(r.fatal, "no queue totals") {
		t.Errorf("a log without totals: %v, failure %q", got, r.fatal)
	}
}

// TestUnitLine: the first key= line's value; a key the unit lacks fails
// the test.
func TestUnitLine(t *testing.T) {
	unit := "[Service]\nExecStart=/usr/local/bin/tapfwd run\nCapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW\nExecStart=/bin/false\n"
	if got := UnitLine(t, unit, "ExecStart"); got != "/usr/local/bin/tapfwd run" {
		t.Errorf("ExecStart = %q", got)
	}
	if got := UnitLine(t, unit, "CapabilityBoundingSet"); got != "CAP_NET_ADMIN CAP_NET_RAW" {
		t.Errorf("CapabilityBoundingSet = %q", got)
	}
	r := &fatalRecorder{TB: t}
	if got := UnitLine(r, unit, "User"); got != "" || r.fatal != "the unit has no User=" {
		t.Errorf("User: %q, failure %q", got, r.fatal)
	}
}

// TestSetprivArgs: capabilities in setpriv's spelling, the same list for
// the bounding, inheritable and ambient sets.
func TestSetprivArgs(t *testing.T) {
	got := strings.Join(SetprivArgs([]string{"CAP_NET_ADMIN", "CAP_NET_RAW"}), " ")
	want := "--reuid=0 --regid=0 --clear-groups --securebits=+noroot,+noroot_locked --no-new-privs " +
		"--bounding-set=-all,+net_admin,+net_raw --inh-caps=-all,+net_admin,+net_raw --ambient-caps=-all,+net_admin,+net_raw"
	if got != want {
		t.Errorf("SetprivArgs =\n%s\nwant\n%s", got, want)
	}
	if got := strings.Join(SetprivArgs(nil), " "); !strings.HasSuffix(got, "--bounding-set=-all --inh-caps=-all --ambient-caps=-all") {
		t.Errorf("no capabilities: %s", got)
	}
}

// TestNotifySocket: messages sent as sd_notify sends them are counted by
// state and waited for; a state that never comes fails the wait.
func TestNotifySocket(t *testing.T) {
	s := NewNotifySocket(t)
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: s.Path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := time.Now()
	for _, m := range []string{"READY=1\nSTATUS=forwarding", "WATCHDOG=1", "WATCHDOG=1", "STOPPING=1"} {
		if _, err := c.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	m := s.Wait(t, "STOPPING=1", 5*time.Second)
	if m.Text != "STOPPING=1" || m.At.Before(before) {
		t.Errorf("Wait: %+v", m)
	}
	if s.Count("WATCHDOG=1") != 2 || s.Count("STATUS=forwarding") != 1 || s.Count("RELOADING=1") != 0 {
		t.Errorf("counts: watchdog %d, status %d, reloading %d", s.Count("WATCHDOG=1"), s.Count("STATUS=forwarding"), s.Count("RELOADING=1"))
	}
	r := &fatalRecorder{TB: t}
	if m := s.Wait(r, "RELOADING=1", 20*time.Millisecond); m.Text != "" || r.fatal != "no RELOADING=1 within 20ms" {
		t.Errorf("Wait for what never comes: %+v, failure %q", m, r.fatal)
	}
}

// TestRun: a command's exit status and both outputs; one that cannot
// start fails the test.
func TestRun(t *testing.T) {
	code, stdout, stderr := Run(t, exec.Command("sh", "-c", "echo out; echo err >&2; exit 3"))
	if code != 3 || stdout != "out\n" || stderr != "err\n" {
		t.Errorf("Run: %d %q %q", code, stdout, stderr)
	}
	if code, _, _ := Run(t, exec.Command("true")); code != 0 {
		t.Errorf("true: %d", code)
	}
	r := &fatalRecorder{TB: t}
	Run(r, exec.Command(filepath.Join(t.TempDir(), "missing")))
	if !strings.Contains(r.fatal, "no such file") {
		t.Errorf("a missing command: failure %q", r.fatal)
	}
}

// TestModuleRoot: the module's go.mod is found above the package.
func TestModuleRoot(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(ModuleRoot(t), "go.mod"))
	if err != nil || !strings.HasPrefix(string(raw), "module github.com/tapfwd/tapfwd\n") {
		t.Errorf("ModuleRoot's go.mod: %v %.40q", err, raw)
	}
}

// guardRecorder is t whose Skipf and Fatalf are recorded.
type guardRecorder struct {
	testing.TB
	skipped, failed string
}

func (r *guardRecorder) Skipf(format string, args ...any) { r.skipped = fmt.Sprintf(format, args...) }
func (r *guardRecorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

// TestNeedTools: a missing tool skips the test outside CI, naming the
// Debian package, and fails it with CI=true; tools that are there leave
// it alone.
func TestNeedTools(t *testing.T) {
	for _, c := range []struct {
		ci, tool     string
		skip, failed bool
	}{
		{"", "sh", false, false},
		{"", "qemu-system-x86_64-not-here", true, false},
		{"true", "sh", false, false},
		{"true", "qemu-system-x86_64-not-here", false, true},
	} {
		t.Setenv("CI", c.ci)
		t.Setenv("TAPFWD_REQUIRE_TOOLS", "")
		r := &guardRecorder{TB: t}
		NeedTools(r, "sh", c.tool)
		if (r.skipped != "") != c.skip || (r.failed != "") != c.failed {
			t.Errorf("CI=%q %s: skipped %q, failed %q", c.ci, c.tool, r.skipped, r.failed)
		}
		if msg := r.skipped + r.failed; msg != "" && !strings.Contains(msg, c.tool+" not found: apt-get install "+c.tool) {
			t.Errorf("CI=%q %s: %q", c.ci, c.tool, msg)
		}
	}
}
