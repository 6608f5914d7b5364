package testkit

import (
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// NotifySocket is a service manager's end of the sd_notify protocol: the
// datagram socket NOTIFY_SOCKET names, whose messages a test reads with
// their arrival times.
type NotifySocket struct {
	Path string

	conn *net.UnixConn
	mu   sync.Mutex
	msgs []NotifyMsg
}

// NotifyMsg is one message and when it arrived.
type NotifyMsg struct {
	At   time.Time
	Text string
}

// NewNotifySocket listens on a socket in a temporary directory of t's; it
// is closed when t ends.
func NewNotifySocket(t testing.TB) *NotifySocket {
	t.Helper()
	s := &NotifySocket{Path: filepath.Join(t.TempDir(), "notify")}
	var err error
	if s.conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.Path, Net: "unixgram"}); err != nil {
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
			s.msgs = append(s.msgs, NotifyMsg{time.Now(), string(buf[:n])})
			s.mu.Unlock()
		}
	}()
	return s
}

// Count is how many messages so far contain state (e.g. "WATCHDOG=1").
func (s *NotifySocket) Count(state string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.msgs {
		if strings.Contains(m.Text, state) {
			n++
		}
	}
	return n
}

// Wait waits up to limit for a message with state and returns it; it
// fails t when none comes.
func (s *NotifySocket) Wait(t testing.TB, state string, limit time.Duration) NotifyMsg {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		for _, m := range s.msgs {
			if strings.Contains(m.Text, state) {
				s.mu.Unlock()
				return m
			}
		}
		s.mu.Unlock()
	}
	t.Fatalf("no %s within %v", state, limit)
	return NotifyMsg{}
}
