package napi

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PinKthread restricts thread pid, a NAPI's polling kthread, to CPU cpu
// (sched_setaffinity, as taskset -p does). It works on any thread the caller
// may change; it does not check that pid is a NAPI kthread.
func PinKthread(pid, cpu int) error {
	if pid <= 0 {
		return fmt.Errorf("pin pid %d: not a thread", pid)
	}
	if cpu < 0 || cpu >= cpuSetSize {
		return fmt.Errorf("pin pid %d: CPU %d out of range", pid, cpu)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(pid, &set); err != nil {
		if errors.Is(err, unix.EINVAL) {
			// kernel/sched/syscalls.c: __sched_setaffinity: no online CPU
			// left in the mask.
			return fmt.Errorf("pin pid %d to CPU %d: CPU %d is not online or not allowed: %w", pid, cpu, cpu, os.NewSyscallError("sched_setaffinity", err))
		}
		return fmt.Errorf("pin pid %d to CPU %d: %w", pid, cpu, os.NewSyscallError("sched_setaffinity", err))
	}
	return nil
}

// cpuSetSize is CPU_SETSIZE, the CPUs a unix.CPUSet holds.
const cpuSetSize = 1024

// Real-time priorities SCHED_FIFO takes (include/uapi/linux/sched.h,
// sched_get_priority_max(SCHED_FIFO) = MAX_RT_PRIO-1).
const (
	MinFIFOPriority = 1
	MaxFIFOPriority = 99
)

// SetFIFO gives thread pid the real-time policy SCHED_FIFO with priority
// prio (1 to 99), as chrt -f -p does.
func SetFIFO(pid, prio int) error {
	if pid <= 0 {
		return fmt.Errorf("set SCHED_FIFO for pid %d: not a thread", pid)
	}
	if prio < MinFIFOPriority || prio > MaxFIFOPriority {
		return fmt.Errorf("SCHED_FIFO priority %d: want %d to %d", prio, MinFIFOPriority, MaxFIFOPriority)
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	if err := unix.SchedSetAttr(pid, &attr, 0); err != nil {
		return fmt.Errorf("set SCHED_FIFO %d for pid %d: %w", prio, pid, os.NewSyscallError("sched_setattr", err))
	}
	return nil
}

// Kthread describes a thread, typically a NAPI's polling kthread, as /proc
// and sched_getattr show it.
type Kthread struct {
	PID  int    `json:"pid"`
	Name string `json:"name,omitempty"` // /proc/PID/comm, e.g. "napi/eth0-8193" (at most 15 bytes)
	// CPUs it may run on, as /proc/PID/status Cpus_allowed_list, e.g. "0-3".
	CPUs string `json:"cpus,omitempty"`
	// Policy is the scheduling policy: "other", "fifo", "rr", "batch",
	// "idle", "deadline" or "ext".
	Policy   string `json:"policy,omitempty"`
	Priority int    `json:"priority,omitempty"` // real-time priority under fifo and rr; 0 otherwise
}

// Sched is the policy and its priority when it has one: "fifo 50", "other".
func (k Kthread) Sched() string {
	if k.Priority != 0 {
		return k.Policy + " " + strconv.Itoa(k.Priority)
	}
	return k.Policy
}

// Scheduling policy names, by SCHED_* number (include/uapi/linux/sched.h).
var policyNames = map[uint32]string{0: "other", 1: "fifo", 2: "rr", 3: "batch", 5: "idle", 6: "deadline", 7: "ext"}

// ReadKthread describes thread pid. A pid that does not exist (any more) is
// an error matching os.ErrNotExist.
func ReadKthread(pid int) (Kthread, error) {
	k := Kthread{PID: pid}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return k, fmt.Errorf("describe pid %d: %w", pid, err)
	}
	k.Name = strings.TrimSpace(string(comm))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return k, fmt.Errorf("describe pid %d: %w", pid, err)
	}
	for l := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			k.CPUs = strings.TrimSpace(v)
		}
	}
	a, err := schedPolicy(pid)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			err = fmt.Errorf("describe pid %d: %w", pid, os.ErrNotExist)
		}
		return k, err
	}
	k.Policy = policyNames[a.Policy]
	if k.Policy == "" {
		k.Policy = fmt.Sprintf("policy-%d", a.Policy)
	}
	if a.Policy == unix.SCHED_FIFO || a.Policy == unix.SCHED_RR {
		k.Priority = int(a.Priority)
	}
	return k, nil
}

// affinity reads the CPU affinity of pid.
func affinity(pid int) (unix.CPUSet, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return set, fmt.Errorf("read the CPU affinity of pid %d: %w", pid, os.NewSyscallError("sched_getaffinity", err))
	}
	return set, nil
}

func setAffinity(pid int, set unix.CPUSet) error {
	if err := unix.SchedSetaffinity(pid, &set); err != nil {
		return fmt.Errorf("restore the CPU affinity of pid %d: %w", pid, os.NewSyscallError("sched_setaffinity", err))
	}
	return nil
}

// schedPolicy reads the scheduling policy, priority and nice value of pid.
func schedPolicy(pid int) (unix.SchedAttr, error) {
	a, err := unix.SchedGetAttr(pid, 0)
	if err != nil {
		return unix.SchedAttr{}, fmt.Errorf("read the scheduling policy of pid %d: %w", pid, os.NewSyscallError("sched_getattr", err))
	}
	return *a, nil
}

// setSchedPolicy puts back what schedPolicy read: policy, priority and nice
// only (not utilisation clamps or deadline parameters, which tapfwd never
// changes).
func setSchedPolicy(pid int, old unix.SchedAttr) error {
	a := unix.SchedAttr{
		Size:     unix.SizeofSchedAttr,
		Policy:   old.Policy,
		Flags:    old.Flags & unix.SCHED_FLAG_RESET_ON_FORK,
		Nice:     old.Nice,
		Priority: old.Priority,
	}
	if err := unix.SchedSetAttr(pid, &a, 0); err != nil {
		return fmt.Errorf("restore the scheduling policy of pid %d: %w", pid, os.NewSyscallError("sched_setattr", err))
	}
	return nil
}
