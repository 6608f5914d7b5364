package matrix

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/ovs"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/tap"
)

// Lab builds the beds of a configuration and starts what runs in them.
type Lab struct {
	// Tapfwd is the tapfwd binary, started in the fwd namespace as
	// `tapfwd run` (KindTapfwd).
	Tapfwd string
	// Bench is the tapfwd-bench binary, started as `tapfwd-bench
	// naive-forwarder` (KindNaive).
	Bench string
	// Log receives one line per bed; nil discards.
	Log *slog.Logger
	// Topology is the bed each visit builds; the zero value is Veth.
	Topology Topology
	// HostCPUs, on VXLAN, are the CPUs host 1's and host 2's tapfwd run
	// their workers on (--cpus); nil leaves tapfwd's default, which puts
	// both on the first CPU.
	HostCPUs []int
}

// Visit builds a fresh bed of l.Topology for c, runs c's set-up, starts
// its forwarders (none for the bridge and the direct veth), waits until
// the lab answers, calls fn, and removes everything. c must fit the
// topology (Topology.Fit).
func (l Lab) Visit(ctx context.Context, c *report.Config, rep int, fn func(*testbed.Bed, Forwarders) error) error {
	if l.Topology == VXLAN {
		return l.visitHosts(ctx, c, rep, fn)
	}
	mode := testbed.Forwarder
	switch c.Kind {
	case report.KindBridge:
		mode = testbed.Bridge
	case report.KindDirect:
		mode = testbed.Direct
	}
	bed, err := testbed.New(ctx, testbed.Config{Mode: mode})
	if err != nil {
		return fmt.Errorf("building the test bed: %w", err)
	}
	defer bed.Close()
	if l.Log != nil {
		l.Log.Info("bed", "config", c.Name, "rep", rep, "id", bed.ID, "namespaces", bed.WireNS+" "+bed.FwdNS+" "+bed.LabNS)
	}
	if err := setup(c, bed.NIC, func(name string, arg ...string) error {
		_, err := bed.Run(ctx, bed.FwdNS, name, arg...)
		return err
	}); err != nil {
		return err
	}
	fws, err := l.start(ctx, c, bed)
	if err != nil {
		return err
	}
	defer fws.stop()
	return fn(bed, fws)
}

// start starts c's forwarder on bed and waits until the lab answers; the
// bridge and the direct veth start nothing.
func (l Lab) start(ctx context.Context, c *report.Config, bed *testbed.Bed) (Forwarders, error) {
	var fw *testbed.Process
	var err error
	switch c.Kind {
	case report.KindTapfwd:
		fw, err = forwarder.Start(ctx, bed, l.tapfwd(c), c.Run)
	case report.KindNaive:
		fw, err = forwarder.StartNaive(ctx, bed, l.Bench)
	case report.KindOVS:
		return startOVS(ctx, bed)
	default:
		err = bed.WaitLabReachable(ctx, 10*time.Second)
	}
	if err != nil || fw == nil {
		return Forwarders{}, err
	}
	return Forwarders{procs: []*testbed.Process{fw}}, nil
}

// startOVS starts Open vSwitch's userspace datapath on bed, every thread
// of ovs-vswitchd on the CPU tapfwd pins its worker to by default (the
// first this process may use), so that the two meet the load alike.
func startOVS(ctx context.Context, bed *testbed.Bed) (Forwarders, error) {
	cpus := ""
	if allowed, err := cpulist.Allowed(); err == nil && len(allowed) > 0 {
		cpus = strconv.Itoa(allowed[0])
	}
	sw, err := ovs.Start(ctx, bed, ovs.Config{CPUs: cpus})
	if err != nil {
		return Forwarders{}, err
	}
	return Forwarders{procs: sw.Processes(), stops: []func() error{sw.Stop}}, nil
}

// tapfwd is the binary c runs: its own, or the bench's.
func (l Lab) tapfwd(c *report.Config) string {
	if c.Binary != "" {
		return c.Binary
	}
	return l.Tapfwd
}

// CheckKernel reports whether the kernel's TUNGETFEATURES flags cover what
// c's tapfwd settings need; when not, it marks c skipped with the flags
// missing.
func CheckKernel(c *report.Config, features uint32) bool {
	missing := c.Run.Needs() &^ features
	if missing == 0 {
		return true
	}
	var names []string
	for _, n := range tap.FlagNames(missing) {
		names = append(names, "IFF_"+n)
	}
	if len(names) == 0 {
		names = []string{fmt.Sprintf("%#x", missing)}
	}
	c.Skipped = fmt.Sprintf("the kernel lacks %s (TUNGETFEATURES %#x)", strings.Join(names, ", "), features)
	return false
}

// CheckFlags reports whether the tapfwd binary, whose `tapfwd run` has
// the flags flags (forwarder.Supported; nil: not checked), takes every
// flag c gives; when not, it marks c skipped with the flags missing (a
// lever the binary was built before).
func CheckFlags(c *report.Config, flags map[string]bool) bool {
	missing := c.Run.Missing(flags)
	if c.Kind != report.KindTapfwd || len(missing) == 0 {
		return true
	}
	c.Skipped = fmt.Sprintf("the tapfwd binary has no %s (built before it)", strings.Join(missing, ", "))
	return false
}

// ProbeHost gathers what a report says about the machine; with iperf, the
// iperf3 version too.
func ProbeHost(tunFeatures uint32, iperf bool) report.Host {
	h := report.Host{CPUs: runtime.NumCPU(), Go: runtime.Version(), TUNFeatures: tap.FlagNames(tunFeatures), CPUModel: procfs.CPUModel()}
	h.Kernel, h.Machine = Uname()
	if !iperf {
		return h
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "iperf3", "--version").Output(); err == nil {
		h.Iperf3, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	return h
}

// Uname is the kernel release and the machine; empty when uname fails.
func Uname() (release, machine string) {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "", ""
	}
	return unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:])
}
