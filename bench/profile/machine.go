package profile

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/cpuprofile"
	"github.com/tapfwd/tapfwd/bench/trace"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// CPUTime is what one CPU did over a window, in percent of it
// (/proc/stat): user (with nice), system, hard and soft interrupts,
// idle (with I/O wait) and steal (time the hypervisor gave to others).
type CPUTime struct {
	CPU     int     `json:"cpu"`
	User    float64 `json:"user_percent"`
	System  float64 `json:"system_percent"`
	IRQ     float64 `json:"irq_percent"`
	Softirq float64 `json:"softirq_percent"`
	Idle    float64 `json:"idle_percent"`
	Steal   float64 `json:"steal_percent"`
}

// ThreadTime is what one thread ran over a window (/proc/PID/task/TID/stat).
type ThreadTime struct {
	// Role: "tapfwd worker (pinned to CPU N)", "tapfwd", ksoftirqd/N,
	// napi/DEV-ID.
	Role string `json:"role"`
	TID  int    `json:"tid"`
	// User and System are its CPU seconds in user and kernel mode
	// (softirqs it ran in its own context count in System); Percent is
	// both over the window.
	User    float64 `json:"user_seconds"`
	System  float64 `json:"system_seconds"`
	Percent float64 `json:"percent_of_window"`
}

// snapshot is what Machine compares: each CPU's times, and the CPU time
// of the threads followed.
type snapshot struct {
	at      time.Time
	cpus    []procfs.CPUTimes
	threads map[int]thread
}

type thread struct {
	role         string
	user, system time.Duration
}

// takeSnapshot reads every CPU's times and the threads of pids (tapfwd;
// each thread pinned to a single CPU is a worker) and of the kernel's
// softirq and NAPI kthreads (ksoftirqd/N, napi/...).
func takeSnapshot(pids []int) (snapshot, error) {
	s := snapshot{at: time.Now(), threads: map[int]thread{}}
	var err error
	if s.cpus, err = procfs.ReadPerCPUTimes(); err != nil {
		return s, err
	}
	for _, pid := range pids {
		for _, tid := range procfs.Tasks(pid) {
			if st, err := readTask(pid, tid); err == nil {
				s.threads[tid] = thread{role: tapfwdRole(pid, tid), user: st.UTime, system: st.STime}
			}
		}
	}
	for pid, st := range kernelThreads() {
		s.threads[pid] = thread{role: st.Comm, user: st.UTime, system: st.STime}
	}
	return s, nil
}

func readTask(pid, tid int) (procfs.Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return procfs.Stat{}, err
	}
	return procfs.ParseStat(string(b))
}

// tapfwdRole names a thread of tapfwd: a worker when pinned to one CPU,
// unless it is the busy-poll thread of --busy-poll-cpu (tapfwd-busypoll).
func tapfwdRole(pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return "tapfwd"
	}
	st := procfs.ParseStatus(string(b))
	allowed := st["Cpus_allowed_list"]
	if allowed == "" || strings.ContainsAny(allowed, ",-") {
		return "tapfwd"
	}
	if st["Name"] == trace.BusyPollName {
		return "tapfwd busy poll (pinned to CPU " + allowed + ")"
	}
	return "tapfwd worker (pinned to CPU " + allowed + ")"
}

// kernelThreads are the softirq and NAPI kthreads: children of kthreadd
// (pid 2) named ksoftirqd/N or napi/....
func kernelThreads() map[int]procfs.Stat {
	out := map[int]procfs.Stat{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procfs.ReadStat(pid)
		if err != nil || st.PPid != 2 || !(strings.HasPrefix(st.Comm, "ksoftirqd/") || strings.HasPrefix(st.Comm, "napi/")) {
			continue
		}
		out[pid] = st
	}
	return out
}

// machine is what happened between snapshots a and b: each CPU's split,
// and the threads that ran, busiest first.
func machine(a, b snapshot) ([]CPUTime, []ThreadTime) {
	window := b.at.Sub(a.at)
	var cpus []CPUTime
	for i := range min(len(a.cpus), len(b.cpus)) {
		d := b.cpus[i].Sub(a.cpus[i])
		all := d.User + d.Nice + d.System + d.IRQ + d.SoftIRQ + d.Idle + d.IOWait + d.Steal
		if all <= 0 {
			continue
		}
		p := func(t time.Duration) float64 { return cpuprofile.Percent(float64(t), float64(all)) }
		cpus = append(cpus, CPUTime{CPU: i, User: p(d.User + d.Nice), System: p(d.System), IRQ: p(d.IRQ), Softirq: p(d.SoftIRQ),
			Idle: p(d.Idle + d.IOWait), Steal: p(d.Steal)})
	}
	var threads []ThreadTime
	for tid, t1 := range b.threads {
		t0, ok := a.threads[tid]
		if !ok {
			continue
		}
		u, s := t1.user-t0.user, t1.system-t0.system
		if u+s <= 0 {
			continue
		}
		threads = append(threads, ThreadTime{Role: t1.role, TID: tid, User: u.Seconds(), System: s.Seconds(),
			Percent: cpuprofile.Percent(float64(u+s), float64(window))})
	}
	slices.SortFunc(threads, func(x, y ThreadTime) int {
		return cmp.Or(cmp.Compare(y.User+y.System, x.User+x.System), cmp.Compare(x.TID, y.TID))
	})
	return cpus, threads
}
