package profile

import (
	"github.com/tapfwd/tapfwd/bench/cpuprofile"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/trace"
)

// Schema names the JSON layout of Report.
const Schema = "tapfwd-bench-profile/1"

// Report is the outcome of Run; its JSON form is --json.
type Report struct {
	report.Header
	// WindowSeconds is each profile's window, WarmupSeconds the load
	// before it.
	WindowSeconds float64 `json:"window_seconds"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	// Perf says how the kernel side was sampled, or why it was not.
	Perf      string          `json:"perf"`
	Configs   []report.Config `json:"configs"`
	Skipped   []report.Config `json:"skipped,omitempty"`
	Workloads []Workload      `json:"workloads"`
	// Results are one per workload and configuration, in the order run.
	Results []Result `json:"results"`
}

// Result is one profile: a configuration on a workload.
type Result struct {
	Config   string `json:"config"`
	Workload string `json:"workload"`
	// Err is why it gave nothing, or less than it should.
	Err string `json:"error,omitempty"`
	// Figure is iperf3's over its whole run (warm-up and the profilers'
	// cost included), in Unit: context, not a measurement.
	Figure float64 `json:"figure"`
	Unit   string  `json:"unit"`
	// RTT is a request/response workload's round trips; Figure is their
	// median.
	RTT *RTT `json:"rtt,omitempty"`
	// WindowSeconds is the window as it ran.
	WindowSeconds float64 `json:"window_seconds"`
	// CPUs and Threads are the machine over the window: each CPU's split
	// and the threads of tapfwd and the kernel's softirq and NAPI
	// kthreads that ran, busiest first.
	CPUs    []CPUTime    `json:"cpus,omitempty"`
	Threads []ThreadTime `json:"threads,omitempty"`
	// Trace is where the busy threads ran, softirqs per CPU, the TCP
	// counters and the TAP's state over the window.
	Trace *trace.Run `json:"trace,omitempty"`
	// Go is tapfwd's CPU profile; nil for a baseline.
	Go *GoView `json:"go,omitempty"`
	// Batches are tapfwd's counters over the window, per direction.
	Batches []Batches `json:"batches,omitempty"`
	// Kernel is perf's view of every CPU; nil without perf.
	Kernel *cpuprofile.KernelView `json:"kernel,omitempty"`
	// Notes are the parts that could not be had.
	Notes []string `json:"notes,omitempty"`
}

// GoView is tapfwd's Go CPU profile over a window.
type GoView struct {
	// CPUSeconds is the CPU time the profile sampled: tapfwd's, system
	// calls included.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Shares are GoShares; Top the functions with the most flat time;
	// Syscalls the tapfwd functions that made the system calls, by the
	// time in them.
	Shares   []cpuprofile.Share    `json:"shares"`
	Top      []cpuprofile.FuncTime `json:"top"`
	Syscalls []cpuprofile.FuncTime `json:"syscall_sites"`
	// File is the raw profile's name in the output directory.
	File string `json:"file,omitempty"`
}

// Read reads a report saved as JSON.
func Read(path string) (*Report, error) { return report.ReadJSON[Report](path, Schema) }

// Result returns the result of config on workload, or nil.
func (r *Report) Result(config, workload string) *Result {
	return report.Find(r.Results, func(x *Result) bool { return x.Config == config && x.Workload == workload })
}

// share is the percent of the share named name; 0 when v has none (a
// report saved before that share existed).
func (v *GoView) share(name string) float64 {
	for _, s := range v.Shares {
		if s.Name == name {
			return s.Percent
		}
	}
	return 0
}
