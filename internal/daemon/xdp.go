package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/uring"
	"github.com/tapfwd/tapfwd/napi"
)

// kernelBusyPoll is how long one wait of a PollKernel worker has the
// kernel busy-poll its queue's NAPI before it sleeps.
const kernelBusyPoll = 50 * time.Microsecond

// xdpSockets are the AF_XDP side of the NIC: the program, one socket per
// queue and, with PollKernel, each queue's NAPI poller.
type xdpSockets struct {
	nic     *afxdp.NIC
	pollers []*uring.Poller
	napis   [][]uint32 // the NAPI ids queue i's poller busy-polls
	nics    []forward.NIC
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
// of its first queues; kernel gives each a NAPI poller.
func openXDP(ifname string, queues int, mode afxdp.Mode, kernel bool) (_ *xdpSockets, err error) {
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
	if kernel {
		if x.napis, err = queueNAPIs(ifname, queues); err != nil {
			return nil, err
		}
	}
	for i, s := range n.Sockets() {
		if !kernel {
			x.nics = append(x.nics, s)
			continue
		}
		p, err := uring.NewPoller(uring.NAPI{IDs: x.napis[i], BusyPoll: kernelBusyPoll, Prefer: true})
		if err != nil {
			return nil, fmt.Errorf("kernel busy polling of queue %d: %w", i, err)
		}
		x.pollers = append(x.pollers, p)
		x.nics = append(x.nics, polledSocket{Socket: s, p: p})
	}
	return x, nil
}

// queueNAPIs are the NAPI ids each queue's poller busy-polls. A veth links
// no queue to its NAPI (netdev queue-get reports id 0), but makes one
// instance per RX queue, in queue order, so the ids sorted are the queues';
// a device with fewer instances than queues has each poller poll them all.
func queueNAPIs(ifname string, queues int) ([][]uint32, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	c, err := napi.Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	list, err := c.List(ifi.Index)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: %w to busy-poll", ifname, napi.ErrNoInstances)
	}
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
	return out, nil
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

// close closes the pollers, the sockets, and detaches the program.
func (x *xdpSockets) close() error {
	var errs []error
	for _, p := range x.pollers {
		errs = append(errs, p.Close())
	}
	return errors.Join(append(errs, x.nic.Close())...)
}
