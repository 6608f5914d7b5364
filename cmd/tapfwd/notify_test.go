package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// notifySocket is a service manager's end of the sd_notify protocol: a
// datagram socket whose messages the test reads, with arrival times.
type notifySocket struct {
	path string
	conn *net.UnixConn
	mu   sync.Mutex
	msgs []notifyMsg
}

type notifyMsg struct {
	at   time.Time
	text string
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	s := &notifySocket{path: filepath.Join(t.TempDir(), "notify")}
	var err error
	if s.conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := s.conn.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, notifyMsg{time.Now(), string(buf[:n])})
			s.mu.Unlock()
		}
	}()
	return s
}

// count is how many messages so far contain state (e.g. "WATCHDOG=1").
func (s *notifySocket) count(state string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.msgs {
		if strings.Contains(m.text, state) {
			n++
		}
	}
	return n
}

// wait waits until a message with state arrives, and returns it.
func (s *notifySocket) wait(t *testing.T, state string, limit time.Duration) notifyMsg {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		for _, m := range s.msgs {
			if strings.Contains(m.text, state) {
				s.mu.Unlock()
				return m
			}
		}
		s.mu.Unlock()
	}
	t.Fatalf("no %s within %v", state, limit)
	return notifyMsg{}
}

// TestNotify: under a service manager (NOTIFY_SOCKET, WATCHDOG_USEC)
// tapfwd says READY=1 once frames flow, pings the watchdog while it runs,
// and says STOPPING=1 on SIGTERM; --ready-fd gets a line and is closed.
func TestNotify(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	ns := newNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", ns.path)
	t.Setenv("WATCHDOG_USEC", "400000")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	args := append(append([]string{"run"}, bed.ForwarderArgs()...), "--metrics-addr", "", "--ready-fd", "3")
	cmd := bed.Command(context.Background(), bed.FwdNS, exe(t), args...)
	cmd.ExtraFiles = []*os.File{w}
	out := &strings.Builder{}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	ready := ns.wait(t, "READY=1", 10*time.Second)
	t.Logf("READY: %q", ready.text)
	// Frames flow as soon as tapfwd says so.
	p := testkit.NewPinger(t, bed)
	if p.Ping(1, time.Second) != 1 {
		t.Errorf("the lab did not answer right after READY=1:\n%s", out)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if !strings.HasPrefix(line, "READY=1") || err != nil {
		t.Errorf("--ready-fd gave %q, %v", line, err)
	}
	if _, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("--ready-fd not closed after the line: %v", err)
	}
	time.Sleep(time.Second)
	if n := ns.count("WATCHDOG=1"); n < 3 {
		t.Errorf("%d WATCHDOG=1 in the second after READY=1 (WatchdogSec 0.4 s), want at least 3", n)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, out)
	}
	ns.wait(t, "STOPPING=1", time.Second)
}

// TestWatchdogStall: the watchdog pings stop while a worker is wedged (a
// read that does not return) and resume when it moves again.
func TestWatchdogStall(t *testing.T) {
	ns := newNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", ns.path)
	t.Setenv("WATCHDOG_USEC", "100000")
	nics := []*forwardtest.Fake{forwardtest.NewFake(t), forwardtest.NewFake(t)}
	taps := []forward.Endpoint{forwardtest.NewFake(t), forwardtest.NewFake(t)}
	fw, err := forward.New(taps, []forward.NIC{nics[0], nics[1]}, forward.Config{CPUs: []int{-1, -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()
	defer func() { nics[1].Release(); cancel(); <-done }()
	<-fw.Started()
	n := &notifier{log: slog.New(slog.DiscardHandler), readyFd: -1}
	go n.watchdog(ctx, fw.Stalled)

	pings := func() int {
		before := ns.count("WATCHDOG=1")
		time.Sleep(500 * time.Millisecond)
		return ns.count("WATCHDOG=1") - before
	}
	if got := pings(); got < 5 {
		t.Errorf("%d pings in 0.5 s with the workers idle (every 50 ms), want at least 5", got)
	}
	nics[1].Hold()
	time.Sleep(150 * time.Millisecond) // a ping may be on its way
	if got := pings(); got != 0 {
		t.Errorf("%d pings in 0.5 s with queue 1 wedged, want none", got)
	}
	nics[1].Release()
	time.Sleep(150 * time.Millisecond)
	if got := pings(); got < 5 {
		t.Errorf("%d pings in 0.5 s after queue 1 moved again, want at least 5", got)
	}
}
