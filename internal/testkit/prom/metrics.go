package prom

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/metrics"
)

// Scrape returns tapfwd's /metrics page from bed's fwd namespace
// (testkit.MetricsAddr); it fails t when the page cannot be had.
func Scrape(t testing.TB, bed *testbed.Bed) string {
	t.Helper()
	code, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/metrics")
	if err != nil || code != 200 {
		t.Fatalf("scrape: %d %v", code, err)
	}
	return body
}

// Sample sums the series of metric name in the exposition text whose
// labels contain every want pair (e.g. `device="w1"`).
func Sample(text, name string, want ...string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

// Counts are tapfwd's counters from one scrape, summed over queues.
type Counts struct {
	NICRx, TAPTx, TAPRx, NICTx float64
	Segments                   float64
	NICErrors, TAPErrors       float64
	// Drops by reason, of frames received from the NIC and from the TAP.
	NICDrops, TAPDrops map[string]float64
	// The kernel's netdev drop counters tapfwd exports.
	NICNetdevRxDrop, NICNetdevTxDrop, TAPNetdevRxDrop, TAPNetdevTxDrop float64
	Goroutines                                                         float64
}

// ParseCounts reads Counts for bed's NIC and TAP from a /metrics page.
func ParseCounts(text string, bed *testbed.Bed) Counts {
	nic, tap := `device="`+bed.NIC+`"`, `device="`+bed.LabIf+`"`
	c := Counts{
		NICRx:           Sample(text, "tapfwd_packets_total", nic, `direction="rx"`),
		TAPTx:           Sample(text, "tapfwd_packets_total", tap, `direction="tx"`),
		TAPRx:           Sample(text, "tapfwd_packets_total", tap, `direction="rx"`),
		NICTx:           Sample(text, "tapfwd_packets_total", nic, `direction="tx"`),
		Segments:        Sample(text, "tapfwd_segments_total"),
		NICErrors:       Sample(text, "tapfwd_errors_total", nic),
		TAPErrors:       Sample(text, "tapfwd_errors_total", tap),
		NICDrops:        map[string]float64{},
		TAPDrops:        map[string]float64{},
		NICNetdevRxDrop: Sample(text, "tapfwd_netdev_drops_total", nic, `direction="rx"`),
		NICNetdevTxDrop: Sample(text, "tapfwd_netdev_drops_total", nic, `direction="tx"`),
		TAPNetdevRxDrop: Sample(text, "tapfwd_netdev_drops_total", tap, `direction="rx"`),
		TAPNetdevTxDrop: Sample(text, "tapfwd_netdev_drops_total", tap, `direction="tx"`),
		Goroutines:      Sample(text, "go_goroutines"),
	}
	for _, r := range metrics.DropReasons() {
		reason := `reason="` + r + `"`
		c.NICDrops[r] = Sample(text, "tapfwd_drops_total", nic, reason)
		c.TAPDrops[r] = Sample(text, "tapfwd_drops_total", tap, reason)
	}
	return c
}

// Sub is a - b, counter by counter.
func (a Counts) Sub(b Counts) Counts {
	d := Counts{
		NICRx: a.NICRx - b.NICRx, TAPTx: a.TAPTx - b.TAPTx, TAPRx: a.TAPRx - b.TAPRx, NICTx: a.NICTx - b.NICTx,
		Segments:  a.Segments - b.Segments,
		NICErrors: a.NICErrors - b.NICErrors, TAPErrors: a.TAPErrors - b.TAPErrors,
		NICDrops: map[string]float64{}, TAPDrops: map[string]float64{},
		NICNetdevRxDrop: a.NICNetdevRxDrop - b.NICNetdevRxDrop, NICNetdevTxDrop: a.NICNetdevTxDrop - b.NICNetdevTxDrop,
		TAPNetdevRxDrop: a.TAPNetdevRxDrop - b.TAPNetdevRxDrop, TAPNetdevTxDrop: a.TAPNetdevTxDrop - b.TAPNetdevTxDrop,
		Goroutines: a.Goroutines - b.Goroutines,
	}
	for r, v := range a.NICDrops {
		d.NICDrops[r] = v - b.NICDrops[r]
	}
	for r, v := range a.TAPDrops {
		d.TAPDrops[r] = v - b.TAPDrops[r]
	}
	return d
}

// DropSum adds the drops of every reason in m but those named.
func DropSum(m map[string]float64, except ...string) float64 {
	var s float64
	for r, v := range m {
		skip := false
		for _, e := range except {
			skip = skip || r == e
		}
		if !skip {
			s += v
		}
	}
	return s
}

// NonZero formats the non-zero drops of m ("kernel_ring=12 oversize=1"),
// or "none".
func NonZero(m map[string]float64) string {
	var parts []string
	for _, r := range metrics.DropReasons() {
		if m[r] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", r, m[r]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// SettledCounts scrapes until tapfwd's packet counters stop moving (the
// frames still queued in the kernel have been forwarded or dropped), at
// most for limit.
func SettledCounts(t testing.TB, bed *testbed.Bed, limit time.Duration) Counts {
	t.Helper()
	deadline := time.Now().Add(limit)
	key := func(c Counts) [6]float64 {
		return [6]float64{c.NICRx, c.TAPTx, c.TAPRx, c.NICTx, DropSum(c.NICDrops), DropSum(c.TAPDrops)}
	}
	prev := ParseCounts(Scrape(t, bed), bed)
	for {
		time.Sleep(200 * time.Millisecond)
		cur := ParseCounts(Scrape(t, bed), bed)
		// Two equal scrapes also mean no batch was being published
		// while the second was taken: its counters agree with each other.
		if key(cur) == key(prev) || time.Now().After(deadline) {
			return cur
		}
		prev = cur
	}
}

// CountedDrops is every drop tapfwd exports: its own (kernel_ring
// included) and the kernel's TAP and NIC netdev drop counters.
func CountedDrops(t testing.TB, bed *testbed.Bed) int {
	t.Helper()
	m := Scrape(t, bed)
	return int(Sample(m, "tapfwd_drops_total") + Sample(m, "tapfwd_netdev_drops_total"))
}

// CheckBalance checks d, tapfwd's counters over a burst of sent frames
// from the wire with pings echo requests among them: every frame received
// from the NIC, and from the TAP, was transmitted on the other side or
// dropped under a reason (kernel_ring frames never reached tapfwd, so
// they are not among those received), and what reached the NIC's socket
// covers what was sent, the rest being the pings, ARP and neighbour
// discovery.
func (d Counts) CheckBalance(t testing.TB, sent, pings int) {
	t.Helper()
	kr := d.NICDrops[metrics.KernelRing]
	if got := d.TAPTx + DropSum(d.NICDrops, metrics.KernelRing); d.NICRx != got {
		t.Errorf("NIC -> TAP: received %.0f != transmitted %.0f + drops %.0f (%s)", d.NICRx, d.TAPTx, got-d.TAPTx, NonZero(d.NICDrops))
	}
	if got := d.NICTx + DropSum(d.TAPDrops); d.TAPRx != got {
		t.Errorf("TAP -> NIC: received %.0f != transmitted %.0f + drops %.0f (%s)", d.TAPRx, d.NICTx, got-d.NICTx, NonZero(d.TAPDrops))
	}
	if chatter := d.NICRx + kr - float64(sent); chatter < 0 || chatter > float64(4*pings+100) {
		t.Errorf("tapfwd received %.0f frames (+%.0f kernel_ring drops) from the NIC, the wire sent %d", d.NICRx, kr, sent)
	}
}
