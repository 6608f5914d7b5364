package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/tapfwd/tapfwd/netns"
)

// TestBadLabelKeepsScrape serves a page whose VM ports and TAP have names
// that are not valid UTF-8 (anyone with CAP_NET_ADMIN in the TAP's
// namespace can make one): the scrape still succeeds, with every other
// series, and two bad names stay two series.
func TestBadLabelKeepsScrape(t *testing.T) {
	fw, _, _ := fakeForwarder(t)
	src := Source{TAP: "tap\xfe0", NIC: "eth1", Forwarder: fw,
		LinkStats: func(string) (netns.LinkStats, error) { return netns.LinkStats{RxPackets: 7}, nil },
		VMPorts:   func() ([]string, error) { return []string{"vm\xff", "vm\xfe", `vm\xff`, "tfwvm0"}, nil }}
	srv := httptest.NewServer(Handler(NewRegistry(NewCollector(src)), Limits{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	page := string(body)
	for _, want := range []string{
		`tapfwd_drops_total{device="eth1",queue="0",reason="kernel_ring"} 0`,
		`tapfwd_packets_total{device="eth1",direction="rx",queue="0"} 0`,
		`tapfwd_vm_port_packets_total{device="tap\\xfe0 (not UTF-8)",direction="rx",port="tfwvm0"} 7`,
		`tapfwd_vm_port_packets_total{device="tap\\xfe0 (not UTF-8)",direction="rx",port="vm\\xff (not UTF-8)"} 7`,
		`tapfwd_vm_port_packets_total{device="tap\\xfe0 (not UTF-8)",direction="rx",port="vm\\xfe (not UTF-8)"} 7`,
		// A real name that reads like an escaped one keeps its own series.
		`tapfwd_vm_port_packets_total{device="tap\\xfe0 (not UTF-8)",direction="rx",port="vm\\xff"} 7`,
		`tapfwd_tap_info{device="tap\\xfe0 (not UTF-8)"`,
		`tapfwd_netdev_drops_total{device="eth1",direction="rx"} 0`,
		"tapfwd_build_info{",
		"go_goroutines ",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// No series was lost: as many scrape errors as with good names (the
	// socketpair standing in for the NIC has no PACKET_STATISTICS).
	good := src
	good.TAP, good.VMPorts = "tap0", func() ([]string, error) { return []string{"vm0"}, nil }
	mfs, err := NewRegistry(NewCollector(good)).Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("tapfwd_scrape_errors %v\n", gaugeValue(mfs, "tapfwd_scrape_errors"))
	if !strings.Contains(page, want) {
		t.Errorf("the page lacks %q", want)
	}
	if t.Failed() {
		t.Logf("page:\n%s", page)
	}
}

func gaugeValue(mfs []*dto.MetricFamily, name string) float64 {
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
