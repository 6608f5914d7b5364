package cost

import (
	"fmt"
	"time"

	"github.com/tapfwd/tapfwd/internal/procfs"
)

// Times is CPU time summed over all CPUs, in the three parts a report
// shows. Idle, I/O wait and steal (time the hypervisor gave to others)
// are no part of a run's cost.
type Times struct {
	// User is user plus nice time (guest time is inside user).
	User time.Duration
	// System is kernel time outside softirqs: system calls (a TAP write
	// and the receive path it runs, a packet socket read) and hard
	// interrupts.
	System time.Duration
	// Softirq is time in softirqs: the network receive and transmit work
	// the kernel defers, where the Linux bridge forwards.
	Softirq time.Duration
}

// Total is User + System + Softirq.
func (t Times) Total() time.Duration { return t.User + t.System + t.Softirq }

// FromProc groups /proc/stat's times into Times.
func FromProc(c procfs.CPUTimes) Times {
	return Times{User: c.User + c.Nice, System: c.System + c.IRQ, Softirq: c.SoftIRQ}
}

// Window is an open measurement: the machine's CPU times, and one
// process's, when it started.
type Window struct {
	start   time.Time
	machine procfs.CPUTimes
	pid     int
	process time.Duration
}

// Start opens a window. With pid > 0 it also follows that process's CPU
// time (user plus system, from /proc/PID/stat), so the forwarder's share
// can be told apart; a process that cannot be read counts 0.
func Start(pid int) (*Window, error) {
	m, err := procfs.ReadCPUTimes()
	if err != nil {
		return nil, fmt.Errorf("cost: opening a window: %w", err)
	}
	return &Window{start: time.Now(), machine: m, pid: pid, process: processCPU(pid)}, nil
}

// Spent is what a window measured.
type Spent struct {
	// Machine is the CPU time of every CPU in the window.
	Machine Times
	// Process is the followed process's CPU time in the window; 0
	// without one.
	Process time.Duration
	// Wall is the window's length.
	Wall time.Duration
}

// Stop closes the window and returns what was spent in it.
func (w *Window) Stop() (Spent, error) {
	m, err := procfs.ReadCPUTimes()
	if err != nil {
		return Spent{}, fmt.Errorf("cost: closing a window: %w", err)
	}
	s := Spent{Machine: FromProc(m.Sub(w.machine)), Wall: time.Since(w.start)}
	if w.pid > 0 {
		s.Process = max(0, processCPU(w.pid)-w.process)
	}
	return s, nil
}

func processCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return 0
	}
	return st.CPU()
}

// PerUnit is CPU seconds per unit delivered (a gigabit, a million
// datagrams): the machine's, in its three parts and in all, and the
// followed process's.
type PerUnit struct {
	User    float64 `json:"user"`
	System  float64 `json:"system"`
	Softirq float64 `json:"softirq"`
	Total   float64 `json:"total"`
	Process float64 `json:"process,omitempty"`
}

// Per divides s by units delivered; ok is false when nothing was.
func (s Spent) Per(units float64) (p PerUnit, ok bool) {
	if units <= 0 {
		return PerUnit{}, false
	}
	sec := func(d time.Duration) float64 { return d.Seconds() / units }
	return PerUnit{User: sec(s.Machine.User), System: sec(s.Machine.System), Softirq: sec(s.Machine.Softirq),
		Total: sec(s.Machine.Total()), Process: sec(s.Process)}, true
}
