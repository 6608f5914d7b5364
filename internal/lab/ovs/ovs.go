package ovs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Schema is where Debian's openvswitch-common keeps the database schema.
const Schema = "/usr/share/openvswitch/vswitch.ovsschema"

// ErrNotInstalled: a program of Open vSwitch, or its schema, is missing.
var ErrNotInstalled = errors.New("no Open vSwitch installed (Debian: apt-get install openvswitch-switch; its service need not run)")

var programs = []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-appctl"}

// Available says whether Open vSwitch's programs and schema are here.
func Available() error {
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%w: no %s", ErrNotInstalled, p)
		}
	}
	if _, err := os.Stat(Schema); err != nil {
		return fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	return nil
}

// Config says where the switch runs.
type Config struct {
	// CPUs is the CPU list (taskset's notation) every thread of
	// ovs-vswitchd runs on: the placement the forwarder it is compared
	// with has. "" leaves it to the scheduler.
	CPUs string
	// Bridge names the OVS bridge (an internal device in the forwarder's
	// namespace); "" is "br0".
	Bridge string
}

// Switch is a running Open vSwitch on a bed.
type Switch struct {
	bed      *testbed.Bed
	dir      string
	bridge   string
	db       *testbed.Process
	vswitchd *testbed.Process
}

// Start runs Open vSwitch's userspace datapath between b's NIC and its lab
// (b must be a Forwarder bed) and waits until the lab answers ping from the
// wire. Stop undoes it.
func Start(ctx context.Context, b *testbed.Bed, c Config) (*Switch, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if b.Mode != testbed.Forwarder {
		return nil, fmt.Errorf("ovs: bed mode %v has no forwarder namespace", b.Mode)
	}
	dir, err := os.MkdirTemp("", "tfw-ovs-")
	if err != nil {
		return nil, fmt.Errorf("ovs: %w", err)
	}
	s := &Switch{bed: b, dir: dir, bridge: c.Bridge}
	if s.bridge == "" {
		s.bridge = "br0"
	}
	if err := s.start(ctx, c); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

func (s *Switch) start(ctx context.Context, c Config) error {
	db := filepath.Join(s.dir, "conf.db")
	if out, err := exec.CommandContext(ctx, "ovsdb-tool", "create", db, Schema).CombinedOutput(); err != nil {
		return fmt.Errorf("ovs: ovsdb-tool create: %w: %s", err, strings.TrimSpace(string(out)))
	}
	var err error
	s.db, err = s.bed.Start(s.bed.FwdNS, "ovsdb-server", "env", append(s.env(), "ovsdb-server", db,
		"--remote=punix:"+s.sock(), "--unixctl="+filepath.Join(s.dir, "ovsdb-server.ctl"), "-vconsole:warn", "-vsyslog:off")...)
	if err != nil {
		return err
	}
	if err := s.waitFor(ctx, s.sock(), s.db); err != nil {
		return err
	}
	// Read by ovs-vswitchd at start: without userspace TSO the netdev
	// datapath drops the veth's TSO frames and TCP does not pass.
	if _, err := s.vsctl(ctx, "--no-wait", "init", "--", "set", "Open_vSwitch", ".", "other_config:userspace-tso-enable=true"); err != nil {
		return err
	}
	if err := s.startVswitchd(ctx, c.CPUs); err != nil {
		return err
	}
	return s.addPorts(ctx)
}

func (s *Switch) startVswitchd(ctx context.Context, cpus string) error {
	args := append(s.env(), "ovs-vswitchd", "unix:"+s.sock(), "--unixctl="+s.ctl(), "-vconsole:warn", "-vsyslog:off")
	exe := "env"
	if cpus != "" {
		exe, args = "taskset", append([]string{"-c", cpus, "env"}, args...)
	}
	var err error
	s.vswitchd, err = s.bed.Start(s.bed.FwdNS, "ovs-vswitchd", exe, args...)
	if err != nil {
		return err
	}
	return s.waitFor(ctx, s.ctl(), s.vswitchd)
}

// addPorts makes the bridge and its two ports, moves the TAP into the lab
// and gives it the lab's address, then waits for the lab to answer.
func (s *Switch) addPorts(ctx context.Context) error {
	b := s.bed
	steps := [][]string{
		{"add-br", s.bridge, "--", "set", "bridge", s.bridge, "datapath_type=netdev"},
		{"add-port", s.bridge, b.NIC},
		{"add-port", s.bridge, b.LabIf, "--", "set", "interface", b.LabIf, "type=tap"},
	}
	for _, st := range steps {
		if _, err := s.vsctl(ctx, st...); err != nil {
			return err
		}
	}
	ip := [][]string{
		{"-n", b.FwdNS, "link", "set", b.LabIf, "netns", b.LabNS},
		{"-n", b.LabNS, "addr", "add", b.LabAddr.String(), "dev", b.LabIf},
		{"-n", b.LabNS, "link", "set", b.LabIf, "up"},
	}
	for _, args := range ip {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ovs: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	if err := b.WaitLabReachable(ctx, 10*time.Second); err != nil {
		return fmt.Errorf("ovs: lab not reachable through Open vSwitch: %w; ovs-vswitchd said: %s", err, s.vswitchd.Tail(3))
	}
	return nil
}

// env keeps every file the daemons make (sockets, the bridge's OpenFlow
// socket, pid and log files) in the switch's directory.
func (s *Switch) env() []string {
	return []string{"OVS_RUNDIR=" + s.dir, "OVS_DBDIR=" + s.dir, "OVS_LOGDIR=" + s.dir, "OVS_SYSCONFDIR=" + s.dir}
}

func (s *Switch) sock() string { return filepath.Join(s.dir, "db.sock") }
func (s *Switch) ctl() string  { return filepath.Join(s.dir, "ovs-vswitchd.ctl") }

// waitFor waits until path exists (a daemon's socket), or p exits.
func (s *Switch) waitFor(ctx context.Context, path string, p *testbed.Process) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if err := p.Alive(); err != nil {
			return fmt.Errorf("ovs: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ovs: no %s within 10s: %s", filepath.Base(path), p.Tail(3))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// vsctl runs ovs-vsctl on the switch's database.
func (s *Switch) vsctl(ctx context.Context, args ...string) (string, error) {
	all := append([]string{"--db=unix:" + s.sock(), "--timeout=10"}, args...)
	out, err := exec.CommandContext(ctx, "ovs-vsctl", all...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ovs: ovs-vsctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// Pids are the processes of the switch (ovs-vswitchd, ovsdb-server), for
// the CPU time a run's own threads spent.
func (s *Switch) Pids() []int {
	var pids []int
	for _, p := range []*testbed.Process{s.vswitchd, s.db} {
		if p != nil && p.Alive() == nil {
			pids = append(pids, p.Pid())
		}
	}
	return pids
}

// Stats are one port's counters in the datapath.
type Stats struct {
	RxPackets, RxDropped, RxErrors uint64
	TxPackets, TxDropped, TxErrors uint64
}

// PortStats reads the datapath's counters of the port named (the bed's
// NIC; the lab's TAP has left the switch's namespace, where OVS reads
// counters, so it has none). The database's statistics lag by seconds;
// the datapath's are current.
func (s *Switch) PortStats(ctx context.Context, port string) (Stats, error) {
	out, err := exec.CommandContext(ctx, "ovs-appctl", "-t", s.ctl(), "dpctl/show", "-s").CombinedOutput()
	if err != nil {
		return Stats{}, fmt.Errorf("ovs: dpctl/show: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return parseDpctl(string(out), port)
}

// parseDpctl finds port's block in dpctl/show -s output ("port 2: w1"
// then "RX packets:N errors:N dropped:N ..." and "TX packets:N ...").
func parseDpctl(out, port string) (Stats, error) {
	var st Stats
	in, found := false, 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "port" {
			in = f[2] == port
			continue
		}
		if !in || len(f) < 4 || (f[0] != "RX" && f[0] != "TX") || !strings.HasPrefix(f[1], "packets:") {
			continue
		}
		kv := map[string]uint64{}
		for _, w := range f[1:] {
			k, v, _ := strings.Cut(w, ":")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return Stats{}, fmt.Errorf("ovs: dpctl/show: %q: %q is no count", l, w)
			}
			kv[k] = n
		}
		if f[0] == "RX" {
			st.RxPackets, st.RxDropped, st.RxErrors = kv["packets"], kv["dropped"], kv["errors"]
		} else {
			st.TxPackets, st.TxDropped, st.TxErrors = kv["packets"], kv["dropped"], kv["errors"]
		}
		found++
	}
	if found != 2 {
		return Stats{}, fmt.Errorf("ovs: dpctl/show has no counters of port %s", port)
	}
	return st, nil
}

// Stop ends ovs-vswitchd and ovsdb-server (which remove the bridge's
// devices with their namespace's devices as they exit), deletes the TAP
// if it is still in the lab, and removes the directory.
func (s *Switch) Stop() error {
	var errs []error
	if s.vswitchd != nil {
		if err := s.vswitchd.Stop(); err != nil && !s.vswitchd.Exited() {
			errs = append(errs, err)
		}
	}
	if s.db != nil {
		if err := s.db.Stop(); err != nil && !s.db.Exited() {
			errs = append(errs, err)
		}
	}
	b := s.bed
	for _, ns := range []string{b.LabNS, b.FwdNS} {
		for _, dev := range []string{b.LabIf, s.bridge, "ovs-netdev"} {
			if ns == b.LabNS && dev != b.LabIf {
				continue
			}
			exec.Command("ip", "-n", ns, "link", "del", dev).Run() // gone already, mostly
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("ovs: %w", err))
	}
	return errors.Join(errs...)
}

// Processes are ovs-vswitchd and ovsdb-server, as the bed started them.
func (s *Switch) Processes() []*testbed.Process {
	var ps []*testbed.Process
	for _, p := range []*testbed.Process{s.vswitchd, s.db} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}
