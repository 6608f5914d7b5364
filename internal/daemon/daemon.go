package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/abtap"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/tap"
)

// Daemon is one forwarder: what Open made, and how Close undoes it.
type Daemon struct {
	c    Config
	log  *slog.Logger
	undo cleanup

	m     machine           // what the Config names on this machine
	dev   *tap.Device       // the TAP
	ports vmPorts           // the VM ports
	host  *tapport.HostPort // Config.Host's port; nil without
	nic   nicSockets        // the queues' packet sockets
	rings xdpRings          // their ring counters, with BackendXDP
	fw    *forward.Forwarder
	ab    *abtap.Endpoint // Config.AB's; nil without
	// http is the metrics listener, bound before the privilege drop and
	// serving from after it; nil without Config.Metrics.
	http   *metricsServer
	status *statusSource
	napiJ  *napiJournals    // the NIC's NAPI journal (NAPIJournalDir)
	featJ  *featureJournals // the NIC's feature journal (FeatureJournalDir)
	others []otherDaemon    // other daemons on the NIC, warned of once started
}

// machine is what the Config names, resolved: the user to become, the VM
// ports' owner, the NIC, the queue workers' CPUs.
type machine struct {
	cred  *credential
	owner *tapport.Owner
	nic   *net.Interface
	cpus  []int
	roam  []int // the CPUs queue workers roam among (Workers.FollowLoad)
	split []int // the CPUs of the queues' TAP readers (Workers.Split); nil: not split
}

// Open sets everything up, in the order that lets each step use the one
// before; once privileges are dropped it only starts serving metrics.
// The Config's rules come first (Validate: a refusal touches nothing),
// then what the machine can refuse without anything made (the NIC, the
// users, the CPUs, the metrics address). On an error it undoes what it
// made. A failure that one part of the Config caused is an *Error.
func Open(c Config) (*Daemon, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	d := &Daemon{c: c.withDefaults(), log: c.Log.Logger}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.undo.log = d.log
	steps := []func() error{d.lookup, d.check, d.recoverNIC, d.bindMetrics, d.prepareVhost, d.openTAP, d.addVMPorts, d.addHostPort, d.startDHCP,
		d.setNICGRO, d.openNIC, d.tuneNAPI, d.newForwarder, d.listenMetrics, d.dropPrivileges, d.serveMetrics}
	for _, step := range steps {
		if err := step(); err != nil {
			d.Close()
			return nil, err
		}
	}
	f := d.dev.Features()
	d.log.Info("forwarding", "tap", d.dev.Name(), "tap_netns", d.dev.Netns(), "nic", d.c.NIC.Name,
		"queues", d.c.TAP.Queues, "cpus", d.m.cpus, "napi", f.NAPI, "vnet_hdr", f.VnetHdr,
		"offloads", f.OffloadNames(), "mtu", d.c.TAP.MTU, "mac", d.dev.MAC().String())
	d.warnOthers()
	return d, nil
}

// Close undoes Open, last step first. Failures are logged.
func (d *Daemon) Close() { d.undo.run() }

// cleanup is what Close undoes, in the order it was made.
type cleanup struct {
	log  *slog.Logger
	undo []func()
}

func (c *cleanup) add(fn func()) { c.undo = append(c.undo, fn) }

// closing adds a clean-up whose error is logged, never discarded.
func (c *cleanup) closing(what string, fn func() error) {
	c.add(func() {
		if err := fn(); err != nil {
			c.log.Error("clean-up failed", "what", what, "err", err)
		}
	})
}

func (c *cleanup) run() {
	for i := len(c.undo) - 1; i >= 0; i-- {
		c.undo[i]()
	}
	c.undo = nil
}

// lookup resolves what the configuration names on this machine.
func (d *Daemon) lookup() error {
	var err error
	if u := d.c.Privileges.User; u != "" {
		if d.m.cred, err = lookupUser(u); err != nil {
			return fail(PartUser, "", err)
		}
	}
	if o := d.c.VMPorts.Owner; o != "" {
		if d.m.owner, err = LookupOwner(o); err != nil {
			return fail(PartPortOwner, "", err)
		}
	}
	if d.m.nic, err = net.InterfaceByName(d.c.NIC.Name); err != nil {
		return fmt.Errorf("NIC %q not found in this network namespace (ip link lists the devices here)", d.c.NIC.Name)
	}
	if d.c.TAP.MTU == 0 {
		d.c.TAP.MTU = d.m.nic.MTU
		if d.c.TAP.MTU > tap.MaxMTU {
			return fail(PartTAPMTU, "", fmt.Errorf("the TAP would take the NIC's MTU, %d, and a TAP's is at most %d", d.m.nic.MTU, tap.MaxMTU))
		}
	}
	if d.m.cpus, err = workerCPUs(d.c.Workers.CPUs, d.c.TAP.Queues); err != nil {
		return fail(PartCPUs, "", err)
	}
	if d.m.roam, err = d.roamCPUs(); err != nil {
		return fail(PartCPUs, "", err)
	}
	if d.m.split, err = splitCPUs(d.c.Workers, d.m.cpus); err != nil {
		return fail(PartCPUs, "", err)
	}
	return checkReadyFd(d.c.Notify.ReadyFd)
}

// openTAP opens the TAP; the errors of package tap are returned as they
// are (tap.ErrPersistent, tap.ErrMismatch, tap.ErrAttached, ...).
func (d *Daemon) openTAP() error {
	tc := d.c.TAP
	if ab := d.c.AB; ab != nil {
		tc.Queues, tc.QueueNAPI = 2, ab.NAPI[:]
	}
	dev, err := tap.Open(tc)
	if err != nil {
		return err
	}
	d.dev = dev
	d.undo.closing("closing the TAP", dev.Close)
	if dev.Attached() {
		d.log.Info("attached to the persistent TAP an earlier run left", "tap", dev.Name(), "tap_netns", dev.Netns())
	}
	// Nodes whose port is gone point at minor numbers the next port may
	// get: any run that finds them removes them.
	if err := tapport.Sweep(dev.Netns()); err != nil {
		d.log.Warn("sweeping stale VM-port device nodes", "err", err)
	}
	return nil
}

// dropPrivileges becomes Privileges.User once every fd is open: nothing
// from here on needs privilege.
func (d *Daemon) dropPrivileges() error {
	c := d.m.cred
	if c == nil {
		return nil
	}
	if err := c.drop(d.log); err != nil {
		return fail(PartUser, d.c.Privileges.User, err)
	}
	d.log.Info("dropped privileges", "user", d.c.Privileges.User, "uid", c.uid, "gid", c.gid)
	return nil
}

// Run forwards until ctx ends or a device goes away; with NIC.Wait it
// waits out a NIC that went away and carries on with new sockets. It
// returns nil when ctx ended it.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if d.c.Log.StatsEvery > 0 {
		go logStats(ctx, d.log, d.fw, d.c.Log.StatsEvery)
	}
	go d.status.run(ctx)
	n := &notifier{log: d.log, Notify: d.c.Notify}
	ready := make(chan struct{})
	go func() {
		defer close(ready)
		select {
		case <-d.fw.Started():
		case <-ctx.Done():
			// Both may be done by the time this runs: workers that
			// started still count, whichever select picks.
			select {
			case <-d.fw.Started():
			default:
				return
			}
		}
		d.log.Info("ready: every worker runs")
		n.ready(fmt.Sprintf("forwarding %s <-> %s, %s", d.dev.Name(), d.c.NIC.Name, count(d.c.TAP.Queues, "queue")))
	}()
	go n.watchdog(ctx, d.fw.Stalled)
	defer n.stopping()
	// Ready is said (or not) before stopping is, and before Run returns.
	defer func() { cancel(); <-ready }()
	var err error
	for {
		err = d.runForwarder(ctx)
		if !d.c.NIC.Wait || !errors.Is(err, forward.ErrNICGone) || ctx.Err() != nil {
			break
		}
		if err = d.reattach(ctx); err != nil {
			break
		}
	}
	logTotals(d.log, d.fw)
	d.logABTotals()
	d.logVhostTotals()
	switch {
	case ctx.Err() != nil && errors.Is(err, forward.ErrNICGone):
		return nil // ended while waiting
	case errors.Is(err, forward.ErrNICGone):
		return fmt.Errorf("stopped: NIC %s: %w", d.c.NIC.Name, err)
	case errors.Is(err, forward.ErrTAPGone):
		return fmt.Errorf("stopped: %w", err)
	}
	return err
}

// Status is what the forwarder negotiated and is doing (/status).
func (d *Daemon) Status() Status { return d.status.Status() }

// MetricsAddr is the address /metrics and /status are served at; nil
// without Config.Metrics.
func (d *Daemon) MetricsAddr() net.Addr {
	if d.http == nil {
		return nil
	}
	return d.http.ln.Addr()
}
