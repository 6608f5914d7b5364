package profile

import (
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/trace"
)

// TestMachine follows this process as it would tapfwd: a thread pinned
// to one CPU spins, and the window finds it as a worker with the CPU
// time it spent, busiest first; every CPU's split adds up to the whole
// window; the kernel's softirq threads are followed.
func TestMachine(t *testing.T) {
	// The thread exists, pinned, before the first snapshot (the window
	// follows threads that are in both), and spins after it.
	ready, spin, done, release := make(chan int), make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(release)
	go func() {
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(0)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			t.Error(err)
		}
		ready <- unix.Gettid()
		<-spin
		// 200 ms of CPU, however long a busy machine takes to give it.
		start, until := threadCPU(), time.Now().Add(time.Minute)
		for time.Now().Before(until) && threadCPU()-start < 200*time.Millisecond {
		}
		close(done)
		<-release // the thread lives on until the second snapshot
	}()
	tid := <-ready
	a, err := takeSnapshot([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	ksoftirqd := false
	for _, th := range a.threads {
		ksoftirqd = ksoftirqd || strings.HasPrefix(th.role, "ksoftirqd/")
	}
	close(spin)
	<-done
	b, err := takeSnapshot([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	cpus, threads := machine(a, b)
	if len(cpus) != len(a.cpus) || !ksoftirqd {
		t.Errorf("%d CPUs of %d; ksoftirqd followed: %v", len(cpus), len(a.cpus), ksoftirqd)
	}
	for _, c := range cpus {
		if sum := c.User + c.System + c.IRQ + c.Softirq + c.Idle + c.Steal; math.Abs(sum-100) > 0.01 {
			t.Errorf("CPU %d: %+v adds up to %v%%", c.CPU, c, sum)
		}
	}
	if len(threads) == 0 || threads[0].TID != tid || threads[0].Role != "tapfwd worker (pinned to CPU 0)" ||
		threads[0].User+threads[0].System < 0.15 || threads[0].Percent <= 0 {
		t.Errorf("the spinning thread %d: %+v", tid, threads)
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// TestBusyPollRole: a pinned thread named as tapfwd names its
// --busy-poll-cpu thread is the busy poll, not a worker; an unpinned one
// is plain tapfwd.
func TestBusyPollRole(t *testing.T) {
	roles := make(chan string, 2)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, its name and pinning with it
		before := tapfwdRole(os.Getpid(), unix.Gettid())
		var set unix.CPUSet
		set.Set(0)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile("/proc/thread-self/comm", []byte(trace.BusyPollName), 0); err != nil {
			t.Error(err)
		}
		roles <- before
		roles <- tapfwdRole(os.Getpid(), unix.Gettid())
	}()
	if got := <-roles; got != "tapfwd" && !strings.HasPrefix(got, "tapfwd worker") {
		t.Errorf("before naming: %q", got)
	}
	if got := <-roles; got != "tapfwd busy poll (pinned to CPU 0)" {
		t.Errorf("the named, pinned thread: %q, want the busy poll", got)
	}
}
