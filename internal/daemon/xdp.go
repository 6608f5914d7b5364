package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/base/uring"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/netns"
)

// xdpSockets are the AF_XDP side of the NIC: the program, one socket per
// queue and, with PollKernel, each queue's NAPI poller and the NAPI
// settings made for them.
type xdpSockets struct {
	nic     *afxdp.NIC
	pollers []*uring.Poller
	napis   [][]uint32  // the NAPI ids queue i's poller busy-polls
	was     []napi.NAPI // the NAPI instances as they were before the settings
	napiC   *napi.Client
	napiCh  *napi.Changes // the settings, undone at close
	spinner *cpuPoller    // KernelPoll.OwnCPU's poller
	nics    []forward.NIC
	// The NIC's link watch: an AF_XDP socket never says that its device
	// is gone (net/xdp/xsk.c: xsk_notifier unbinds it, and xsk_poll
	// reports nothing on an unbound socket), so rtnetlink says it.
	ns    *netns.NS
	watch *netns.LinkWatch
}

// polledSocket is an AF_XDP socket whose worker waits through a Poller,
// which busy-polls the queue's NAPI inside io_uring_enter: a forward.Waiter.
type polledSocket struct {
	*afxdp.Socket
	p *uring.Poller
}

func (s polledSocket) Wait(pfd []unix.PollFd, timeout *unix.Timespec) error {
	return s.p.Wait(pfd, timeout)
}

// openXDP attaches the XDP program to ifname and binds one socket to each
// of its first queues; a non-nil kp (PollKernel) sets kp on the NAPI
// instances and gives each socket a NAPI poller, or with OwnCPU starts one
// poller for them all on a CPU of its own. journal gives the NAPI journal
// of the NIC's ifindex that the settings are written to first.
func openXDP(ifname string, queues int, mode afxdp.Mode, kp *KernelPoll, journal func(ifindex int) *napi.Journal) (_ *xdpSockets, err error) {
	n, err := afxdp.Open(afxdp.Config{Ifname: ifname, Queues: queues, Mode: mode})
	if err != nil {
		return nil, err
	}
	x := &xdpSockets{nic: n}
	defer func() {
		if err != nil {
			x.close()
		}
	}()
	if err := x.watchNIC(); err != nil {
		return nil, err
	}
	if kp != nil {
		if err := x.tuneNAPIs(ifname, queues, *kp, journal); err != nil {
			return nil, err
		}
	}
	if kp == nil || kp.OwnCPU {
		for _, s := range n.Sockets() {
			x.nics = append(x.nics, s)
		}
	}
	if kp == nil {
		return x, nil
	}
	if kp.OwnCPU {
		if x.spinner, err = startCPUPoller(polledNAPIs(x.napis), kp.CPU); err != nil {
			return nil, err
		}
		return x, nil
	}
	busy := kp.BusyPoll
	for i, s := range n.Sockets() {
		p, err := uring.NewPoller(uring.NAPI{IDs: x.napis[i], BusyPoll: busy, Prefer: true})
		if err != nil {
			return nil, fmt.Errorf("kernel busy polling of queue %d: %w", i, err)
		}
		x.pollers = append(x.pollers, p)
		x.nics = append(x.nics, polledSocket{Socket: s, p: p})
	}
	return x, nil
}

// watchNIC starts the NIC's link watch, on the device the sockets are
// bound to (one of the same name made later is another).
func (x *xdpSockets) watchNIC() (err error) {
	if x.ns, err = netns.Open(""); err != nil {
		return err
	}
	x.watch, err = x.ns.WatchLink(x.nic.Ifindex())
	return err
}

// gone is closed once the NIC has left this namespace: deleted, or moved.
func (x *xdpSockets) gone() <-chan struct{} { return x.watch.Gone() }

// tuneNAPIs finds ifname's NAPI instances, which exist once the XDP program
// is attached (a veth makes them for XDP), gives each queue its ids, and
// sets kp's defer-hard-irqs and gro-flush-timeout on the instances the
// queues' pollers poll, recorded in x.napiCh and first in the NIC's
// journal; x.was keeps those. An instance no socket's queue is on (fewer
// queues than instances) is left alone: deferred, its frames for the host
// would wait for the timer, as nothing busy-polls it. The netdev family
// has napi-set since 6.13, as io_uring has the static NAPI ids the
// pollers need, so there is no older way (sysfs) to fall back on.
func (x *xdpSockets) tuneNAPIs(ifname string, queues int, kp KernelPoll, journal func(ifindex int) *napi.Journal) error {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return err
	}
	if x.napiC, err = napi.Dial(); err != nil {
		return err
	}
	x.napiCh = napi.NewChanges(x.napiC).UseJournal(journal(ifi.Index))
	if x.was, err = x.napiC.List(ifi.Index); err != nil {
		return err
	}
	if len(x.was) == 0 {
		return fmt.Errorf("%s: %w to busy-poll", ifname, napi.ErrNoInstances)
	}
	x.napis = queueNAPIs(x.was, queues)
	polled := polledNAPIs(x.napis)
	x.was = slices.DeleteFunc(x.was, func(in napi.NAPI) bool { return !slices.Contains(polled, in.ID) })
	for _, in := range x.was {
		a := napi.Attrs{DeferHardIRQs: new(kp.DeferHardIRQs), GROFlushTimeout: new(kp.GROFlushTimeout)}
		if err := x.napiCh.Set(in.ID, a); err != nil {
			return fmt.Errorf("setting defer-hard-irqs and gro-flush-timeout of NAPI %d: %w", in.ID, err)
		}
	}
	return nil
}

// queueNAPIs are the NAPI ids each queue's poller busy-polls. A veth links
// no queue to its NAPI (netdev queue-get reports id 0), but makes one
// instance per RX queue, in queue order, so the ids sorted are the queues';
// a device with fewer instances than queues has each poller poll them all.
func queueNAPIs(list []napi.NAPI, queues int) [][]uint32 {
	var ids []uint32
	for _, in := range list {
		ids = append(ids, in.ID)
	}
	slices.Sort(ids)
	out := make([][]uint32, queues)
	for i := range out {
		if len(ids) >= queues {
			out[i] = ids[i : i+1]
		} else {
			out[i] = ids
		}
	}
	return out
}

// polledNAPIs are the NAPI ids any queue's poller busy-polls, each once, in
// order: those the CPU poller polls, and those tuneNAPIs defers.
func polledNAPIs(queues [][]uint32) []uint32 {
	var ids []uint32
	for _, q := range queues {
		ids = append(ids, q...)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// logNAPIs says what tuneNAPIs set, and what each instance had before
// (put back at exit; should tapfwd be killed, by the next run on the NIC
// or tapfwd down, from the journal).
func (x *xdpSockets) logNAPIs(log *slog.Logger, kp KernelPoll) {
	if x.napiCh == nil {
		return
	}
	var was []string
	for _, in := range x.was {
		was = append(was, fmt.Sprintf("%d:%d/%v", in.ID, in.DeferHardIRQs, in.GROFlushTimeout))
	}
	log.Info("NIC NAPI instances deferred for kernel busy polling, restored at exit", "defer_hard_irqs", kp.DeferHardIRQs,
		"gro_flush_timeout", kp.GROFlushTimeout.String(), "were", strings.Join(was, " "))
	if x.spinner != nil {
		log.Info("busy-polling the NIC's NAPI instances from a thread of its own", "thread", cpuPollerName, "cpu", x.spinner.cpu)
	}
}

// progID is the attached program's kernel id, 0 when unknown.
func (x *xdpSockets) progID() int {
	id, err := x.nic.Program().ID()
	if err != nil {
		return 0
	}
	return int(id)
}

// logCounters logs each socket's AF_XDP counters, for the totals at exit.
func (x *xdpSockets) logCounters(log *slog.Logger) {
	for _, s := range x.nic.Sockets() {
		c, err := s.Counters()
		if err != nil {
			continue
		}
		k := c.Kernel
		log.Info("AF_XDP totals", "queue", s.Queue(), "rx_frames", c.RXFrames, "tx_dropped", c.TXDropped,
			"refused", fmt.Sprintf("%+v", c.Refused), "rx_dropped", k.Rx_dropped, "rx_invalid_descs", k.Rx_invalid_descs,
			"tx_invalid_descs", k.Tx_invalid_descs, "rx_ring_full", k.Rx_ring_full,
			"rx_fill_ring_empty_descs", k.Rx_fill_ring_empty_descs, "tx_ring_empty_descs", k.Tx_ring_empty_descs)
	}
}

// close puts the NAPI settings back while the instances still exist (a
// veth drops them with the program), then closes the pollers and the
// sockets and detaches the program.
func (x *xdpSockets) close() error {
	var errs []error
	if x.spinner != nil {
		errs = append(errs, x.spinner.close())
	}
	if x.napiCh != nil {
		errs = append(errs, x.napiCh.Restore())
	}
	if x.napiC != nil {
		errs = append(errs, x.napiC.Close())
	}
	for _, p := range x.pollers {
		errs = append(errs, p.Close())
	}
	if x.watch != nil {
		errs = append(errs, x.watch.Close())
	}
	if x.ns != nil {
		errs = append(errs, x.ns.Close())
	}
	return errors.Join(append(errs, x.nic.Close())...)
}
