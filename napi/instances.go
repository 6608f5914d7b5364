package napi

import (
	"net"
	"strconv"
	"time"
)

// Instance is a NAPI instance with the names around it: its device, the
// queues it serves and its kthread.
type Instance struct {
	ID      uint32 `json:"id"`
	Dev     string `json:"dev"`
	Ifindex int    `json:"ifindex"`
	IRQ     *int   `json:"irq,omitempty"`
	// Queues served, e.g. "rx0"; empty for a veth, whose queues name no NAPI.
	Queues []string `json:"queues"`
	// Threaded is absent on kernels without per-NAPI threaded (before 6.17).
	Threaded            string        `json:"threaded,omitempty"`
	Kthread             *Kthread      `json:"kthread,omitempty"`
	DeferHardIRQs       uint32        `json:"defer_hard_irqs"`
	GROFlushTimeoutNS   time.Duration `json:"gro_flush_timeout_ns"`
	IRQSuspendTimeoutNS time.Duration `json:"irq_suspend_timeout_ns"`
}

// Instances describes the NAPI instances of device ifindex (0: every
// device), the queues they serve and their kthreads.
func (c *Client) Instances(ifindex int) ([]Instance, error) {
	list, err := c.List(ifindex)
	if err != nil {
		return nil, err
	}
	queues, err := c.Queues(ifindex)
	if err != nil {
		return nil, err
	}
	served := map[uint32][]string{}
	for _, q := range queues {
		if q.NAPIID != 0 {
			served[q.NAPIID] = append(served[q.NAPIID], q.Type.String()+strconv.Itoa(q.ID))
		}
	}
	names := map[int]string{}
	if ifs, err := net.Interfaces(); err == nil {
		for _, ifi := range ifs {
			names[ifi.Index] = ifi.Name
		}
	}
	out := make([]Instance, 0, len(list))
	for _, n := range list {
		out = append(out, instance(n, names[n.Ifindex], served[n.ID], c.Features().Threaded))
	}
	return out, nil
}

func instance(n NAPI, dev string, queues []string, threaded bool) Instance {
	r := Instance{
		ID: n.ID, Dev: dev, Ifindex: n.Ifindex, Queues: queues,
		DeferHardIRQs: n.DeferHardIRQs, GROFlushTimeoutNS: n.GROFlushTimeout, IRQSuspendTimeoutNS: n.IRQSuspendTimeout,
	}
	if r.Dev == "" {
		r.Dev = "if" + strconv.Itoa(n.Ifindex)
	}
	if r.Queues == nil {
		r.Queues = []string{}
	}
	if n.IRQ >= 0 {
		r.IRQ = new(n.IRQ)
	}
	if threaded {
		r.Threaded = n.Threaded.String()
	}
	if n.PID != 0 {
		r.Kthread = &Kthread{PID: n.PID}
		// The kthread may stop between napi-get and here: show the pid.
		if k, err := ReadKthread(n.PID); err == nil {
			r.Kthread = &k
		}
	}
	return r
}
