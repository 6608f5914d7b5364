package daemon

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/tap"
)

// tuneNAPI pins the TAP's NAPI kthreads and makes the NIC's NAPI threaded,
// as asked; the NIC's settings are put back at Close.
func (d *Daemon) tuneNAPI() error {
	t := d.c.NAPI
	if d.c.Workers.Poll == PollThreaded && (t == nil || t.NICMode == napi.ThreadedDisabled) {
		t = &NAPI{TAPCPU: -1, NICMode: napi.ThreadedEnabled, NICCPU: -1}
		if d.c.NAPI != nil {
			t.TAPCPU = d.c.NAPI.TAPCPU
		}
	}
	if t == nil {
		return nil
	}
	if t.TAPCPU >= 0 {
		pids, err := napi.PinTAPKthreads(d.dev.Name(), t.TAPCPU)
		if err != nil {
			return fail(PartTAPNAPICPU, "", err)
		}
		d.log.Info("pinned the TAP's NAPI kthreads", "pids", pids, "cpu", t.TAPCPU)
	}
	if t.NICMode == napi.ThreadedDisabled {
		return nil
	}
	c, err := napi.Dial()
	if err != nil {
		return err
	}
	ch := napi.NewChanges(c).UseJournal(d.nicJournal(d.m.nic.Index))
	d.undo.add(func() {
		if err := ch.Restore(); err != nil {
			d.log.Error("restoring the NIC's NAPI settings", "err", err)
		}
		c.Close()
	})
	set, err := napi.SetDeviceThreaded(ch, d.m.nic.Index, t.NICMode, t.NICCPU)
	if errors.Is(err, napi.ErrNoInstances) {
		return fail(PartNICNAPI, "", fmt.Errorf("%s: %w", d.c.NIC.Name, err))
	}
	for _, s := range set {
		d.log.Info("NIC NAPI threaded", "nic", d.c.NIC.Name, "napi_id", s.ID, "mode", t.NICMode.String(), "kthread_pid", s.PID, "cpu", t.NICCPU)
	}
	return err
}

// newForwarder makes the workers, and the status that reads them.
func (d *Daemon) newForwarder() error {
	f, w := d.dev.Features(), d.c.Workers
	fc := forward.Config{Batch: w.Batch, CPUs: d.m.cpus, Roam: d.m.roam, Split: d.m.split, TAPVnetHdr: f.VnetHdr, MTU: d.c.TAP.MTU, Logger: d.log,
		Busy: w.Poll == PollBusy, GRO: w.GRO, UDPGRO: f.Offloads&(unix.TUN_F_USO4|unix.TUN_F_USO6) == unix.TUN_F_USO4|unix.TUN_F_USO6,
		L2: w.L2, TAPMACs: d.tapMACs(), GROWindow: w.GROWindow, SpinMax: w.Spin}
	if w.StrictMAC {
		fc.StrictMACs = d.strictMACs()
	}
	fc.GROMaxIPv4, fc.GROMaxIPv6 = d.dev.GROMaxSizes()
	var err error
	if fc.Guests, err = d.guestPorts(); err != nil {
		return err
	}
	taps, err := d.tapEndpoints()
	if err != nil {
		return err
	}
	fw, err := forward.New(taps, d.nic.nics, fc)
	if err != nil {
		return err
	}
	d.fw = fw
	d.undo.closing("closing the forwarder", fw.Close)
	d.status = newStatusSource(d, statusWindow)
	return nil
}

// tapEndpoints are the TAP's queues as the workers read and write them:
// tap.Queues, or with io_uring a tap.URingQueue on each queue's fd, each
// closed before the TAP.
func (d *Daemon) tapEndpoints() ([]forward.Endpoint, error) {
	qs, mode := d.dev.Queues(), d.c.Workers.TAPIO
	if d.c.AB != nil {
		return d.abEndpoint(qs)
	}
	out := endpoints(qs)
	if mode == TAPIOSyscall {
		return out, nil
	}
	batch := d.c.Workers.Batch
	for i, q := range qs {
		u, err := tap.NewURingQueue(q.Fd(), batch)
		if mode == TAPIOAuto && i == 0 && errors.Is(err, tap.ErrNoURing) {
			d.log.Info("TAP I/O: a system call per frame, io_uring cannot batch it here", "err", err)
			return out, nil
		}
		if err != nil {
			return nil, fail(PartTAPIO, "uring", err)
		}
		d.undo.closing("closing a TAP queue's io_uring", u.Close)
		out[i] = u
	}
	d.log.Info("TAP I/O: batched through io_uring", "queues", len(qs), "batch", batch)
	return out, nil
}
