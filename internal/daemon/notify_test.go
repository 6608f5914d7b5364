package daemon

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
)

// watchdogSocket is a service manager's end of the sd_notify protocol: it
// counts the WATCHDOG=1 it gets.
func watchdogSocket(t *testing.T) (path string, pings *atomic.Int64) {
	path = filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	pings = &atomic.Int64{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			if strings.Contains(string(buf[:n]), "WATCHDOG=1") {
				pings.Add(1)
			}
		}
	}()
	return path, pings
}

// TestWatchdogStall: the watchdog pings stop while a worker is wedged (a
// read that does not return) and resume when it moves again.
func TestWatchdogStall(t *testing.T) {
	path, count := watchdogSocket(t)
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
	n := &notifier{log: slog.New(slog.DiscardHandler), Notify: Notify{Socket: path, Watchdog: 100 * time.Millisecond}}
	go n.watchdog(ctx, fw.Stalled)

	pings := func() int64 {
		before := count.Load()
		time.Sleep(500 * time.Millisecond)
		return count.Load() - before
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

func TestWorkerCPUs(t *testing.T) {
	cpus, err := workerCPUs([]int{3, 5}, 3)
	if err != nil || cpus[0] != 3 || cpus[1] != 5 || cpus[2] != 3 {
		t.Fatalf("workerCPUs wraps: %v, %v", cpus, err)
	}
	cpus, _ = workerCPUs([]int{}, 2)
	if cpus[0] != -1 || cpus[1] != -1 {
		t.Fatalf("none: %v", cpus)
	}
	cpus, err = workerCPUs(nil, 2)
	if err != nil || len(cpus) != 2 || cpus[0] < 0 {
		t.Fatalf("allowed CPUs: %v, %v", cpus, err)
	}
}
