package trace

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

func TestParseSoftirqs(t *testing.T) {
	s, err := parseSoftirqs(`                    CPU0       CPU1
          HI:          0          0
      NET_TX:       7737        496
      NET_RX:    5275744    3088607
       BLOCK:          0      90465
`)
	if err != nil || len(s.rx) != 2 || s.rx[1] != 3088607 || s.tx[0] != 7737 {
		t.Errorf("%+v, %v", s, err)
	}
	if _, err := parseSoftirqs("HI: 0 0\n"); err == nil {
		t.Error("no NET_RX line: no error")
	}
	if _, err := parseSoftirqs("NET_RX: 1 x\nNET_TX: 1 2\n"); err == nil {
		t.Error("a count that is not a number: no error")
	}
}

func TestParseIperf(t *testing.T) {
	raw, err := os.ReadFile("../../internal/lab/iperf/testdata/tcp.json")
	if err != nil {
		t.Fatal(err)
	}
	ip, err := ParseIperf(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(ip.Intervals) == 0 || ip.Intervals[0] < 1 || ip.MaxCwnd <= 0 || ip.MeanRTT <= 0 || ip.Retransmits <= 0 {
		t.Errorf("%+v", ip)
	}
	if _, err := ParseIperf([]byte("{")); err == nil {
		t.Error("broken JSON: no error")
	}
}

func TestMainCPU(t *testing.T) {
	for _, tc := range []struct {
		on   []float64
		want int
	}{{[]float64{0.2, 0.8}, 1}, {[]float64{0.6, 0.4}, 0}, {[]float64{0, 0}, -1}, {nil, -1}} {
		if got := (Thread{OnCPU: tc.on}).MainCPU(); got != tc.want {
			t.Errorf("MainCPU(%v) = %d, want %d", tc.on, got, tc.want)
		}
	}
}

// TestTraceWorker traces this process as a forwarder: a thread pinned to
// one CPU and kept busy is its worker, found on that CPU, with the CPU
// time its schedstat shows over the trace; the softirqs are counted per
// CPU.
func TestTraceWorker(t *testing.T) {
	allowed, err := cpulist.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	cpu := allowed[0]
	ready := make(chan int)
	var stop atomic.Bool
	go func() {
		runtime.LockOSThread()
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Error(err)
		}
		ready <- unix.Gettid()
		for !stop.Load() {
		}
		// The thread ends with its locked goroutine.
	}()
	tid := <-ready
	ran := func() time.Duration {
		b, err := os.ReadFile(taskDir(os.Getpid(), tid) + "/schedstat")
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := procfs.ParseSchedStat(string(b))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := ran()
	tr := Start(context.Background(), Targets{Forwarders: []int{os.Getpid()}})
	time.Sleep(300 * time.Millisecond)
	run := tr.Stop(nil)
	spent := ran() - before
	stop.Store(true)
	var w *Thread
	for i, th := range run.Threads {
		if th.Role == Worker && th.TID == tid {
			w = &run.Threads[i]
		}
	}
	if w == nil {
		t.Fatalf("no worker %d among %+v", tid, run.Threads)
	}
	if got := time.Duration(w.RunSeconds * 1e9); got <= 0 || got > spent || got < spent-20*time.Millisecond {
		t.Errorf("worker ran %v in the trace, %v by its schedstat around it", got, spent)
	}
	if w.MainCPU() != cpu || w.OnCPU[cpu] < 0.99 || w.Allowed != strconv.Itoa(cpu) {
		t.Errorf("worker %+v: want it on CPU %d all the time", w, cpu)
	}
	if len(run.NetRX) != runtime.NumCPU() || len(run.Missing) != 0 {
		t.Errorf("softirqs %v, missing %v", run.NetRX, run.Missing)
	}
}

func TestPacking(t *testing.T) {
	counters := func(pkts, octets, segs int64) map[string]int64 {
		return map[string]int64{"Ip.OutRequests": pkts, "IpExt.OutOctets": octets, "Tcp.OutSegs": segs}
	}
	for _, tc := range []struct {
		name   string
		sender map[string]int64
		want   string
	}{
		// Figures of the order of two runs of the 128 B one-stream row
		// through tapfwd in one bed: 1.2 KB and 45 KB per packet.
		{"one segment a packet", counters(60_000, 72_700_000, 61_500), PerSegment},
		{"GSO packets", counters(1_500, 66_900_000, 46_400), Coalesced},
		{"at the limit", counters(1_000, PerSegmentMax*1_000, 2_100), PerSegment},
		{"just past it", counters(1_000, PerSegmentMax*1_000+1, 2_100), Coalesced},
		{"UDP datagrams", counters(500_000, 46_000_000, 20), ""},
		{"no packets", counters(0, 0, 0), ""},
		{"no counters", nil, ""},
	} {
		if got := (&Run{Sender: tc.sender}).Packing(); got != tc.want {
			t.Errorf("%s: Packing() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestTraceOwn: a thread of this process named in Targets.Own is followed
// in its role, after the forwarders' roles, with the CPU time it spun.
func TestTraceOwn(t *testing.T) {
	ready := make(chan int)
	var stop atomic.Bool
	go func() {
		runtime.LockOSThread()
		ready <- unix.Gettid()
		for !stop.Load() {
		}
	}()
	tid := <-ready
	tr := Start(context.Background(), Targets{Own: map[int]string{tid: "load"}})
	time.Sleep(200 * time.Millisecond)
	run := tr.Stop(nil)
	stop.Store(true)
	if len(run.Threads) != 1 || run.Threads[0].Role != "load" || run.Threads[0].TID != tid {
		t.Fatalf("threads %+v: want the one spinning thread %d as \"load\"", run.Threads, tid)
	}
	if th := run.Threads[0]; th.RunSeconds < 0.01 || th.RunSeconds > 0.5 {
		t.Errorf("the spinning thread ran %.3f s of a 0.2 s trace", th.RunSeconds)
	}
}

// TestTraceBusyPoller: a forwarder's pinned thread named as tapfwd names
// its --busy-poll-cpu thread is followed as the busy poller, not as a
// worker.
func TestTraceBusyPoller(t *testing.T) {
	allowed, err := cpulist.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan int)
	var stop atomic.Bool
	go func() {
		runtime.LockOSThread()
		var one unix.CPUSet
		one.Set(allowed[len(allowed)-1])
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile("/proc/thread-self/comm", []byte(BusyPollName), 0); err != nil {
			t.Error(err)
		}
		ready <- unix.Gettid()
		for !stop.Load() {
		}
		// The thread, renamed, ends with its locked goroutine.
	}()
	tid := <-ready
	tr := Start(context.Background(), Targets{Forwarders: []int{os.Getpid()}})
	time.Sleep(100 * time.Millisecond)
	run := tr.Stop(nil)
	stop.Store(true)
	for _, th := range run.Threads {
		if th.TID == tid {
			if th.Role != Poller {
				t.Errorf("the busy-poll thread is followed as %q, want %q", th.Role, Poller)
			}
			return
		}
	}
	t.Fatalf("busy-poll thread %d not followed: %+v", tid, run.Threads)
}
