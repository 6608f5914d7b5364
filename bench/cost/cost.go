package cost

import (
	"fmt"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
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

// Window is an open measurement: the machine's CPU times, and some
// processes', when it started.
type Window struct {
	start        time.Time
	machine      procfs.CPUTimes
	pids         []int
	user, system time.Duration // the followed processes'
}

// Start opens a window. It also follows the CPU time (user plus system,
// from /proc/PID/stat) of the processes pids names, together: the
// forwarders, so that their share can be told apart. A pid <= 0 is left
// out, and a process that cannot be read counts 0.
func Start(pids ...int) (*Window, error) {
	m, err := procfs.ReadCPUTimes()
	if err != nil {
		return nil, fmt.Errorf("cost: opening a window: %w", err)
	}
	w := &Window{start: time.Now(), machine: m, pids: pids}
	w.user, w.system = processesCPU(pids)
	return w, nil
}

// Spent is what a window measured.
type Spent struct {
	// Machine is the CPU time of every CPU in the window.
	Machine Times
	// Process is the followed processes' CPU time in the window; 0
	// without one. ProcessUser and ProcessSystem are its parts: user
	// mode (the processes' own code) and kernel mode (their system calls
	// and what the kernel runs inside them).
	Process                    time.Duration
	ProcessUser, ProcessSystem time.Duration
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
	if len(w.pids) > 0 {
		user, system := processesCPU(w.pids)
		s.ProcessUser, s.ProcessSystem = max(0, user-w.user), max(0, system-w.system)
		s.Process = s.ProcessUser + s.ProcessSystem
	}
	return s, nil
}

// processesCPU is the user and system CPU time of the processes pids,
// together.
func processesCPU(pids []int) (user, system time.Duration) {
	for _, pid := range pids {
		if pid <= 0 {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil {
			user, system = user+st.UTime, system+st.STime
		}
	}
	return user, system
}

// PerUnit is CPU seconds per unit delivered (a gigabit, a million
// datagrams): the machine's, in its three parts and in all, and the
// followed processes', in all and in user and kernel mode.
type PerUnit struct {
	User          float64 `json:"user"`
	System        float64 `json:"system"`
	Softirq       float64 `json:"softirq"`
	Total         float64 `json:"total"`
	Process       float64 `json:"process,omitempty"`
	ProcessUser   float64 `json:"process_user,omitempty"`
	ProcessSystem float64 `json:"process_system,omitempty"`
}

// Per divides s by units delivered; ok is false when nothing was.
func (s Spent) Per(units float64) (p PerUnit, ok bool) {
	if units <= 0 {
		return PerUnit{}, false
	}
	sec := func(d time.Duration) float64 { return d.Seconds() / units }
	return PerUnit{User: sec(s.Machine.User), System: sec(s.Machine.System), Softirq: sec(s.Machine.Softirq),
		Total: sec(s.Machine.Total()), Process: sec(s.Process),
		ProcessUser: sec(s.ProcessUser), ProcessSystem: sec(s.ProcessSystem)}, true
}
