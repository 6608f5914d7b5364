package throughputview

import (
	"fmt"

	"github.com/tapfwd/tapfwd/bench/cost"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/throughput"
)

// peerSection is each tapfwd configuration against the best userspace
// peer that ran on each workload (the naive forwarder or Open vSwitch),
// with what each lost on the way: TCP retransmits, UDP loss. None when no
// peer ran.
func (r Report) peerSection() (report.Section, bool) {
	s := report.Section{
		Title: "Against the best userspace peer: tapfwd's throughput over the peer's that delivered most on the workload " +
			"(ratio of the medians, bootstrap 95% interval), and what each lost: TCP retransmits (sender, median per run) or UDP loss",
		Head: []string{"workload", "config", "x best peer [95% CI]", "peer", "retransmits / loss %", "peer's"},
	}
	for _, w := range r.Workloads {
		for _, c := range r.ranConfigs() {
			cell := r.Cell(c.Name, w.Name)
			if cell == nil || cell.RatioToPeer == nil {
				continue
			}
			peer := r.Cell(cell.Peer, w.Name)
			s.Rows = append(s.Rows, []string{w.Name, c.Name, report.Est(cell.RatioToPeer), cell.Peer, lost(w, cell), lost(w, peer)})
		}
	}
	return s, len(s.Rows) > 0
}

// lost is a cell's retransmits (TCP) or loss in percent (UDP).
func lost(w throughput.Workload, c *throughput.Cell) string {
	switch {
	case c == nil || c.Value == nil:
		return "-"
	case w.Proto == "udp":
		return fmt.Sprintf("%.1f%%", c.LossPercent)
	}
	return fmt.Sprintf("%.0f", c.Retransmits)
}

// floorSection is the floor as a row on each TCP workload: what the
// run's own threads of an ideal userspace forwarder would pay here (two
// copies per byte at the copy bandwidth measured at the start), beside
// what each userspace forwarder's own threads paid, and the whole
// machine's figure of the floor: the bridge's plus the two copies. None
// in a report without the copy bandwidth or cost figures.
func (r Report) floorSection() (report.Section, bool) {
	bw := r.Settings.CopyBandwidth
	floor := cost.Floor(bw)
	s := report.Section{
		Title: fmt.Sprintf("The floor: two copies per byte at %.1f GB/s (one thread, measured at the start) cost %.4f CPU seconds per Gbit; "+
			"the run's own threads (the forwarder's processes) per Gbit delivered against it, and the whole machine's", bw/1e9, floor),
		Head: []string{"workload", "config", "own threads " + throughput.PerGbit, "x floor", "machine " + throughput.PerGbit},
	}
	for _, w := range r.Workloads {
		if w.Unit != throughput.Gbps || floor == 0 {
			continue
		}
		machine := "-"
		if br := r.Cell(throughput.Bridge, w.Name); br != nil && br.Cost != nil {
			machine = report.Num(br.Cost.Machine.Median + floor)
		}
		s.Rows = append(s.Rows, []string{w.Name, "floor", report.Num(floor), "1", machine})
		for _, c := range r.ranConfigs() {
			cell := r.Cell(c.Name, w.Name)
			if !report.Userspace(c.Kind) || cell == nil || cell.Cost == nil || cell.Cost.Forwarder <= 0 {
				continue
			}
			s.Rows = append(s.Rows, []string{w.Name, c.Name, report.Num(cell.Cost.Forwarder),
				fmt.Sprintf("%.2f", cell.Cost.Forwarder/floor), report.Num(cell.Cost.Machine.Median)})
		}
	}
	s.Notes = []string{"x floor: how far a forwarder's own threads are from two copies per byte; system calls, headers, wake-ups and the kernel's paths come on top of the copies."}
	return s, len(s.Rows) > 0
}
