package trace

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/napi"
)

// watched is a thread a Tracer samples.
type watched struct {
	role        string
	pid, tid    int
	name        string // comm, when first seen
	allowed     string
	pinned      bool // allowed on one CPU only
	onCPU       []int
	samples     int
	run0, wait0 time.Duration
	sw0, pre0   int64
	run, wait   time.Duration // at the last look
	sw, pre     int64
	gone        bool
}

// taskDir is /proc/PID/task/TID.
func taskDir(pid, tid int) string { return fmt.Sprintf("/proc/%d/task/%d", pid, tid) }

// look reads the thread's schedstat and, with status, its switch counts
// (and its affinity when first seen) into its last look. A thread that
// exited keeps its last look.
func (w *watched) look(status bool) error {
	dir := taskDir(w.pid, w.tid)
	b, err := os.ReadFile(dir + "/schedstat")
	if err != nil {
		return err
	}
	if w.run, w.wait, err = procfs.ParseSchedStat(string(b)); err != nil {
		return err
	}
	if !status {
		return nil
	}
	st, err := os.ReadFile(dir + "/status")
	if err != nil {
		return err
	}
	w.sw, _ = procfs.StatusNumber(string(st), "voluntary_ctxt_switches")
	w.pre, _ = procfs.StatusNumber(string(st), "nonvoluntary_ctxt_switches")
	if w.allowed == "" {
		f := procfs.ParseStatus(string(st))
		w.name, w.allowed = f["Name"], f["Cpus_allowed_list"]
		w.pinned = w.allowed != "" && !strings.ContainsAny(w.allowed, ",-")
	}
	return nil
}

// newWatched starts watching thread tid of pid in role; nil when it
// cannot be read (it exited).
func newWatched(role string, pid, tid, cpus int) *watched {
	w := &watched{role: role, pid: pid, tid: tid, onCPU: make([]int, cpus)}
	if w.look(true) != nil {
		return nil
	}
	w.run0, w.wait0, w.sw0, w.pre0 = w.run, w.wait, w.sw, w.pre
	return w
}

// where samples the CPU the thread last ran on (/proc/.../stat field 39).
func (w *watched) where() {
	b, err := os.ReadFile(taskDir(w.pid, w.tid) + "/stat")
	if err != nil {
		w.gone = true
		return
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// f[0] is field 3; processor is field 39.
	if len(f) < 37 {
		return
	}
	if c, err := strconv.Atoi(f[36]); err == nil && c >= 0 && c < len(w.onCPU) {
		w.onCPU[c]++
		w.samples++
	}
}

func (w *watched) thread() Thread {
	t := Thread{Role: w.role, TID: w.tid, Allowed: w.allowed, OnCPU: make([]float64, len(w.onCPU)),
		RunSeconds: (w.run - w.run0).Seconds(), WaitSeconds: (w.wait - w.wait0).Seconds(),
		Switches: w.sw - w.sw0, Preempted: w.pre - w.pre0}
	for c, n := range w.onCPU {
		if w.samples > 0 {
			t.OnCPU[c] = float64(n) / float64(w.samples)
		}
	}
	return t
}

// watchForwarders watches every thread of the forwarders: the pinned
// ones are the workers, or tapfwd's busy poller; of a forwarder that pins
// none, Stop keeps the busiest.
func (tr *Tracer) watchForwarders() {
	for _, pid := range tr.t.Forwarders {
		for _, tid := range procfs.Tasks(pid) {
			if w := newWatched(Forwarder, pid, tid, tr.cpus); w != nil {
				switch {
				case w.pinned && w.name == BusyPollName:
					w.role = Poller
				case w.pinned:
					w.role = Worker
				}
				tr.threads = append(tr.threads, w)
			}
		}
	}
}

// watchKthreads watches the TAP's NAPI kthreads, when it has any.
func (tr *Tracer) watchKthreads() {
	pids, err := napi.Kthreads(tr.t.TAP)
	if err != nil {
		tr.miss("TAP NAPI kthreads", err)
	}
	for _, pid := range pids {
		if w := newWatched(Kthread, pid, pid, tr.cpus); w != nil {
			tr.threads = append(tr.threads, w)
		}
	}
}

// sample looks where every thread is and what it ran every SampleEvery
// (its switch counts every fifth time), and every fifth time, until it
// has both, for the iperf3 client and server, until Stop. iperf3 exits
// before Stop: its figures are those of the last look.
func (tr *Tracer) sample() {
	defer close(tr.done)
	tick := time.NewTicker(SampleEvery)
	defer tick.Stop()
	ns := map[string]uint64{}
	if b := tr.t.Bed; b != nil {
		for _, n := range []string{b.WireNS, b.LabNS} {
			if ino, err := nsInode(n); err == nil {
				ns[n] = ino
			}
		}
	}
	seen := map[int]bool{}
	found := map[string]bool{}
	for i := 0; ; i++ {
		if i%5 == 0 && len(ns) > 0 && len(found) < 2 {
			tr.findIperf(ns, seen, found)
		}
		tr.mu.Lock()
		for _, w := range tr.threads {
			if !w.gone {
				w.where()
				w.look(i%5 == 0)
			}
		}
		tr.mu.Unlock()
		select {
		case <-tr.stop:
			return
		case <-tick.C:
		}
	}
}

// findIperf watches the threads of the iperf3 processes in the bed's
// namespaces (by inode, in ns) not seen yet, counting what it has found
// by role. They started during the trace, so all they ran counts.
func (tr *Tracer) findIperf(ns map[string]uint64, seen map[int]bool, found map[string]bool) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || seen[pid] {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "iperf3" {
			continue
		}
		ino, err := procNS(pid)
		if err != nil {
			continue
		}
		role := ""
		switch ino {
		case ns[tr.t.Bed.WireNS]:
			role = Client
		case ns[tr.t.Bed.LabNS]:
			role = Server
		default:
			continue
		}
		seen[pid], found[role] = true, true
		for _, tid := range procfs.Tasks(pid) {
			if w := newWatched(role, pid, tid, tr.cpus); w != nil {
				w.run0, w.wait0, w.sw0, w.pre0 = 0, 0, 0, 0
				tr.mu.Lock()
				tr.threads = append(tr.threads, w)
				tr.mu.Unlock()
			}
		}
	}
}

// nsInode is the inode of the network namespace named name
// (/run/netns/NAME, the bind mount ip netns makes).
func nsInode(name string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+name, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// procNS is the inode of process pid's network namespace.
func procNS(pid int) (uint64, error) {
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return 0, err
	}
	// "net:[4026531840]"
	l = strings.TrimSuffix(strings.TrimPrefix(l, "net:["), "]")
	return strconv.ParseUint(l, 10, 64)
}

// result takes a last look at every thread and returns what Run keeps:
// the workers (or each forwarder's busiest thread), the iperf3 threads
// and the kthreads, in that order.
func (tr *Tracer) result() []Thread {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	busiest := map[int]*watched{} // per forwarder pid, when it pins none
	pinned := map[int]bool{}
	var keep []*watched
	for _, w := range tr.threads {
		if !w.gone {
			w.look(true)
		}
		switch {
		case w.role == Worker:
			pinned[w.pid] = true
			keep = append(keep, w)
		case w.role == Forwarder:
			if b := busiest[w.pid]; b == nil || w.run-w.run0 > b.run-b.run0 {
				busiest[w.pid] = w
			}
		default:
			keep = append(keep, w)
		}
	}
	for pid, w := range busiest {
		if !pinned[pid] {
			keep = append(keep, w)
		}
	}
	order := []string{Worker, Poller, Forwarder, Client, Server, Kthread}
	rank := func(role string) int {
		if i := slices.Index(order, role); i >= 0 {
			return i
		}
		return len(order) // Targets.Own's roles, last
	}
	slices.SortStableFunc(keep, func(a, b *watched) int { return rank(a.role) - rank(b.role) })
	out := make([]Thread, len(keep))
	for i, w := range keep {
		out[i] = w.thread()
	}
	return out
}
