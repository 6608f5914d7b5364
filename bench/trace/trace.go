package trace

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Roles of the threads a trace follows.
const (
	Worker    = "worker"           // a forwarder's thread pinned to one CPU (tapfwd's queue workers)
	Poller    = "busy poller"      // tapfwd's --busy-poll-cpu thread, pinned too (named BusyPollName)
	Forwarder = "forwarder"        // the busiest thread of a forwarder that pins none
	Client    = "iperf3 client"    // in the wire namespace
	Server    = "iperf3 server"    // in the lab namespace
	Kthread   = "TAP NAPI kthread" // napi/TAP-N, when the TAP's NAPI is threaded
)

// BusyPollName is the name (comm) tapfwd gives its --busy-poll-cpu
// thread (internal/daemon's cpuPollerName), which the bench, starting
// tapfwd as a user would, can only read back from /proc.
const BusyPollName = "tapfwd-busypoll"

// Run is the trace of one run. Every part is best effort: what could
// not be read is named in Missing and left out, for a trace is a hint
// about a figure, not a figure.
type Run struct {
	Threads []Thread `json:"threads,omitempty"`
	// NetRX and NetTX are the NET_RX and NET_TX softirqs each CPU ran over
	// the run (/proc/softirqs: the whole machine, every namespace).
	NetRX []int64 `json:"net_rx_softirqs,omitempty"`
	NetTX []int64 `json:"net_tx_softirqs,omitempty"`
	// Sender and Receiver are the counters of TCPCounters that moved in
	// the sending and the receiving namespace over the run, by name.
	Sender   map[string]int64 `json:"sender_counters,omitempty"`
	Receiver map[string]int64 `json:"receiver_counters,omitempty"`
	// TAP is the TAP's state from sysfs in its namespace: tun_flags
	// (IFF_NAPI is 0x10), threaded, gro_flush_timeout,
	// napi_defer_hard_irqs; nil for a path without a TAP.
	TAP map[string]string `json:"tap,omitempty"`
	// Iperf is what iperf3's report says besides the figure.
	Iperf *Iperf `json:"iperf,omitempty"`
	// Load is the machine's 1-minute load average when the run ended
	// (/proc/loadavg): how much else wanted its CPUs.
	Load    float64  `json:"load_average"`
	Missing []string `json:"missing,omitempty"`
}

// Thread is where one thread ran during the run.
type Thread struct {
	Role string `json:"role"`
	TID  int    `json:"tid"`
	// Allowed is its CPU affinity (Cpus_allowed_list) when first seen.
	Allowed string `json:"cpus_allowed"`
	// OnCPU is, per CPU, the share of the samples (every SampleEvery)
	// that found it last run there.
	OnCPU []float64 `json:"on_cpu"`
	// RunSeconds is the CPU time it used, WaitSeconds the time it was
	// runnable and waited for a CPU (schedstat), from when it was first
	// seen; Switches and Preempted its voluntary and involuntary context
	// switches.
	RunSeconds  float64 `json:"run_seconds"`
	WaitSeconds float64 `json:"wait_seconds"`
	Switches    int64   `json:"voluntary_switches"`
	Preempted   int64   `json:"involuntary_switches"`
}

// MainCPU is the CPU t was found on most; -1 when never sampled.
func (t Thread) MainCPU() int {
	best := -1
	for c, s := range t.OnCPU {
		if s > 0 && (best < 0 || s > t.OnCPU[best]) {
			best = c
		}
	}
	return best
}

// SampleEvery is how often a Tracer looks where its threads are.
const SampleEvery = 20 * time.Millisecond

// Targets are what a Tracer watches.
type Targets struct {
	// Bed is the run's bed: the iperf3 client runs in its WireNS, the
	// server in its LabNS. Without one only the forwarders' threads and
	// the softirqs are traced.
	Bed *testbed.Bed
	// Forwarders are the forwarding processes' pids.
	Forwarders []int
	// TAP, when set, is the TAP's name in the bed's LabNS, whose state and
	// NAPI kthreads to read.
	TAP string
	// Sender and Receiver are the namespaces that send and receive the
	// run's data, whose TCP counters to read.
	Sender, Receiver string
	// Own are threads of this process to follow too, by thread id, with
	// their roles: the load a bench generates itself (rr's threads).
	Own map[int]string
}

// Tracer traces one run, from Start to Stop.
type Tracer struct {
	t         Targets
	cpus      int
	soft0     softirqs
	snd0, rc0 map[string]int64
	tap       map[string]string
	missing   []string

	mu      sync.Mutex
	threads []*watched
	stop    chan struct{}
	done    chan struct{}
}

// Start begins tracing: it reads the counters, finds the forwarders'
// threads and the TAP's kthreads, and samples where they and the iperf3
// processes (found as they start) run until Stop.
func Start(ctx context.Context, t Targets) *Tracer {
	tr := &Tracer{t: t, cpus: runtime.NumCPU(), stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	if tr.soft0, err = readSoftirqs(); err != nil {
		tr.miss("softirqs", err)
	}
	tr.snd0 = tr.counters(t.Sender)
	tr.rc0 = tr.counters(t.Receiver)
	if t.TAP != "" && t.Bed != nil {
		tr.tap = tr.tapState(ctx)
	}
	tr.watchForwarders()
	for tid, role := range t.Own {
		if w := newWatched(role, os.Getpid(), tid, tr.cpus); w != nil {
			tr.threads = append(tr.threads, w)
		}
	}
	if t.TAP != "" {
		tr.watchKthreads()
	}
	go tr.sample()
	return tr
}

// Stop ends the trace and returns it, with what iperf3's JSON report
// (raw; nil for a failed run) adds.
func (tr *Tracer) Stop(raw []byte) Run {
	close(tr.stop)
	<-tr.done
	r := Run{TAP: tr.tap}
	if s, err := readSoftirqs(); err == nil && tr.soft0.rx != nil {
		r.NetRX, r.NetTX = sub(s.rx, tr.soft0.rx), sub(s.tx, tr.soft0.tx)
	}
	r.Sender = delta(tr.snd0, tr.counters(tr.t.Sender))
	r.Receiver = delta(tr.rc0, tr.counters(tr.t.Receiver))
	r.Threads = tr.result()
	var err error
	if r.Load, err = loadAverage(); err != nil {
		tr.miss("load average", err)
	}
	if raw != nil {
		if r.Iperf, err = ParseIperf(raw); err != nil {
			tr.miss("iperf3 report", err)
		}
	}
	r.Missing = tr.missing
	return r
}

func (tr *Tracer) miss(what string, err error) {
	tr.missing = append(tr.missing, fmt.Sprintf("%s: %v", what, err))
}

// counters reads TCPCounters in namespace ns; nil when ns is empty or
// they cannot be read.
func (tr *Tracer) counters(ns string) map[string]int64 {
	if ns == "" || tr.t.Bed == nil {
		return nil
	}
	var c map[string]int64
	err := tr.t.Bed.Do(ns, func() (err error) {
		c, err = readTCPCounters()
		return err
	})
	if err != nil {
		tr.miss("TCP counters in "+ns, err)
		return nil
	}
	return c
}

// tapState reads the TAP's sysfs attributes in the lab namespace (where
// ip netns exec mounts its own sysfs).
func (tr *Tracer) tapState(ctx context.Context) map[string]string {
	files := make([]string, len(TAPFiles))
	for i, f := range TAPFiles {
		files[i] = "/sys/class/net/" + tr.t.TAP + "/" + f
	}
	// grep -H exits 2 when a file is missing; what it printed still counts.
	out, err := tr.t.Bed.Run(ctx, tr.t.Bed.LabNS, "grep", append([]string{"-H", "."}, files...)...)
	st := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		if path, v, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(path, "/sys/") {
			st[path[strings.LastIndexByte(path, '/')+1:]] = strings.TrimSpace(v)
		}
	}
	if len(st) < len(TAPFiles) {
		tr.miss("TAP state", fmt.Errorf("read %d of %d attributes (%v)", len(st), len(TAPFiles), err))
	}
	return st
}

// TAPFiles are the sysfs attributes of the TAP a trace records.
var TAPFiles = []string{"tun_flags", "threaded", "gro_flush_timeout", "napi_defer_hard_irqs"}

func delta(a, b map[string]int64) map[string]int64 {
	if a == nil || b == nil {
		return nil
	}
	d := map[string]int64{}
	for k, v := range b {
		if u, ok := a[k]; ok && v != u {
			d[k] = v - u
		}
	}
	return d
}

func sub(a, b []int64) []int64 {
	out := make([]int64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] - b[i]
	}
	return out
}
