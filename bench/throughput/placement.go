package throughput

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
)

// Placement is where a workload's iperf3 processes run. tapfwd places
// its worker itself: queue 0 on the first CPU it may use (FirstCPUs).
// On a machine with few CPUs the sender, the receiver and tapfwd's
// worker compete, and where they run decides the figure as much as the
// path does, so every workload says which placement it was measured
// under.
type Placement struct {
	// Name is Pinned or Scheduler.
	Name string `json:"name"`
	// Iperf is where the client (wire namespace) and the server (lab
	// namespace) are pinned; nil for Scheduler.
	Iperf *iperf.Pinning `json:"iperf_cpus,omitempty"`
}

// Placement names.
const (
	// Pinned pins the iperf3 client beside tapfwd's worker and the server
	// on the next CPU: the narrowest intervals in the pilot runs, the
	// placement of a VM host (the forwarding thread on one core, the
	// receiving guest on another), but with several streams the client's
	// flows starve the worker of its CPU.
	Pinned = "pinned"
	// Scheduler leaves iperf3 to the scheduler (tapfwd's worker stays on
	// its CPU): what a user running iperf3 by hand gets.
	Scheduler = "scheduler"
)

// Placement modes: which placement each workload runs under (Place).
const (
	// PlaceAuto is Pinned for one stream and Scheduler for several: the
	// one-stream figures where their intervals are narrowest, the
	// several-stream ones where tapfwd's worker keeps its CPU.
	PlaceAuto      = "auto"
	PlacePinned    = Pinned
	PlaceScheduler = Scheduler
	// PlaceBoth runs every workload under both, as two workloads.
	PlaceBoth = "both"
)

// PlaceModes are the modes Place takes, in the order help lists them.
var PlaceModes = []string{PlaceAuto, PlacePinned, PlaceScheduler, PlaceBoth}

// Place gives every workload its placement under mode, with pin as the
// CPUs of Pinned; nil pin (one CPU: nothing to place) leaves every
// workload to the scheduler. Under PlaceBoth each workload comes twice,
// its name followed by "@pinned" and "@scheduler".
func Place(ws []Workload, mode string, pin *iperf.Pinning) ([]Workload, error) {
	pinned := &Placement{Name: Pinned, Iperf: pin}
	sched := &Placement{Name: Scheduler}
	if pin == nil {
		pinned = sched
	}
	var out []Workload
	for _, w := range ws {
		switch mode {
		case PlaceAuto:
			w.Placement = pinned
			if w.Streams > 1 {
				w.Placement = sched
			}
		case PlacePinned:
			w.Placement = pinned
		case PlaceScheduler:
			w.Placement = sched
		case PlaceBoth:
			a, b := w, w
			a.Name, a.Placement = w.Name+"@"+Pinned, pinned
			b.Name, b.Placement = w.Name+"@"+Scheduler, sched
			out = append(out, a, b)
			continue
		default:
			return nil, fmt.Errorf("unknown placement %q (known: auto, pinned, scheduler, both)", mode)
		}
		out = append(out, w)
	}
	return out, nil
}

// Describe says where p puts iperf3 and where tapfwd's worker starts
// (tapfwd as it ships moves it to follow its load: --follow-load).
func (p *Placement) Describe(workerCPU int) string {
	if p == nil || p.Iperf == nil {
		return fmt.Sprintf("iperf3 placed by the scheduler, tapfwd's worker starting on CPU %d", workerCPU)
	}
	s := fmt.Sprintf("iperf3 client on CPU %d", p.Iperf.Wire)
	if p.Iperf.Wire == workerCPU {
		s += " where tapfwd's worker starts"
	}
	s += fmt.Sprintf(", server on CPU %d", p.Iperf.Lab)
	if p.Iperf.Lab == workerCPU {
		s += " where tapfwd's worker starts"
	}
	return s
}

// FirstCPUs are the first n CPUs this process may run on (fewer when it
// may run on fewer): tapfwd pins its first worker to the first.
func FirstCPUs(n int) []int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	var cpus []int
	for c := 0; c < cpulist.Max && len(cpus) < n; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// DefaultPin is Pinned's CPUs: the client on the first CPU this process
// may use, beside tapfwd's worker, the server on the second; nil with
// fewer than two.
func DefaultPin() *iperf.Pinning {
	c := FirstCPUs(2)
	if len(c) < 2 {
		return nil
	}
	return &iperf.Pinning{Wire: c[0], Lab: c[1]}
}
