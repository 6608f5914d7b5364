package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
