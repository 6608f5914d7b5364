package cost

import (
	"crypto/sha256"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

func TestPer(t *testing.T) {
	s := Spent{Machine: Times{User: 2 * time.Second, System: time.Second, Softirq: 500 * time.Millisecond}, Process: 250 * time.Millisecond,
		ProcessUser: 50 * time.Millisecond, ProcessSystem: 200 * time.Millisecond}
	p, ok := s.Per(2)
	if !ok || p != (PerUnit{User: 1, System: 0.5, Softirq: 0.25, Total: 1.75, Process: 0.125, ProcessUser: 0.025, ProcessSystem: 0.1}) {
		t.Errorf("Per(2) = %+v, %v", p, ok)
	}
	if _, ok := s.Per(0); ok {
		t.Error("Per(0) gave a figure")
	}
	tick := 10 * time.Millisecond
	if got := FromProc(procfs.CPUTimes{User: tick, Nice: tick, System: 3 * tick, IRQ: tick, SoftIRQ: 5 * tick, Idle: time.Hour, IOWait: time.Hour, Steal: time.Hour}); got != (Times{2 * tick, 4 * tick, 5 * tick}) {
		t.Errorf("FromProc = %+v: idle, iowait and steal are no cost", got)
	}
}

// burnEnv marks the test binary started as a CPU burner.
const burnEnv = "TAPFWD_COST_BURN"

// TestMain turns the test binary into a process that spins until killed
// when started with burnEnv set: the CPU-burning neighbour of
// TestBurnerRaisesCost.
func TestMain(m *testing.M) {
	if os.Getenv(burnEnv) == "1" {
		for x := uint64(0); ; x++ {
			x ^= x << 13
		}
	}
	os.Exit(m.Run())
}

// job is a fixed amount of work, the stand-in for a bench run: it hashes
// 128 MiB (a few hundred milliseconds, many 10 ms ticks of /proc/stat)
// and returns the units it delivered (MiB).
func job() float64 {
	buf := make([]byte, 1<<20)
	h := sha256.New()
	for range 128 {
		h.Write(buf)
	}
	h.Sum(nil)
	return 128
}

// costOfJob runs job in a window and returns the machine's CPU seconds
// per unit, and this process's.
func costOfJob(t *testing.T) (machine, process float64) {
	t.Helper()
	w, err := Start(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	units := job()
	s, err := w.Stop()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Per(units)
	return p.Total, p.Process
}

// TestBurnerRaisesCost checks the meter sees the whole machine: the same
// job measured with CPU-burning processes beside it costs more. With idle CPUs the
// burners' time lands in the window; with every CPU already busy (a
// shared machine) the job waits longer for a CPU and the window, which
// counts every CPU's time, grows. Windows with and without burners
// alternate, and the medians of five each are compared.
func TestBurnerRaisesCost(t *testing.T) {
	if testing.Short() {
		t.Skip("spins CPUs for a few seconds")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	job() // warm up
	var quiet, busy, own []float64
	for range 5 {
		m, p := costOfJob(t)
		quiet, own = append(quiet, m), append(own, p)
		burners := startBurners(t, self, 2*runtime.NumCPU())
		m, _ = costOfJob(t)
		busy = append(busy, m)
		stopBurners(burners)
	}
	q, b := median(quiet), median(busy)
	t.Logf("machine CPU s per MiB hashed: %.5f alone %v (this process %.5f), %.5f beside %d burners %v", q, quiet, median(own), b, 2*runtime.NumCPU(), busy)
	if median(own) <= 0 || median(own) > 2*q {
		t.Errorf("this process's share %.5f against the machine's %.5f: want above 0 and within it", median(own), q)
	}
	if !(b > 1.2*q) || math.IsNaN(q) {
		t.Errorf("cost beside burners %.4f, alone %.4f: want at least 1.2x", b, q)
	}
}

func startBurners(t *testing.T, self string, n int) []*exec.Cmd {
	t.Helper()
	var cs []*exec.Cmd
	for range n {
		c := exec.Command(self, "-test.run=^$")
		c.Env = append(os.Environ(), burnEnv+"=1")
		if err := c.Start(); err != nil {
			stopBurners(cs)
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	t.Cleanup(func() { stopBurners(cs) })
	time.Sleep(50 * time.Millisecond) // let them start spinning
	return cs
}

func stopBurners(cs []*exec.Cmd) {
	for _, c := range cs {
		if c.Process != nil && c.ProcessState == nil {
			c.Process.Kill()
			c.Wait()
		}
	}
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestFollowsSeveralProcesses checks that a window follows the processes
// it names together (a pid named twice counts twice) and leaves out pids
// <= 0.
func TestFollowsSeveralProcesses(t *testing.T) {
	self := os.Getpid()
	one, err := Start(self)
	if err != nil {
		t.Fatal(err)
	}
	two, err := Start(self, 0, self, -1)
	if err != nil {
		t.Fatal(err)
	}
	job()
	s2, err := two.Stop()
	if err != nil {
		t.Fatal(err)
	}
	s1, err := one.Stop()
	if err != nil {
		t.Fatal(err)
	}
	// /proc/PID/stat counts in clock ticks (10 ms): the two windows'
	// reads may fall either side of one.
	tick := 10 * time.Millisecond
	if s1.Process <= 0 || (s2.Process-2*s1.Process).Abs() > 2*tick {
		t.Errorf("one pid: %v; the same pid twice: %v, want twice as much", s1.Process, s2.Process)
	}
	// job hashes in user mode.
	if s1.Process != s1.ProcessUser+s1.ProcessSystem || s1.ProcessUser < s1.ProcessSystem {
		t.Errorf("one pid: %v = user %v + system %v, want mostly user", s1.Process, s1.ProcessUser, s1.ProcessSystem)
	}
	none, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := none.Stop(); err != nil || s.Process != 0 {
		t.Errorf("no pid: %+v, %v", s, err)
	}
}
