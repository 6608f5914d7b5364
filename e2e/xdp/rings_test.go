package xdp

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/metrics"
)

// TestRingMetrics: with tapfwd stopped (SIGSTOP), 10,000 frames fill its
// AF_XDP socket's RX ring (2048 entries) and drain its fill ring, so the
// kernel drops the rest; once it runs again, /metrics shows each
// XDP_STATISTICS counter of queue 0, the drops among them, and they are
// what tapfwd_drops_total's kernel_ring counts. afxdp's own checks
// (refused_*, fill_ring_full, oversize) are on the page too, and refuse
// nothing the real kernel hands back.
func TestRingMetrics(t *testing.T) {
	const frames = 10_000
	bed, fw := start(t)
	ring := func(event string) float64 {
		return prom.Sample(prom.Scrape(t, bed), "tapfwd_xdp_ring_events_total", `device="`+bed.NIC+`"`, `queue="0"`, `event="`+event+`"`)
	}
	page := prom.Scrape(t, bed)
	checks := []string{"refused_rx_descs", "refused_completions", "refused_ring_index", "fill_ring_full", "oversize"}
	for _, e := range append([]string{"rx_dropped", "rx_invalid_descs", "tx_invalid_descs", "rx_ring_full", "rx_fill_ring_empty_descs", "tx_ring_empty_descs"}, checks...) {
		if !strings.Contains(page, `tapfwd_xdp_ring_events_total{device="`+bed.NIC+`",event="`+e+`",queue="0"} `) {
			t.Errorf("/metrics lacks tapfwd_xdp_ring_events_total{queue=0,event=%s}", e)
		}
	}
	before := prom.ParseCounts(page, bed)
	dropsBefore := ring("rx_dropped") + ring("rx_ring_full")
	if err := syscall.Kill(fw.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 60)
	copy(frame, kernel.LinkMAC(t, bed.LabNS, bed.LabIf))
	copy(frame[6:], kernel.LinkMAC(t, bed.WireNS, bed.WireIf))
	frame[12], frame[13] = 0x88, 0xb5 // IEEE 802 local experimental EtherType
	raw := traffic.WireSocket(t, bed, false)
	for i := 0; i < frames; i++ {
		if _, err := unix.Write(raw, frame); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if err := syscall.Kill(fw.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	d := prom.SettledCounts(t, bed, 5*time.Second).Sub(before)
	dropped := ring("rx_dropped") + ring("rx_ring_full") - dropsBefore
	t.Logf("rx_dropped %v, rx_ring_full %v, rx_fill_ring_empty_descs %v; kernel_ring +%v, NIC rx +%v",
		ring("rx_dropped"), ring("rx_ring_full"), ring("rx_fill_ring_empty_descs"), d.NICDrops[metrics.KernelRing], d.NICRx)
	if dropped < frames/2 {
		t.Errorf("rx_dropped + rx_ring_full moved by %v while %d frames met a stopped tapfwd, want most of them", dropped, frames)
	}
	if ring("rx_fill_ring_empty_descs") == 0 {
		t.Error("rx_fill_ring_empty_descs did not move: the kernel found the fill ring never empty")
	}
	if kr := d.NICDrops[metrics.KernelRing]; kr != dropped {
		t.Errorf("kernel_ring moved by %v, the ring counters by %v", kr, dropped)
	}
	for _, e := range checks {
		if v := ring(e); v != 0 {
			t.Errorf("%s = %v after the kernel's rings overflowed, want 0: afxdp refused what the kernel handed back", e, v)
		}
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit: %v\n%s", err, fw.Output())
	}
}
