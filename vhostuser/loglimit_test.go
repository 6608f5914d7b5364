package vhostuser_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/syncbuf"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// logLines is what a port logged, a JSON object a line.
type logLines struct{ buf syncbuf.Buffer }

func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(&l.buf, nil)) }

func (l *logLines) all(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		out = append(out, m)
	}
	return out
}

// count returns how many lines had message msg and how many more the
// limiter's summaries said it held back.
func (l *logLines) count(t *testing.T, msg string) (logged, suppressed int) {
	t.Helper()
	for _, m := range l.all(t) {
		switch {
		case m["msg"] == msg:
			logged++
		case m["msg"] == "vhost-user: similar lines suppressed" && m["line"] == msg:
			suppressed += int(m["suppressed"].(float64))
		}
	}
	return logged, suppressed
}

// TestLogLimitToggles (issue 35 item 4): a front-end that toggles
// SET_VRING_ENABLE 5,000 times made the port log a line each time its
// rings came back. The port now logs the first 10 of that line per
// interval (here 1 s) and then one line saying how many it held back, so
// that the lines it logged and those it counted make exactly the 5,001
// times the port started running.
func TestLogLimitToggles(t *testing.T) {
	defer vhostuser.SetLogLimits(10, time.Second)()
	var l logLines
	p := newPort(t, vhostuser.Config{Logger: l.logger()})
	d := p.dial(t, vhostusertest.Config{})
	done := make(chan struct{})
	go func() { // OnEvent must not block: take the 10,000 events
		for {
			select {
			case <-p.events:
			case <-done:
				return
			}
		}
	}()
	defer close(done)
	const toggles = 5000
	start := time.Now()
	for range toggles {
		if err := d.EnablePair(0, false); err != nil {
			t.Fatal(err)
		}
		if err := d.EnablePair(0, true); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	p.Close()
	const msg = "vhost-user port running"
	logged, suppressed := l.count(t, msg)
	lines := len(l.all(t))
	t.Logf("%d toggles in %v: %d lines in all, %q %d times, %d held back", toggles, took, lines, msg, logged, suppressed)
	if max := 10 * (int(took/time.Second) + 2); logged > max {
		t.Errorf("%q logged %d times in %v, want at most %d (10 per interval begun)", msg, logged, took, max)
	}
	if logged+suppressed != toggles+1 {
		t.Errorf("%q logged %d times and %d held back, want %d in all", msg, logged, suppressed, toggles+1)
	}
	if lines > 100 {
		t.Errorf("%d lines for %d toggles, want at most 100", lines, toggles)
	}
}

// TestLogLimitReconnects (issue 35 item 4): 50 connections, each setting
// up 128 queue pairs on a single-queue port (254 rings beyond the port's,
// each logged once per connection), made some 12,900 lines; the port now logs
// a bounded number, and its summaries account for every line held back.
func TestLogLimitReconnects(t *testing.T) {
	defer vhostuser.SetLogLimits(10, time.Second)()
	var l logLines
	p := newPort(t, vhostuser.Config{Logger: l.logger()})
	const conns = 50
	start := time.Now()
	for range conns {
		d := p.dial(t, vhostusertest.Config{QueuePairs: 128, QueueSize: 16, TxSlot: 2048})
		d.Close()
		p.wait(t, vhostuser.EventDisconnected)
	}
	took := time.Since(start)
	p.Close()
	lines := len(l.all(t))
	t.Logf("%d connections in %v: %d lines", conns, took, lines)
	want := map[string]int{
		"vhost-user front-end connected":    conns,
		"vhost-user front-end disconnected": conns,
		"vhost-user port running":           conns,
		// the first time each ring beyond the port's is set up on a
		// connection: counted as a protocol error
		"vhost-user front-end set up a ring beyond the port's: refused, the connection kept " +
			"(give it as many queues as the port has queue pairs)": int(p.Stats().ProtocolErrors),
	}
	for msg, n := range want {
		logged, suppressed := l.count(t, msg)
		if logged+suppressed != n || logged > 10*(int(took/time.Second)+2) {
			t.Errorf("%q logged %d times and %d held back in %v, want %d in all, at most 10 a second", msg, logged, suppressed, took, n)
		}
	}
	if max := 4 * 11 * (int(took/time.Second) + 2); lines > max {
		t.Errorf("%d lines for %d connections in %v, want at most %d", lines, conns, took, max)
	}
}
