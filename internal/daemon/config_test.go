package daemon

import (
	"testing"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/tap"
)

// TestWithDefaults: the zero settings Open fills in, each from its one
// home (forward.DefaultBatch, DefaultBusyPoll), and given ones kept.
func TestWithDefaults(t *testing.T) {
	c := Config{Workers: Workers{Poll: PollKernel}}.withDefaults()
	if c.TAP.Queues != 1 || c.Workers.Batch != forward.DefaultBatch || c.Workers.KernelPoll.BusyPoll != DefaultBusyPoll {
		t.Errorf("defaults: queues %d, batch %d, busy poll %v", c.TAP.Queues, c.Workers.Batch, c.Workers.KernelPoll.BusyPoll)
	}
	c = Config{TAP: tap.Config{Queues: 3}, Workers: Workers{Batch: 8, KernelPoll: KernelPoll{OwnCPU: true}}}.withDefaults()
	if c.TAP.Queues != 3 || c.Workers.Batch != 8 || c.Workers.KernelPoll.BusyPoll != 0 {
		t.Errorf("given values changed: queues %d, batch %d, busy poll %v (own CPU: none)", c.TAP.Queues, c.Workers.Batch, c.Workers.KernelPoll.BusyPoll)
	}
}
