package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afpacket"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/hostport"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vmport"
)

func cmdRun(args []string, stderr io.Writer) error {
	c, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	d := &daemon{c: c, log: newLogger(c, stderr)}
	defer d.close()
	if err := d.start(); err != nil {
		return err
	}
	return d.forward()
}

// newLogger logs at c.LogLevel to w, as text or JSON.
func newLogger(c *runConfig, w io.Writer) *slog.Logger {
	o := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogJSON {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// daemon is one `tapfwd run`: what it opened, and how to undo it.
type daemon struct {
	c     *runConfig
	log   *slog.Logger
	cred  *credential
	owner *vmport.Owner
	nic   *net.Interface
	dev   *tap.Device
	ports []vmport.Port
	vhost []*vhostPort   // --vhost-user
	host  *hostport.Port // --host-port
	rc    afpacket.Config
	socks []*afpacket.Socket
	cpus  []int
	fw    *forward.Forwarder
	// metrics is the /metrics server, listening from before the privilege
	// drop and serving from after it.
	metrics *metricsServer
	status  *statusSource // nil without the metrics listener
	undo    []func()      // run in reverse by close
}

// start sets everything up, in the order that lets each step use the one
// before; once privileges are dropped it only starts serving metrics.
func (d *daemon) start() error {
	steps := []func() error{d.lookup, d.prepareVhost, d.openTAP, d.addVMPorts, d.addHostPort, d.startDHCP, d.openNIC, d.tuneNAPI, d.newForwarder, d.listenMetrics, d.dropPrivileges, d.serveMetrics}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	f := d.dev.Features()
	d.log.Info("forwarding", "tap", d.dev.Name(), "tap_netns", d.dev.Netns(), "nic", d.c.NIC,
		"queues", d.c.TAP.Queues, "cpus", fmt.Sprint(d.cpus), "napi", f.NAPI, "vnet_hdr", f.VnetHdr,
		"offloads", f.OffloadNames(), "mtu", d.c.TAP.MTU, "mac", d.dev.MAC().String())
	return nil
}

func (d *daemon) onClose(fn func()) { d.undo = append(d.undo, fn) }

// closing registers a clean-up whose error is logged, never discarded.
func (d *daemon) closing(what string, fn func() error) {
	d.onClose(func() {
		if err := fn(); err != nil {
			d.log.Error("clean-up failed", "what", what, "err", err)
		}
	})
}

// close undoes start, last step first.
func (d *daemon) close() {
	for i := len(d.undo) - 1; i >= 0; i-- {
		d.undo[i]()
	}
	d.undo = nil
}

// lookup resolves what the configuration names on this machine: the user
// to become, the NIC, the worker CPUs.
func (d *daemon) lookup() error {
	var err error
	if d.c.User != "" {
		if d.cred, err = lookupUser(d.c.User); err != nil {
			return fmt.Errorf("--user: %w", err)
		}
	}
	if d.c.PortOwner != "" {
		if d.owner, err = lookupOwner(d.c.PortOwner); err != nil {
			return fmt.Errorf("--vm-port-owner: %w", err)
		}
	}
	if d.nic, err = net.InterfaceByName(d.c.NIC); err != nil {
		return fmt.Errorf("NIC %q not found in this network namespace: %w", d.c.NIC, err)
	}
	if d.c.TAP.MTU == 0 {
		d.c.TAP.MTU = d.nic.MTU
	}
	if d.cpus, err = workerCPUs(d.c.CPUs, d.c.TAP.Queues); err != nil {
		return fmt.Errorf("--cpus: %w", err)
	}
	return checkReadyFd(d.c.ReadyFd)
}

func (d *daemon) openTAP() error {
	dev, err := tap.Open(d.c.TAP)
	down := downLine(d.c.TAP.Name, d.c.TAP.Netns)
	switch {
	case errors.Is(err, tap.ErrPersistent):
		return fmt.Errorf("%w (add --persist to attach to it, or remove it with: %s)", err, down)
	case errors.Is(err, tap.ErrMismatch):
		return fmt.Errorf("%w (start with the settings it was made with, or remove it with: %s)", err, down)
	case errors.Is(err, tap.ErrOwned):
		return fmt.Errorf("%w (tapfwd does not attach to it: remove it with %s, and let tapfwd make it)", err, down)
	case errors.Is(err, tap.ErrAttached):
		return fmt.Errorf("%w (is another tapfwd running on it?)", err)
	case err != nil:
		return explain(err)
	}
	d.dev = dev
	d.closing("closing the TAP", dev.Close)
	if dev.Attached() {
		d.log.Info("attached to the persistent TAP an earlier run left", "tap", dev.Name(), "tap_netns", dev.Netns())
	}
	// Nodes whose port is gone point at minor numbers the next port may
	// get: any run that finds them removes them.
	if err := vmport.Sweep(dev.Netns()); err != nil {
		d.log.Warn("sweeping stale VM-port device nodes", "err", err)
	}
	return nil
}

// addVMPorts makes the TAP have --vm-ports ports: those a persistent TAP
// kept are adopted. Ports this run made are removed at exit (the kernel
// deletes them with the TAP, but not their device nodes), unless the TAP
// persists, which keeps them all.
func (d *daemon) addVMPorts() error {
	if d.c.VMPorts == 0 {
		return nil
	}
	if d.c.VhostDir != "" {
		return d.addVhostPorts()
	}
	all, added, err := vmport.Ensure(vmport.Config{TAP: d.dev.Name(), Netns: d.dev.Netns(), Owner: d.owner}, d.c.VMPorts)
	if err != nil {
		return err
	}
	d.ports = all
	if d.dev.Persistent() {
		d.onClose(func() {
			d.log.Info("the persistent TAP stays, with its VM ports and their device nodes",
				"tap", d.dev.Name(), "vm_ports", len(all), "remove_with", downLine(d.dev.Name(), d.dev.Netns()))
		})
	} else if d.cred != nil {
		// After the drop only a privileged process can remove them.
		w, err := startJanitor(janitorJob{Ports: added})
		if err != nil {
			return errors.Join(err, vmport.Remove(added))
		}
		d.onClose(func() { w.Close() })
	} else {
		d.closing("removing the VM ports", func() error { return vmport.Remove(added) })
	}
	for _, p := range all {
		d.log.Info("vm-port", "name", p.Name, "dev", p.Dev, "mac", p.MAC.String(), "qemu", qemuLine(p))
	}
	return nil
}

// downLine is the command that removes a persistent TAP.
func downLine(name, ns string) string {
	if ns == "" {
		return "tapfwd down --tap " + name
	}
	return "tapfwd down --tap " + name + " --tap-netns " + ns
}

// openNIC opens the packet sockets, asking the NIC for the TAP's, the
// VM ports' and the host port's MACs (a real NIC filters unicast by
// address), and the vhost-user ports' own senders.
func (d *daemon) openNIC() error {
	d.rc = afpacket.Config{Ifname: d.c.NIC, Queues: d.c.TAP.Queues, Batch: d.c.Batch, MACs: []net.HardwareAddr{d.dev.MAC()}, Promisc: d.c.Promisc}
	for _, p := range d.ports {
		d.rc.MACs = append(d.rc.MACs, p.MAC)
	}
	for _, p := range d.vhost {
		d.rc.MACs = append(d.rc.MACs, p.MAC)
	}
	if d.host != nil {
		d.rc.MACs = append(d.rc.MACs, d.host.MAC)
	}
	if d.c.StrictMAC {
		d.rc.FilterMAC = d.labMAC()
	}
	socks, err := afpacket.Open(d.rc)
	if err != nil {
		return err
	}
	d.socks = socks
	d.closing("closing the packet sockets", func() error { return closeAll(d.socks) })
	return d.openGuestSenders()
}

func closeAll(socks []*afpacket.Socket) error {
	var errs []error
	for _, s := range socks {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// tuneNAPI pins the TAP's NAPI kthreads and makes the NIC's NAPI threaded,
// as asked; the NIC's settings are put back at exit.
func (d *daemon) tuneNAPI() error {
	if cpu := d.c.TAPNAPICPU; cpu >= 0 {
		pids, err := napi.PinTAPKthreads(d.dev.Name(), cpu)
		if err != nil {
			return fmt.Errorf("--tap-napi-cpu: %w", err)
		}
		d.log.Info("pinned the TAP's NAPI kthreads", "pids", fmt.Sprint(pids), "cpu", cpu)
	}
	if d.c.NICThreaded == napi.ThreadedDisabled {
		return nil
	}
	c, err := napi.Dial()
	if err != nil {
		return err
	}
	ch := napi.NewChanges(c)
	d.onClose(func() {
		if err := ch.Restore(); err != nil {
			d.log.Error("restoring the NIC's NAPI settings", "err", err)
		}
		c.Close()
	})
	set, err := napi.SetDeviceThreaded(ch, d.nic.Index, d.c.NICThreaded, d.c.NICNAPICPU)
	if errors.Is(err, napi.ErrNoInstances) {
		return fmt.Errorf("--nic-napi-threaded: %s has no NAPI instances (a veth has them only with GRO on: ethtool -K %s gro on)", d.c.NIC, d.c.NIC)
	}
	for _, t := range set {
		d.log.Info("NIC NAPI threaded", "nic", d.c.NIC, "napi_id", t.ID, "mode", d.c.NICThreaded.String(), "kthread_pid", t.PID, "cpu", d.c.NICNAPICPU)
	}
	return err
}

func (d *daemon) newForwarder() error {
	f := d.dev.Features()
	fc := forward.Config{Batch: d.c.Batch, CPUs: d.cpus, TAPVnetHdr: f.VnetHdr, MTU: d.c.TAP.MTU, Logger: d.log,
		Busy: d.c.Busy, GRO: d.c.GRO, UDPGRO: f.Offloads&(unix.TUN_F_USO4|unix.TUN_F_USO6) == unix.TUN_F_USO4|unix.TUN_F_USO6}
	if d.c.StrictMAC {
		fc.StrictMAC = d.labMAC()
	}
	fc.L2 = d.c.L2
	fc.GROMaxIPv4, fc.GROMaxIPv6 = d.dev.GROMaxSizes()
	var err error
	if fc.Guests, err = d.guestPorts(); err != nil {
		return err
	}
	fw, err := forward.New(endpoints(d.dev.Queues()), nics(d.socks), fc)
	if err != nil {
		return err
	}
	d.fw = fw
	d.closing("closing the forwarder", fw.Close)
	return nil
}

// dropPrivileges becomes --user once every fd is open: nothing from here
// on needs privilege.
func (d *daemon) dropPrivileges() error {
	if d.cred == nil {
		return nil
	}
	if err := d.cred.drop(d.log); err != nil {
		return fmt.Errorf("--user %s: %w", d.c.User, err)
	}
	d.log.Info("dropped privileges", "user", d.c.User, "uid", d.cred.uid, "gid", d.cred.gid)
	return nil
}

// forward runs the workers until a signal or a failure; with --wait-nic
// it waits out a NIC that went away and carries on with new sockets.
func (d *daemon) forward() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopOnSignal(ctx, cancel, d.log)
	if d.c.StatsEvery > 0 {
		go logStats(ctx, d.log, d.fw, d.c.StatsEvery)
	}
	if d.status != nil {
		go d.status.run(ctx)
	}
	n := &notifier{log: d.log, readyFd: d.c.ReadyFd}
	go func() {
		select {
		case <-d.fw.Started():
			d.log.Info("ready: every worker runs")
			n.ready(fmt.Sprintf("forwarding %s <-> %s, %d queues", d.dev.Name(), d.c.NIC, d.c.TAP.Queues))
		case <-ctx.Done():
		}
	}()
	go n.watchdog(ctx, d.fw.Stalled)
	defer n.stopping()
	var err error
	for {
		err = d.fw.Run(ctx)
		if !d.c.WaitNIC || !errors.Is(err, forward.ErrNICGone) || ctx.Err() != nil {
			break
		}
		if err = d.reattach(ctx); err != nil {
			break
		}
	}
	logTotals(d.log, d.fw)
	d.logVhostTotals()
	switch {
	case ctx.Err() != nil && errors.Is(err, forward.ErrNICGone):
		return nil // stopped by a signal while waiting
	case errors.Is(err, forward.ErrTAPGone), errors.Is(err, forward.ErrNICGone):
		return fmt.Errorf("stopped: %w", err)
	}
	return err
}

// reattach waits for the NIC to come back and gives the workers new
// sockets on it.
func (d *daemon) reattach(ctx context.Context) error {
	d.log.Warn("NIC went away: waiting for it to come back (--wait-nic)", "nic", d.c.NIC)
	if err := closeAll(d.socks); err != nil {
		d.log.Warn("closing the old packet sockets", "err", err)
	}
	socks, err := reopen(ctx, d.rc)
	if err != nil {
		return err
	}
	d.socks = socks
	if err := d.fw.Reattach(nics(socks)); err != nil {
		return err
	}
	d.log.Info("NIC is back: forwarding again", "nic", d.c.NIC)
	return nil
}

// stopOnSignal cancels ctx on the first SIGINT or SIGTERM and exits at
// once on the second.
func stopOnSignal(ctx context.Context, cancel func(), log *slog.Logger) {
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		defer signal.Stop(sigc)
		select {
		case s := <-sigc:
			log.Info("stopping", "signal", s.String())
			cancel()
		case <-ctx.Done():
			return
		}
		s := <-sigc
		log.Error("second signal: exiting now", "signal", s.String())
		os.Exit(1)
	}()
}

// reopen waits until the NIC exists again and opens its sockets.
func reopen(ctx context.Context, rc afpacket.Config) ([]*afpacket.Socket, error) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := net.InterfaceByName(rc.Ifname); err == nil {
			if socks, err := afpacket.Open(rc); err == nil {
				return socks, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, forward.ErrNICGone
		case <-t.C:
		}
	}
}

// workerCPUs gives one CPU per queue (-1: unpinned): list wraps; nil takes
// the CPUs this process may run on, in order; an empty list pins nothing.
func workerCPUs(list []int, queues int) ([]int, error) {
	out := make([]int, queues)
	if list != nil && len(list) == 0 {
		for i := range out {
			out[i] = -1
		}
		return out, nil
	}
	if list == nil {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return nil, os.NewSyscallError("sched_getaffinity", err)
		}
		for c := 0; c < runtime.NumCPU()*4 && c < 1024; c++ {
			if set.IsSet(c) {
				list = append(list, c)
			}
		}
	}
	if len(list) == 0 {
		return nil, errors.New("no CPUs")
	}
	for i := range out {
		out[i] = list[i%len(list)]
	}
	return out, nil
}

// endpoints and nics turn the concrete queues and sockets into what
// forward takes.
func endpoints(qs []*tap.Queue) []forward.Endpoint {
	out := make([]forward.Endpoint, len(qs))
	for i, q := range qs {
		out[i] = q
	}
	return out
}

func nics(socks []*afpacket.Socket) []forward.NIC {
	out := make([]forward.NIC, len(socks))
	for i, s := range socks {
		out[i] = s
	}
	return out
}
