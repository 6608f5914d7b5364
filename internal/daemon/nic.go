package daemon

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afpacket"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/tap"
)

// nicSockets are the queue workers' packet sockets on the NIC, and how
// they were opened, to open them again when the NIC comes back.
type nicSockets struct {
	rc    afpacket.Config
	socks []*afpacket.Socket
}

// openNIC opens the packet sockets, asking the NIC for the TAP's, the
// host port's and the VM ports' MACs (a real NIC filters unicast by
// address), with StrictMAC taking no other unicast, and the vhost-user
// ports' own senders.
func (d *Daemon) openNIC() error {
	rc := afpacket.Config{Ifname: d.c.NIC.Name, Queues: d.c.TAP.Queues, Batch: d.c.Workers.Batch,
		MACs: append(d.tapMACs(), d.ports.vhostMACs()...), Promisc: d.c.NIC.Promisc}
	if d.c.Workers.StrictMAC {
		rc.FilterMACs = rc.MACs
	}
	socks, err := afpacket.Open(rc)
	if err != nil {
		return err
	}
	d.nic = nicSockets{rc: rc, socks: socks}
	d.undo.closing("closing the packet sockets", func() error { return closeAll(d.nic.socks) })
	return d.openGuestSenders()
}

func closeAll(socks []*afpacket.Socket) error {
	var errs []error
	for _, s := range socks {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// reattach waits for the NIC to come back and gives the workers new
// sockets on it.
func (d *Daemon) reattach(ctx context.Context) error {
	d.log.Warn("NIC went away: waiting for it to come back (--wait-nic)", "nic", d.c.NIC.Name)
	if err := closeAll(d.nic.socks); err != nil {
		d.log.Warn("closing the old packet sockets", "err", err)
	}
	socks, err := reopen(ctx, d.nic.rc)
	if err != nil {
		return err
	}
	d.nic.socks = socks
	if err := d.fw.Reattach(nics(socks)); err != nil {
		return err
	}
	d.log.Info("NIC is back: forwarding again", "nic", d.c.NIC.Name)
	return nil
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

// workerCPUs gives one CPU per worker (-1: unpinned): list wraps; nil
// takes the CPUs this process may run on, in order; an empty list pins
// nothing.
func workerCPUs(list []int, workers int) ([]int, error) {
	out := make([]int, workers)
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
