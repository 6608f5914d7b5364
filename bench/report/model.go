package report

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/stats"
)

// Header opens every report: its layout, when it ran and where.
type Header struct {
	// Schema names the JSON layout; it changes when a field changes
	// meaning or goes away.
	Schema   string    `json:"schema"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Host     Host      `json:"host"`
}

// Host describes the machine the figures come from.
type Host struct {
	Kernel      string   `json:"kernel"`
	Machine     string   `json:"machine"`
	CPUs        int      `json:"cpus"`
	CPUModel    string   `json:"cpu_model,omitempty"`
	Go          string   `json:"go"`
	Iperf3      string   `json:"iperf3,omitempty"`
	TUNFeatures []string `json:"tun_features"`
}

// Method are the statistical parameters every bench shares.
type Method struct {
	Reps int `json:"reps"`
	Intervals
	Quick bool `json:"quick,omitempty"`
}

// NewMethod is the Method of reps repetitions with bs's intervals.
func NewMethod(reps int, bs stats.Bootstrap) Method {
	return Method{Reps: reps, Intervals: NewIntervals(bs)}
}

// Intervals say how a report's percentile-bootstrap intervals were
// drawn: the generator's seed, the resamples per interval, the level.
type Intervals struct {
	Seed      uint64  `json:"bootstrap_seed"`
	Resamples int     `json:"bootstrap_resamples"`
	Level     float64 `json:"confidence_level"`
}

// NewIntervals are the Intervals of bs.
func NewIntervals(bs stats.Bootstrap) Intervals {
	return Intervals{Seed: bs.Seed, Resamples: bs.Count(), Level: stats.Level}
}

// Kinds of configuration: what connects the wire and lab namespaces.
const (
	KindTapfwd = "tapfwd" // `tapfwd run` with Config.Args
	KindNaive  = "naive"  // `tapfwd-bench naive-forwarder` (package naive)
	KindBridge = "bridge" // the Linux bridge, the in-kernel reference
	KindDirect = "direct" // one veth pair, the ceiling
	// KindOVS is Open vSwitch's userspace datapath between the NIC and a
	// TAP in the lab (internal/lab/ovs): the userspace peer a user would
	// otherwise pick.
	KindOVS = "ovs"
)

// Userspace says whether a configuration of kind forwards in userspace
// (tapfwd, the naive forwarder, Open vSwitch's netdev datapath), where
// the bridge and the direct veth forward in the kernel.
func Userspace(kind string) bool {
	return kind == KindTapfwd || kind == KindNaive || kind == KindOVS
}

// Peer says whether a configuration of kind is a userspace peer tapfwd is
// compared with: the naive forwarder, Open vSwitch.
func Peer(kind string) bool { return kind == KindNaive || kind == KindOVS }

// The baselines' configuration names.
const (
	Bridge = "bridge"
	Direct = "direct"
	OVS    = "ovs"
)

// Config is one configuration of the path between the wire and the lab: a
// row (or column) of a report.
type Config struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Description string   `json:"description"`
	Args        []string `json:"args,omitempty"` // `tapfwd run` flags (KindTapfwd): Run.Args()
	// Setup are commands run in the fwd namespace after the bed is built
	// and before the forwarder starts; NICToken in an argument stands for
	// the NIC's name.
	Setup [][]string `json:"setup,omitempty"`
	// Skipped says why the configuration did not run; empty when it ran.
	Skipped string `json:"skipped,omitempty"`
	// Run are the `tapfwd run` settings (KindTapfwd); a report read back
	// from JSON has only Args.
	Run forwarder.Options `json:"-"`
	// Binary, when set, is the tapfwd binary this configuration runs in
	// place of the bench's (KindTapfwd): a build from before a change, so
	// that before and after run interleaved in one run.
	Binary string `json:"binary,omitempty"`
}

// NICToken in a Config.Setup argument is replaced by the bed's NIC name.
const NICToken = "{nic}"

// Tapfwd is a KindTapfwd configuration running tapfwd with run.
func Tapfwd(name, description string, run forwarder.Options) Config {
	return Config{Name: name, Kind: KindTapfwd, Description: description, Args: run.Args(), Run: run}
}

// SelectConfigs returns the configurations of all named in names, in all's
// order; an unknown name is an error.
func SelectConfigs(all []Config, names []string) ([]Config, error) {
	known := map[string]bool{}
	var list []string
	for _, c := range all {
		known[c.Name] = true
		list = append(list, c.Name)
	}
	want := map[string]bool{}
	for _, n := range names {
		if !known[n] {
			return nil, fmt.Errorf("unknown configuration %q (known: %s)", n, strings.Join(list, ", "))
		}
		want[n] = true
	}
	var out []Config
	for _, c := range all {
		if want[c.Name] {
			out = append(out, c)
		}
	}
	return out, nil
}

// FindConfig returns the configuration of cs named name, or nil.
func FindConfig(cs []Config, name string) *Config {
	return Find(cs, func(c *Config) bool { return c.Name == name })
}

// Find returns the first element of s that match takes, or nil.
func Find[T any](s []T, match func(*T) bool) *T {
	for i := range s {
		if match(&s[i]) {
			return &s[i]
		}
	}
	return nil
}

// Ran reports whether cs has a configuration named name that was not
// skipped.
func Ran(cs []Config, name string) bool {
	c := FindConfig(cs, name)
	return c != nil && c.Skipped == ""
}

// RanConfigs are the configurations of cs that were not skipped.
func RanConfigs(cs []Config) []Config {
	var out []Config
	for _, c := range cs {
		if c.Skipped == "" {
			out = append(out, c)
		}
	}
	return out
}

// Comparison is configuration A against B on one row of a report: a
// throughput workload, or a latency point and percentile.
type Comparison struct {
	Workload string `json:"workload,omitempty"` // throughput
	Point    string `json:"point,omitempty"`    // latency
	Stat     string `json:"stat,omitempty"`     // latency: "p50" or "p99"
	A        string `json:"a"`
	B        string `json:"b"`
	Unit     string `json:"unit,omitempty"` // of Diff
	// Stopped, in a sequential run, is what ended this comparison's
	// repetitions: "target" when it had the pairs it needed, else what
	// ended the run ("budget").
	Stopped string `json:"stopped_by,omitempty"`
	stats.Difference
}

// UnmarshalJSON reads a comparison, also in the latency report's first
// layout (schema tapfwd-bench-latency/1), which named the difference
// "difference_ns".
func (c *Comparison) UnmarshalJSON(b []byte) error {
	type plain Comparison
	var v struct {
		plain
		DiffNS *stats.Estimate `json:"difference_ns"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Comparison(v.plain)
	if v.DiffNS != nil {
		c.Diff = *v.DiffNS
		if c.Unit == "" {
			c.Unit = "ns"
		}
	}
	return nil
}
