package procfs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture (include/asm-generic/param.h).
const userHZ = 100

// Stat is what the bench and the tests use of /proc/PID/stat (proc(5)).
type Stat struct {
	Comm  string
	State string
	PPid  int
	// UTime and STime are the CPU time spent in user and kernel mode.
	UTime, STime time.Duration
	// StartTime is when the process started after boot, in clock ticks:
	// with Comm it names a process across pid reuse.
	StartTime uint64
	// Flags are the task's PF_* flags (include/linux/sched.h).
	Flags uint64
}

// pfIOWorker is PF_IO_WORKER (include/linux/sched.h).
const pfIOWorker = 0x10

// IOWorker reports whether the task is an io_uring worker thread (io-wq's
// iou-wrk-N, or an SQPOLL thread). The flag is set when the thread is
// made; its name comes later, once it runs.
func (s Stat) IOWorker() bool { return s.Flags&pfIOWorker != 0 }

// CPU is the user plus system CPU time.
func (s Stat) CPU() time.Duration { return s.UTime + s.STime }

// ParseStat parses the text of /proc/PID/stat. The command sits in
// parentheses and may itself hold spaces and parentheses, so the fields
// are counted from the last ')'.
func ParseStat(text string) (Stat, error) {
	lp, rp := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
	if lp < 0 || rp < lp {
		return Stat{}, errors.New("/proc/PID/stat: no command in parentheses")
	}
	f := strings.Fields(text[rp+1:])
	// f[0] is field 3 (state); starttime is field 22, f[19].
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("/proc/PID/stat: %d fields after the command, want at least 20", len(f))
	}
	s := Stat{Comm: text[lp+1 : rp], State: f[0]}
	var err error
	if s.PPid, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("/proc/PID/stat: ppid: %w", err)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	var err3 error
	s.Flags, err3 = strconv.ParseUint(f[6], 10, 64) // field 9
	s.StartTime, err = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3, err); err != nil {
		return Stat{}, fmt.Errorf("/proc/PID/stat: %w", err)
	}
	s.UTime = time.Duration(ut) * time.Second / userHZ
	s.STime = time.Duration(st) * time.Second / userHZ
	return s, nil
}

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(string(b))
}

// Tasks are the thread ids of process pid (/proc/PID/task); none when
// it is gone.
func Tasks(pid int) []int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// IOWorkers returns the calling process's io_uring worker threads, from
// /proc/self/task/TID/stat.
func IOWorkers() ([]Stat, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("list the threads: %w", err)
	}
	var out []Stat
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/stat")
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended
		}
		if err != nil {
			return nil, fmt.Errorf("thread %s: %w", t.Name(), err)
		}
		s, err := ParseStat(string(b))
		if err != nil {
			return nil, fmt.Errorf("thread %s: %w", t.Name(), err)
		}
		if s.IOWorker() {
			out = append(out, s)
		}
	}
	return out, nil
}

// ParseStatus parses the "Name:\tvalue" lines of /proc/PID/status.
func ParseStatus(text string) map[string]string {
	out := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// StatusNumber returns the number that starts the value of field in the
// text of /proc/PID/status: VmRSS (in kB), Threads.
func StatusNumber(text, field string) (int64, error) {
	v, ok := ParseStatus(text)[field]
	if !ok {
		return 0, fmt.Errorf("/proc/PID/status: no %s", field)
	}
	n, _, _ := strings.Cut(v, " ")
	i, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/PID/status: %s %q: %w", field, v, err)
	}
	return i, nil
}

// ParseSchedStat parses the text of /proc/PID/schedstat (or of a thread's,
// /proc/PID/task/TID/schedstat): the time the task spent on a CPU and the
// time it spent runnable, waiting for one
// (Documentation/scheduler/sched-stats.rst).
func ParseSchedStat(text string) (run, wait time.Duration, err error) {
	f := strings.Fields(text)
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("/proc/PID/schedstat: %d fields, want 3", len(f))
	}
	r, err1 := strconv.ParseInt(f[0], 10, 64)
	w, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("/proc/PID/schedstat: %w", err)
	}
	return time.Duration(r), time.Duration(w), nil
}

// CPUModel is the first "model name" of /proc/cpuinfo; empty when there is
// none (some architectures do not give one).
func CPUModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
