package profile

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// page is a /metrics page of a tapfwd on NIC w1 and TAP tfwtap-x with
// two queues, as the Prometheus text format writes it: nicRx frames read
// from the NIC per queue in nicWakeups wake-ups, that many TAP writes
// less merged; 3 frames a wake-up from the TAP.
func page(nicRx, nicWakeups, merged float64) string {
	var b strings.Builder
	b.WriteString("# HELP tapfwd_packets_total Frames.\n# TYPE tapfwd_packets_total counter\n")
	for q := range 2 {
		fmt.Fprintf(&b, "tapfwd_packets_total{device=\"w1\",direction=\"rx\",queue=\"%d\"} %v\n", q, nicRx)
		fmt.Fprintf(&b, "tapfwd_packets_total{device=\"tfwtap-x\",direction=\"tx\",queue=\"%d\"} %v\n", q, nicRx-merged)
		fmt.Fprintf(&b, "tapfwd_packets_total{device=\"tfwtap-x\",direction=\"rx\",queue=\"%d\"} %v\n", q, 3*nicWakeups)
		fmt.Fprintf(&b, "tapfwd_packets_total{device=\"w1\",direction=\"tx\",queue=\"%d\"} %v\n", q, 3*nicWakeups)
	}
	b.WriteString("# HELP tapfwd_gro_merged_frames_total Merged.\n# TYPE tapfwd_gro_merged_frames_total counter\n")
	for q := range 2 {
		fmt.Fprintf(&b, "tapfwd_gro_merged_frames_total{device=\"w1\",queue=\"%d\"} %v\n", q, merged)
	}
	b.WriteString("# HELP tapfwd_gso_frames_total GSO.\n# TYPE tapfwd_gso_frames_total counter\n")
	fmt.Fprintf(&b, "tapfwd_gso_frames_total{device=\"w1\",queue=\"0\"} %v\n", nicRx/2)
	b.WriteString("# HELP tapfwd_batch_frames Frames per wake-up.\n# TYPE tapfwd_batch_frames histogram\n")
	for q := range 2 {
		// NIC: half the wake-ups find one frame, half 64 (less what
		// makes the sum); TAP: every wake-up 3 frames.
		for _, bk := range []struct {
			le  string
			nic float64
			tap float64
		}{{"1", nicWakeups / 2, 0}, {"2", nicWakeups / 2, 0}, {"4", nicWakeups / 2, 3 * nicWakeups / 3}, {"64", nicWakeups, nicWakeups}, {"+Inf", nicWakeups, nicWakeups}} {
			fmt.Fprintf(&b, "tapfwd_batch_frames_bucket{device=\"w1\",queue=\"%d\",le=\"%s\"} %v\n", q, bk.le, bk.nic)
			fmt.Fprintf(&b, "tapfwd_batch_frames_bucket{device=\"tfwtap-x\",queue=\"%d\",le=\"%s\"} %v\n", q, bk.le, bk.tap)
		}
		fmt.Fprintf(&b, "tapfwd_batch_frames_sum{device=\"w1\",queue=\"%d\"} %v\n", q, nicRx)
		fmt.Fprintf(&b, "tapfwd_batch_frames_count{device=\"w1\",queue=\"%d\"} %v\n", q, nicWakeups)
		fmt.Fprintf(&b, "tapfwd_batch_frames_sum{device=\"tfwtap-x\",queue=\"%d\"} %v\n", q, 3*nicWakeups)
		fmt.Fprintf(&b, "tapfwd_batch_frames_count{device=\"tfwtap-x\",queue=\"%d\"} %v\n", q, nicWakeups)
	}
	return b.String()
}

// TestBatches reads two scrapes and takes what happened between them,
// summed over the queues: 6000 frames from the NIC in 200 wake-ups, 4000
// of them merged, so a TAP write per 3 frames; 3 frames a wake-up from
// the TAP, a write each.
func TestBatches(t *testing.T) {
	a, err := parseMetrics(page(1000, 100, 500))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseMetrics(page(4000, 200, 2500))
	if err != nil {
		t.Fatal(err)
	}
	bs := batches(a, b, "w1", "tfwtap-x")
	if len(bs) != 2 {
		t.Fatalf("%+v", bs)
	}
	w2l, l2w := bs[0], bs[1]
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	if w2l.Direction != "wire->lab" || w2l.Frames != 6000 || w2l.Wakeups != 200 || !near(w2l.FramesPerWakeup, 30) || w2l.Merged != 4000 ||
		!near(w2l.MergedPerWakeup, 20) || w2l.Written != 2000 || !near(w2l.WritesPerFrame, 1.0/3) || w2l.GSO != 1500 {
		t.Errorf("wire->lab: %+v", w2l)
	}
	if fmt.Sprint(w2l.Histogram) != "[{1 100} {64 100}]" {
		t.Errorf("wire->lab histogram: %v", w2l.Histogram)
	}
	if l2w.Direction != "lab->wire" || l2w.Frames != 600 || !near(l2w.FramesPerWakeup, 3) || l2w.WritesPerFrame != 1 || l2w.Merged != 0 ||
		fmt.Sprint(l2w.Histogram) != "[{4 200}]" {
		t.Errorf("lab->wire: %+v", l2w)
	}
	if _, err := parseMetrics("tapfwd_packets_total{device=\"w1\" 1\n"); err == nil {
		t.Error("a broken page parsed")
	}
	if bs := batches(metrics{}, b, "w1", "tfwtap-x"); bs[0].Frames != 8000 || bs[0].Wakeups != 400 {
		t.Errorf("from an empty first scrape: %+v", bs[0])
	}
}
