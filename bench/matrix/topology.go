package matrix

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Topology is what a Lab builds for each visit.
type Topology string

const (
	// Veth is the single-host bed (testbed.New): wire namespace, a veth
	// to the forwarder's namespace, the forwarder or bridge, the lab.
	// The zero Topology is Veth.
	Veth Topology = "veth"
	// VXLAN is the two-host bed (testbed.NewHosts): a lab on each of two
	// hosts, one L2 segment over a VXLAN device per host; the forwarder
	// (one per host) or a bridge per host joins each lab to its VXLAN
	// device. The visit's bed is the view from host 1's lab (its wire
	// side) toward host 2's (its lab side).
	VXLAN Topology = "vxlan"
)

// Topologies are the topologies there are, in the order help lists them.
var Topologies = []Topology{Veth, VXLAN}

// ParseTopology returns the topology named s ("" is Veth).
func ParseTopology(s string) (Topology, error) {
	switch Topology(s) {
	case "", Veth:
		return Veth, nil
	case VXLAN:
		return VXLAN, nil
	}
	names := make([]string, len(Topologies))
	for i, t := range Topologies {
		names[i] = string(t)
	}
	return "", fmt.Errorf("unknown topology %q (known: %s)", s, strings.Join(names, ", "))
}

func (t Topology) String() string {
	if t == "" {
		return string(Veth)
	}
	return string(t)
}

// Fit adapts c to topology t: on VXLAN a forwarder runs on each host and
// the bridge is one per host enslaving its VXLAN device, which c's
// description then says; what t cannot build is marked skipped with the
// reason. It reports whether c can run on t.
func (t Topology) Fit(c *report.Config) bool {
	if t != VXLAN || c.Skipped != "" {
		return c.Skipped == ""
	}
	switch c.Kind {
	case report.KindTapfwd:
		c.Description += "; one on each host's VXLAN device"
	case report.KindBridge:
		c.Description = "a Linux bridge on each host enslaving its VXLAN device and a veth to its lab (in-kernel reference)"
	case report.KindDirect:
		c.Skipped = "no direct path across the two hosts: the labs meet only through the VXLAN devices"
	default:
		c.Skipped = fmt.Sprintf("the %s configuration runs on the %s topology only", c.Kind, Veth)
	}
	return c.Skipped == ""
}

// Forwarders are the processes a visit started: none for the bridge and
// the direct veth, one for tapfwd or the naive forwarder on the Veth
// topology, one per host on VXLAN, Open vSwitch's daemons.
type Forwarders struct {
	procs []*testbed.Process
	stops []func() error // what undoes more than the processes
}

// Alive returns the first error of a forwarder that is no longer running.
func (f Forwarders) Alive() error {
	for _, p := range f.procs {
		if err := p.Alive(); err != nil {
			return err
		}
	}
	return nil
}

// Pids are the forwarders' process ids: the run's own processes, whose
// threads' CPU time is the forwarding's cost.
func (f Forwarders) Pids() []int {
	pids := make([]int, len(f.procs))
	for i, p := range f.procs {
		pids[i] = p.Pid()
	}
	return pids
}

// Len is how many processes forward.
func (f Forwarders) Len() int { return len(f.procs) }

func (f Forwarders) stop() {
	for _, p := range f.procs {
		p.Stop()
	}
	for _, s := range f.stops {
		s()
	}
}

// visitHosts is Visit on the VXLAN topology: a fresh two-host bed, c's
// set-up on each host (NICToken: its VXLAN device), a forwarder on each
// host or the bridges, and fn on the view from lab 1 toward lab 2.
func (l Lab) visitHosts(ctx context.Context, c *report.Config, rep int, fn func(*testbed.Bed, Forwarders) error) error {
	mode := testbed.HostsForwarder
	switch c.Kind {
	case report.KindBridge:
		mode = testbed.HostsBridge
	case report.KindTapfwd:
	default:
		return fmt.Errorf("configuration %s (%s) cannot run on the %s topology", c.Name, c.Kind, VXLAN)
	}
	h, err := testbed.NewHosts(ctx, testbed.HostsConfig{Mode: mode})
	if err != nil {
		return fmt.Errorf("building the two-host test bed: %w", err)
	}
	defer h.Close()
	if l.Log != nil {
		l.Log.Info("bed", "config", c.Name, "rep", rep, "id", h.ID,
			"namespaces", strings.Join([]string{h.Host[0].NS, h.Host[0].LabNS, h.Host[1].NS, h.Host[1].LabNS}, " "))
	}
	for _, host := range h.Host {
		if err := setup(c, host.VXLAN, func(name string, arg ...string) error {
			_, err := h.Run(ctx, host.NS, name, arg...)
			return err
		}); err != nil {
			return err
		}
	}
	var fws Forwarders
	if c.Kind == report.KindTapfwd {
		ps, err := h.StartTapfwd(ctx, l.tapfwd(c), func(i int) []string {
			run := c.Run
			if len(l.HostCPUs) == len(h.Host) {
				run.CPUs = strconv.Itoa(l.HostCPUs[i])
			}
			return run.Args()
		})
		if err != nil {
			return err
		}
		fws = Forwarders{procs: ps[:]}
	} else if err := h.WaitReachable(ctx, 10*time.Second); err != nil {
		return err
	}
	defer fws.stop()
	return fn(h.View(0, 1), fws)
}

// setup runs c's set-up commands through run, NICToken replaced by nic.
func setup(c *report.Config, nic string, run func(name string, arg ...string) error) error {
	for _, s := range c.Setup {
		args := make([]string, len(s)-1)
		for i, a := range s[1:] {
			args[i] = strings.ReplaceAll(a, report.NICToken, nic)
		}
		if err := run(s[0], args...); err != nil {
			return fmt.Errorf("set-up: %w", err)
		}
	}
	return nil
}
