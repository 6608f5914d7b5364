package cpuprofile

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// The kernel-side paths of a perf profile (KernelPaths): each sample
// goes to the first path, in this order, whose functions are on its call
// chain, so a path holds everything that runs under it (a TAP write, the
// lab's receive path it runs; a softirq that interrupts it).
const (
	KTAPWrite   = "TAP write: tun_get_user and below (the lab's receive path)"
	KTAPRead    = "TAP read: tun_do_read"
	KPacketSend = "packet socket send: packet_snd and below (veth, the wire's receive)"
	KPacketRecv = "packet socket recvmsg: the copy to tapfwd"
	KPacketRcv  = "packet socket enqueue: packet_rcv (in the NIC's receive)"
	KBridge     = "bridge forwarding: br_handle_frame and below"
	KSend       = "iperf3 send: tcp/udp_sendmsg and below"
	KRecv       = "iperf3 receive: tcp/udp_recvmsg (the copy to iperf3)"
	KSoftirq    = "other network softirq work (NAPI polls, veth, GRO)"
	KURing      = "io_uring's own work"
	KPoll       = "waiting: ppoll, epoll"
	KSched      = "scheduler: switches, wake-ups"
	KEntry      = "system call entry and exit, other system calls"
	KIdle       = "idle"
	KOther      = "other kernel work"
	KUser       = "user space"
)

// kernelPaths are the paths and the kernel functions that mark them.
var kernelPaths = []struct {
	name  string
	funcs []string
}{
	{KTAPWrite, []string{"tun_get_user", "tun_chr_write_iter"}},
	{KTAPRead, []string{"tun_do_read", "tun_chr_read_iter", "tun_ring_recv"}},
	{KPacketSend, []string{"packet_sendmsg", "packet_snd", "tpacket_snd"}},
	{KPacketRecv, []string{"packet_recvmsg"}},
	{KPacketRcv, []string{"packet_rcv", "tpacket_rcv"}},
	{KBridge, []string{"br_handle_frame", "br_handle_frame_finish", "br_forward"}},
	{KSend, []string{"tcp_sendmsg", "tcp_sendmsg_locked", "udp_sendmsg"}},
	{KRecv, []string{"tcp_recvmsg", "tcp_recvmsg_locked", "udp_recvmsg"}},
	{KSoftirq, []string{"net_rx_action", "net_tx_action", "__napi_poll", "napi_threaded_poll", "process_backlog"}},
	{KURing, []string{"__do_sys_io_uring_enter", "io_submit_sqes", "io_cqring_wait"}},
	{KPoll, []string{"do_sys_poll", "do_poll", "ep_poll", "do_epoll_wait"}},
	{KSched, []string{"__schedule", "schedule", "try_to_wake_up", "schedule_idle"}},
	{KEntry, []string{"do_syscall_64", "entry_SYSCALL_64", "entry_SYSCALL_64_after_hwframe", "syscall_exit_to_user_mode"}},
	{KIdle, []string{"do_idle", "cpu_startup_entry", "default_idle", "default_idle_call", "cpuidle_idle_call"}},
}

// KernelPathNames are the paths KernelPaths gives, in its order.
var KernelPathNames = func() []string {
	var n []string
	for _, p := range kernelPaths {
		n = append(n, p.name)
	}
	return append(n, KOther, KUser)
}()

// KernelPaths groups perf samples by path, every path of
// KernelPathNames in that order, in percent of the samples given.
func KernelPaths(samples []PerfSample) []Share {
	return shares(perfProfile(samples), KernelPathNames, kernelPath)
}

// KernelView is perf's samples of every CPU over a window
// (KernelSummary): Tasks over all Samples; Paths and Top over the
// OwnSamples of the run's own tasks, which used OwnCores CPUs.
type KernelView struct {
	Samples    int         `json:"samples"`
	OwnSamples int         `json:"own_samples"`
	OwnCores   float64     `json:"own_cores"`
	Paths      []Share     `json:"paths"`
	Tasks      []TaskShare `json:"tasks"`
	Top        []FuncTime  `json:"top_kernel"`
	File       string      `json:"file,omitempty"`
}

// KernelSummary is what a window's perf samples (of every CPU, over
// seconds) say: by task over all of them; by path and by kernel
// function (the top n) over the run's own tasks alone (the threads of
// own, its tapfwd and its load, each with its task group; ksoftirqd,
// the NAPI kthreads, idle), so that other work on a shared machine,
// another tapfwd or iperf3 included, does not dilute them.
func KernelSummary(samples []PerfSample, own map[int]string, seconds float64, n int) *KernelView {
	tasks := make([]string, len(samples))
	var mine []PerfSample
	for i, s := range samples {
		tasks[i] = taskOf(s, own)
		if tasks[i] != TaskOther && tasks[i] != TaskPerf {
			mine = append(mine, s)
		}
	}
	v := &KernelView{Samples: len(samples), OwnSamples: len(mine), Paths: KernelPaths(mine), Tasks: taskShares(tasks, samples), Top: TopKernel(mine, n)}
	if seconds > 0 {
		v.OwnCores = float64(len(mine)) / perfHz / seconds
	}
	return v
}

// perfProfile is perf's samples as a CPUProfile of kernel stacks (a
// sample with none is user space), one tick each.
func perfProfile(samples []PerfSample) *CPUProfile {
	p := &CPUProfile{Samples: make([]Sample, len(samples))}
	for i, s := range samples {
		p.Samples[i] = Sample{Stack: s.Kernel, Nanos: int64(time.Second) / perfHz}
	}
	return p
}

func kernelPath(stack []string) string {
	if len(stack) == 0 {
		return KUser
	}
	for _, p := range kernelPaths {
		if slices.ContainsFunc(stack, func(f string) bool { return slices.Contains(p.funcs, f) }) {
			return p.name
		}
	}
	return KOther
}

// Task groups of a perf profile (Tasks).
const (
	TaskTapfwd   = "tapfwd"
	TaskIperf    = "the load (iperf3, or rr's threads)"
	TaskSoftirqd = "ksoftirqd"
	TaskNAPI     = "NAPI kthreads (napi/...)"
	TaskIdle     = "idle (swapper)"
	TaskPerf     = "perf itself"
	TaskOther    = "other processes (other work on the machine; another tapfwd or iperf3 too)"
)

// TaskNames are the groups Tasks gives, in its order.
var TaskNames = []string{TaskTapfwd, TaskIperf, TaskSoftirqd, TaskNAPI, TaskIdle, TaskPerf, TaskOther}

// TaskShare is the share of a group of tasks in a perf profile, in
// percent of all samples: in the kernel and in user space.
type TaskShare struct {
	Name    string  `json:"name"`
	Kernel  float64 `json:"kernel_percent"`
	User    float64 `json:"user_percent"`
	Samples int     `json:"samples"`
}

// taskShares counts samples by their task group (tasks[i] of sample
// i), in the kernel and in user space.
func taskShares(tasks []string, samples []PerfSample) []TaskShare {
	by := map[string]*TaskShare{}
	for _, n := range TaskNames {
		by[n] = &TaskShare{Name: n}
	}
	for i, s := range samples {
		t := by[tasks[i]]
		t.Samples++
		if len(s.Kernel) > 0 {
			t.Kernel++
		} else {
			t.User++
		}
	}
	out := make([]TaskShare, len(TaskNames))
	for i, n := range TaskNames {
		t := *by[n]
		t.Kernel, t.User = Percent(t.Kernel, float64(len(samples))), Percent(t.User, float64(len(samples)))
		out[i] = t
	}
	return out
}

// taskOf is the group of the task a sample interrupted: tapfwd and the
// load (iperf3, rr's threads) only for the run's own threads, by the
// group own gives them (not by name: tapfwd names its busy-poll thread
// tapfwd-busypoll, and rr's threads are tapfwd-bench's).
func taskOf(s PerfSample, own map[int]string) string {
	if g, ok := own[s.TID]; ok {
		return g
	}
	comm := s.Comm
	switch {
	case strings.HasPrefix(comm, "ksoftirqd/"):
		return TaskSoftirqd
	case strings.HasPrefix(comm, "napi/"):
		return TaskNAPI
	case strings.HasPrefix(comm, "swapper"):
		return TaskIdle
	case comm == "perf" || strings.HasPrefix(comm, "perf-"):
		return TaskPerf
	}
	return TaskOther
}

// TopKernel is the n kernel functions most samples were in (the leaf of
// the kernel chain), most first, in percent of the samples given.
func TopKernel(samples []PerfSample, n int) []FuncTime {
	count := map[string]int{}
	for _, s := range samples {
		if len(s.Kernel) > 0 {
			count[s.Kernel[0]]++
		}
	}
	var out []FuncTime
	for f, c := range count {
		out = append(out, FuncTime{Name: f, Flat: float64(c) / perfHz, FlatPct: Percent(float64(c), float64(len(samples)))})
	}
	slices.SortFunc(out, func(a, b FuncTime) int { return cmp.Or(cmp.Compare(b.Flat, a.Flat), cmp.Compare(a.Name, b.Name)) })
	return out[:min(n, len(out))]
}
