package daemon

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/dhcp"
	"github.com/tapfwd/tapfwd/napi"
)

// check refuses, before anything is made, what this machine cannot do
// for the Config: CPUs it may not use, no NAPI instances to make
// threaded, no dnsmasq. It looks for other daemons on the NIC, and takes
// the machine's id to derive the TAP's and the host port's MACs from.
func (d *Daemon) check() error {
	if cpus := d.c.Workers.CPUs; len(cpus) > 0 {
		if err := cpulist.CheckAllowed(cpus); err != nil {
			return fail(PartCPUs, cpulist.Format(cpus), err)
		}
	}
	if err := d.checkNAPI(); err != nil {
		return err
	}
	if err := d.checkAB(); err != nil {
		return err
	}
	if kp := d.c.Workers.KernelPoll; d.c.Workers.Poll == PollKernel && kp.OwnCPU {
		if err := cpulist.CheckAllowed([]int{kp.CPU}); err != nil {
			return fail(PartBusyPollCPU, fmt.Sprint(kp.CPU), err)
		}
		d.warnSharedPollerCPU(kp.CPU)
	}
	if d.c.Host != nil && d.c.Host.DHCP != nil {
		if _, err := dhcp.Find(); err != nil {
			return fail(PartDHCP, "", err)
		}
	}
	d.findOthers()
	key, err := machineKey()
	if err != nil && (d.c.TAP.MAC == nil || d.c.Host != nil) {
		d.log.Warn("the lab gets random MACs: no machine id to derive ones that stay across restarts", "err", err)
	}
	d.c.TAP.MACKey = key
	return nil
}

// checkNAPI checks that the NAPI kthreads' CPUs are online, and that the
// NIC has NAPI instances to make threaded. With the xdp backend, or
// NIC.GRO on, that waits for tuneNAPI: a veth without GRO has instances
// only once the XDP program is attached, or GRO is on.
func (d *Daemon) checkNAPI() error {
	t := d.c.NAPI
	if t == nil {
		return nil
	}
	online, err := cpulist.Online()
	for _, c := range []struct {
		part Part
		cpu  int
	}{{PartTAPNAPICPU, t.TAPCPU}, {PartNICNAPICPU, t.NICCPU}} {
		if c.cpu >= 0 && err == nil && !slices.Contains(online, c.cpu) {
			return fail(c.part, fmt.Sprint(c.cpu), fmt.Errorf("CPU %d is not online (online: %s)", c.cpu, cpulist.Format(online)))
		}
	}
	if t.NICMode == napi.ThreadedDisabled || d.c.NIC.Backend == BackendXDP || d.c.NIC.GRO == ToggleOn {
		return nil
	}
	c, err := napi.Dial()
	if err != nil {
		return err
	}
	defer c.Close()
	list, err := c.List(d.m.nic.Index)
	if err == nil && len(list) == 0 {
		err = fmt.Errorf("%s: %w", d.c.NIC.Name, napi.ErrNoInstances)
	}
	return fail(PartNICNAPI, "", err)
}

// machineKey is the machine's id (machine-id(5)), the key of the TAP's
// MAC: a secret that stays the same across restarts and differs between
// machines.
func machineKey() ([]byte, error) {
	var errs []error
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		b, err := os.ReadFile(p)
		if err == nil {
			if id, err := hex.DecodeString(string(bytes.TrimSpace(b))); err == nil && len(id) == 16 {
				return id, nil
			}
			err = fmt.Errorf("%s: not a machine id", p)
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// warnSharedPollerCPU warns, once, when queue workers are pinned to the
// busy poller's CPU: the poller spins there without pause, so they get
// what the scheduler leaves them. A warning, not a refusal: it forwards
// (on a machine of one CPU it is the only placement), only slower.
func (d *Daemon) warnSharedPollerCPU(cpu int) {
	var queues []int
	for q, c := range d.m.cpus {
		if c == cpu {
			queues = append(queues, q)
		}
	}
	if len(queues) > 0 {
		d.log.Warn("workers are pinned to the busy poller's CPU, which it keeps busy without pause: they get what is left of it; give the workers other CPUs (--cpus)",
			"busy_poll_cpu", cpu, "queues", queues, "worker_cpus", d.m.cpus)
	}
}

// findOthers finds the other daemons whose packet sockets are on this
// NIC, while this process may still read every process's fds; Open warns
// of them once it has started (warnOthers), not before a start that then
// fails.
func (d *Daemon) findOthers() {
	socks, err := procfs.PacketSockets()
	if err != nil {
		d.log.Debug("not looking for other tapfwds on the NIC", "err", err)
		return
	}
	inodes := map[uint64]bool{}
	for _, s := range socks {
		if s.Ifindex == d.m.nic.Index {
			inodes[s.Inode] = true
		}
	}
	seen := map[int]bool{os.Getpid(): true}
	for _, pids := range procfs.SocketOwners(inodes) {
		for _, pid := range pids {
			args, err := procfs.Cmdline(pid)
			if seen[pid] || err != nil || len(args) < 2 || !strings.HasPrefix(filepath.Base(args[0]), "tapfwd") || args[1] != "run" {
				continue
			}
			seen[pid] = true
			d.others = append(d.others, otherDaemon{pid, strings.Join(args, " ")})
		}
	}
}

// otherDaemon is another tapfwd run on the NIC: its pid and command line.
type otherDaemon struct {
	pid     int
	command string
}

// warnOthers warns of each other daemon findOthers found: it and this one
// cannot reach each other through the NIC, as each one's sockets ignore
// the frames the other sends on it.
func (d *Daemon) warnOthers() {
	for _, o := range d.others {
		d.log.Warn("another tapfwd forwards on this NIC: its lab and this one cannot reach each other through it; run one tapfwd with VM ports for both, or give each its own NIC",
			"nic", d.c.NIC.Name, "other_pid", o.pid, "other_command", o.command)
	}
}

// bindMetrics binds Metrics.Addr before anything is made, so that an
// address in use fails the start with nothing to undo; listenMetrics
// serves on it later.
func (d *Daemon) bindMetrics() error {
	m := d.c.Metrics
	if m == nil {
		return nil
	}
	if m.Listener != nil {
		d.http = &metricsServer{ln: m.Listener}
		d.undo.add(func() { m.Listener.Close() })
		return nil
	}
	ln, err := net.Listen("tcp", m.Addr)
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err // "bind: address already in use", not the call's name
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		if who := listeners(m.Addr); who != "" {
			err = fmt.Errorf("%w, by %s", err, who)
		}
	}
	if err != nil {
		return fail(PartMetricsAddr, m.Addr, err)
	}
	d.http = &metricsServer{ln: ln}
	d.undo.add(func() { ln.Close() })
	return nil
}
