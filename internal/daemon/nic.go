package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afpacket"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/tap"
)

// nicSockets are the queue workers' sockets on the NIC, and how they were
// opened, to open them again when the NIC comes back.
type nicSockets struct {
	rc    afpacket.Config
	socks []*afpacket.Socket // BackendPacket
	xdp   *xdpSockets        // BackendXDP
	nics  []forward.NIC      // what the workers have: socket i on queue i
}

// openNIC opens the queues' sockets, asking the NIC for the TAP's, the
// host port's and the VM ports' MACs (a real NIC filters unicast by
// address), with StrictMAC taking no other unicast, and the vhost-user
// ports' own senders.
func (d *Daemon) openNIC() error {
	rc := afpacket.Config{Ifname: d.c.NIC.Name, Queues: d.c.TAP.Queues, Batch: d.c.Workers.Batch,
		MACs: append(d.tapMACs(), d.ports.vhostMACs()...), Promisc: d.c.NIC.Promisc}
	if d.c.Workers.StrictMAC {
		rc.FilterMACs = rc.MACs
	}
	n, err := d.openSockets(rc)
	if err != nil {
		return err
	}
	d.nic = n
	d.undo.closing("closing the NIC's sockets", func() error {
		if d.nic.xdp != nil {
			d.nic.xdp.logCounters(d.log)
		}
		d.rings.retire()
		return d.nic.close()
	})
	if d.nic.xdp != nil {
		d.log.Info("AF_XDP on the NIC", "nic", d.c.NIC.Name, "xdp_mode", d.nic.xdp.nic.Mode().String(),
			"prog_id", d.nic.xdp.progID(), "multi_buffer", d.nic.xdp.nic.MultiBuffer(),
			"partial_checksums", d.nic.xdp.nic.PartialChecksums(), "napi_ids", fmt.Sprint(d.nic.xdp.napis))
		d.nic.xdp.logNAPIs(d.log, d.c.Workers.KernelPoll)
	}
	return d.openGuestSenders()
}

// openSockets opens one socket per queue of the configured backend.
func (d *Daemon) openSockets(rc afpacket.Config) (nicSockets, error) {
	n := nicSockets{rc: rc}
	if d.c.NIC.Backend == BackendXDP {
		if rc.FilterMACs != nil {
			return n, fail(PartNICBackend, BackendXDP.String(), errors.New("the strict MAC filter is a packet socket's: AF_XDP has none"))
		}
		var kp *KernelPoll
		if d.c.Workers.Poll == PollKernel {
			kp = &d.c.Workers.KernelPoll
		}
		x, err := openXDP(rc.Ifname, rc.Queues, d.c.NIC.XDPMode, kp, d.nicJournal)
		if err != nil {
			return n, fail(PartNICBackend, BackendXDP.String(), err)
		}
		n.xdp, n.nics = x, x.nics
		d.rings.use(x.nic.Sockets())
		return n, nil
	}
	socks, err := afpacket.Open(rc)
	if err != nil {
		return n, err
	}
	n.socks = socks
	for _, s := range socks {
		n.nics = append(n.nics, s)
	}
	return n, nil
}

// gone is closed once the NIC has left this namespace, where the workers'
// sockets do not say so themselves (AF_XDP); nil where they do.
func (n *nicSockets) gone() <-chan struct{} {
	if n.xdp == nil {
		return nil
	}
	return n.xdp.gone()
}

// errNICRemoved is what the NIC's link watch ends the workers with.
var errNICRemoved = fmt.Errorf("%w (deleted, or moved to another network namespace)", forward.ErrNICGone)

// runForwarder runs the forwarder until ctx ends or a worker fails, or, where
// the NIC's sockets do not say that it is gone, until its link watch does:
// then it returns errNICRemoved, as a worker whose NIC went away would.
func (d *Daemon) runForwarder(ctx context.Context) error {
	gone := d.nic.gone()
	if gone == nil {
		return d.fw.Run(ctx)
	}
	run, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-gone:
			cancel()
		case <-run.Done():
		}
	}()
	err := d.fw.Run(run)
	if err == nil && ctx.Err() == nil {
		return errNICRemoved
	}
	return err
}

// xdpMode is how the XDP program is attached; empty without one.
func (n *nicSockets) xdpMode() string {
	if n.xdp == nil {
		return ""
	}
	return n.xdp.nic.Mode().String()
}

// close closes the sockets (and detaches the XDP program).
func (n *nicSockets) close() error {
	var errs []error
	for _, s := range n.socks {
		errs = append(errs, s.Close())
	}
	if n.xdp != nil {
		errs = append(errs, n.xdp.close())
	}
	n.socks, n.xdp, n.nics = nil, nil, nil
	return errors.Join(errs...)
}

// reattach waits for the NIC to come back and gives the workers new
// sockets on it, and it the GRO NIC.GRO asks.
func (d *Daemon) reattach(ctx context.Context) error {
	d.log.Warn("NIC went away: waiting for it to come back (--wait-nic)", "nic", d.c.NIC.Name)
	d.rings.retire()
	if err := d.nic.close(); err != nil {
		d.log.Warn("closing the old sockets", "err", err)
	}
	n, err := d.reopen(ctx, d.nic.rc)
	if err != nil {
		return err
	}
	d.nic = n
	if err := d.fw.Reattach(n.nics); err != nil {
		return err
	}
	d.reapplyGRO()
	d.log.Info("NIC is back: forwarding again", "nic", d.c.NIC.Name)
	return nil
}

// reopen waits until the NIC exists again and opens its sockets.
func (d *Daemon) reopen(ctx context.Context, rc afpacket.Config) (nicSockets, error) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := net.InterfaceByName(rc.Ifname); err == nil {
			if n, err := d.openSockets(rc); err == nil {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			return nicSockets{rc: rc}, forward.ErrNICGone
		case <-t.C:
		}
	}
}

// workerCPUs gives one CPU per worker (-1: unpinned): list wraps; nil
// takes the CPUs this process may run on, in order; an empty list pins
// nothing.
func workerCPUs(list []int, workers int) ([]int, error) {
	list, err := cpuSet(list)
	if err != nil {
		return nil, err
	}
	out := make([]int, workers)
	for i := range out {
		out[i] = -1
		if len(list) > 0 {
			out[i] = list[i%len(list)]
		}
	}
	return out, nil
}

// roamCPUs is where queue workers may roam (forward.Config.Roam): the CPUs
// they may be pinned to, less the busy poller's; none unless FollowLoad.
func (d *Daemon) roamCPUs() ([]int, error) {
	w := d.c.Workers
	if !w.FollowLoad {
		return nil, nil
	}
	set, err := cpuSet(w.CPUs)
	if err != nil {
		return nil, err
	}
	if kp := w.KernelPoll; w.Poll == PollKernel && kp.OwnCPU {
		set = slices.DeleteFunc(slices.Clone(set), func(c int) bool { return c == kp.CPU })
	}
	return set, nil
}

// splitCPUs gives each queue's TAP reader, with Workers.Split, the CPU
// after its queue's (cpus) among the CPUs workers may be pinned to,
// wrapping: with two CPUs, one direction on each. Unpinned queues stay
// unpinned. nil without Split.
func splitCPUs(w Workers, cpus []int) ([]int, error) {
	if !w.Split {
		return nil, nil
	}
	set, err := cpuSet(w.CPUs)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(cpus))
	for i, c := range cpus {
		out[i] = -1
		if k := slices.Index(set, c); k >= 0 {
			out[i] = set[(k+1)%len(set)]
		}
	}
	return out, nil
}

// cpuSet is the CPUs workers may be pinned to (Workers.CPUs): list, or for
// nil the CPUs this process may run on, in order; none for an empty list.
func cpuSet(list []int) ([]int, error) {
	if list != nil {
		return list, nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, os.NewSyscallError("sched_getaffinity", err)
	}
	for c := 0; c < runtime.NumCPU()*4 && c < 1024; c++ {
		if set.IsSet(c) {
			list = append(list, c)
		}
	}
	if len(list) == 0 {
		return nil, errors.New("no CPUs")
	}
	return list, nil
}

// endpoints turns the TAP's queues into what forward takes.
func endpoints(qs []*tap.Queue) []forward.Endpoint {
	out := make([]forward.Endpoint, len(qs))
	for i, q := range qs {
		out[i] = q
	}
	return out
}
