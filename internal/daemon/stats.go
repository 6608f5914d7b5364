package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tapfwd/tapfwd/forward"
)

// logStats logs each queue's rates over the last interval until ctx ends.
func logStats(ctx context.Context, log *slog.Logger, fw *forward.Forwarder, every time.Duration) {
	type snap struct{ nicRx, nicRxB, tapRx, tapRxB, drops uint64 }
	read := func(q *forward.QueueWorker) snap {
		c := &q.Counters
		var d uint64
		for i := range c.NICToTAP.Drops {
			d += c.NICToTAP.Drops[i].Load() + c.TAPToNIC.Drops[i].Load()
		}
		return snap{c.NICToTAP.Rx.Packets.Load(), c.NICToTAP.Rx.Bytes.Load(), c.TAPToNIC.Rx.Packets.Load(), c.TAPToNIC.Rx.Bytes.Load(), d}
	}
	prev := make([]snap, len(fw.QueueWorkers()))
	for i, q := range fw.QueueWorkers() {
		prev[i] = read(q)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			sec := now.Sub(last).Seconds()
			last = now
			for i, q := range fw.QueueWorkers() {
				cur := read(q)
				p := prev[i]
				prev[i] = cur
				log.Info("stats", "queue", q.ID,
					"nic_to_tap_pps", int((float64(cur.nicRx-p.nicRx))/sec),
					"nic_to_tap_mbps", fmt.Sprintf("%.1f", float64(cur.nicRxB-p.nicRxB)*8/sec/1e6),
					"tap_to_nic_pps", int(float64(cur.tapRx-p.tapRx)/sec),
					"tap_to_nic_mbps", fmt.Sprintf("%.1f", float64(cur.tapRxB-p.tapRxB)*8/sec/1e6),
					"drops", cur.drops-p.drops)
			}
		}
	}
}

func logTotals(log *slog.Logger, fw *forward.Forwarder) {
	for _, q := range fw.QueueWorkers() {
		c := &q.Counters
		var drops uint64
		for i := range c.NICToTAP.Drops {
			drops += c.NICToTAP.Drops[i].Load() + c.TAPToNIC.Drops[i].Load()
		}
		_, kdrops, _ := q.KernelStats()
		log.Info("queue totals", "queue", q.ID,
			"nic_rx_packets", c.NICToTAP.Rx.Packets.Load(), "tap_tx_packets", c.NICToTAP.Tx.Packets.Load(),
			"tap_rx_packets", c.TAPToNIC.Rx.Packets.Load(), "nic_tx_packets", c.TAPToNIC.Tx.Packets.Load(),
			"drops", drops, "errors", c.NICToTAP.Errors.Load()+c.TAPToNIC.Errors.Load(), "kernel_drops", kdrops)
	}
}
