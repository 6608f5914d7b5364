package metrics

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestXDPRingMetrics: each AF_XDP socket's XDP_STATISTICS and afxdp's
// refusals become one counter per queue and event, linted; a failed read counts as a scrape
// error and keeps what was read.
func TestXDPRingMetrics(t *testing.T) {
	var readErr error
	c := NewCollector(Source{TAP: "tap0", NIC: "eth1", XDPRings: func() ([]XDPRing, error) {
		return []XDPRing{{Queue: 0, RxDropped: 1, RxInvalidDescs: 2, TxInvalidDescs: 3, RxRingFull: 4, RxFillRingEmptyDescs: 5, TxRingEmptyDescs: 6,
			RefusedRxDescs: 8, RefusedCompletions: 9, RefusedRingIndex: 10, FillRingFull: 11, Oversize: 12},
			{Queue: 1, RxRingFull: 7}}, readErr
	}})
	problems, err := testutil.CollectAndLint(c, "tapfwd_xdp_ring_events_total")
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	want := map[string]float64{
		"0 rx_dropped": 1, "0 rx_invalid_descs": 2, "0 tx_invalid_descs": 3, "0 rx_ring_full": 4, "0 rx_fill_ring_empty_descs": 5, "0 tx_ring_empty_descs": 6,
		"0 refused_rx_descs": 8, "0 refused_completions": 9, "0 refused_ring_index": 10, "0 fill_ring_full": 11, "0 oversize": 12,
		"1 refused_rx_descs": 0, "1 refused_completions": 0, "1 refused_ring_index": 0, "1 fill_ring_full": 0, "1 oversize": 0,
		"1 rx_dropped": 0, "1 rx_invalid_descs": 0, "1 tx_invalid_descs": 0, "1 rx_ring_full": 7, "1 rx_fill_ring_empty_descs": 0, "1 tx_ring_empty_descs": 0,
	}
	for _, fail := range []bool{false, true} {
		if fail {
			readErr = errors.New("getsockopt: bad file descriptor")
		}
		got, scrapeErrors := xdpRingSeries(t, c)
		if len(got) != len(want) {
			t.Errorf("failed read %v: %d series %v, want %d", fail, len(got), got, len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("failed read %v: queue/event %s = %v, want %v", fail, k, got[k], v)
			}
		}
		if wantErrs := map[bool]float64{false: 0, true: 1}[fail]; scrapeErrors != wantErrs {
			t.Errorf("failed read %v: tapfwd_scrape_errors %v, want %v", fail, scrapeErrors, wantErrs)
		}
	}
}

// xdpRingSeries gathers c: "queue event" -> value of the
// tapfwd_xdp_ring_events_total series of device eth1, and the scrape errors.
func xdpRingSeries(t *testing.T, c *Collector) (map[string]float64, float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got, errs := map[string]float64{}, -1.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "tapfwd_scrape_errors":
				errs = m.GetGauge().GetValue()
			case "tapfwd_xdp_ring_events_total":
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				if l["device"] == "eth1" {
					got[l["queue"]+" "+l["event"]] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return got, errs
}
