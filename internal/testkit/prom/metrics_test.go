package prom

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/metrics"
	"github.com/tapfwd/tapfwd/netns"
)

// page is the /metrics page tapfwd's collector serves for a forwarder of
// two queues on NIC w1 and TAP lab0 whose counters are those set here,
// with netdev drops of 3 and 4 on the NIC and 5 and 6 on the TAP.
func page(t *testing.T) string {
	t.Helper()
	var taps []forward.Endpoint
	var nics []forward.NIC
	for range 2 {
		p, err := forwardtest.NewPair(8)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		taps, nics = append(taps, p.TAP), append(nics, p.NIC)
	}
	fw, err := forward.New(taps, nics, forward.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	for i, q := range fw.QueueWorkers() {
		c, k := &q.Counters, uint64(i+1)
		c.NICToTAP.Rx.Packets.Add(100 * k)
		c.NICToTAP.Tx.Packets.Add(90 * k)
		c.NICToTAP.Drops[forward.DropOversize].Add(4 * k)
		c.NICToTAP.Drops[forward.DropBadHdr].Add(6 * k)
		c.NICToTAP.Errors.Add(k)
		c.TAPToNIC.Rx.Packets.Add(50 * k)
		c.TAPToNIC.Tx.Packets.Add(47 * k)
		c.TAPToNIC.Drops[forward.DropNICBusy].Add(3 * k)
		c.Segments.Add(7 * k)
	}
	src := metrics.Source{TAP: "lab0", NIC: "w1", Forwarder: fw, LinkStats: func(dev string) (netns.LinkStats, error) {
		if dev == "w1" {
			return netns.LinkStats{RxDropped: 3, TxDropped: 4}, nil
		}
		return netns.LinkStats{RxDropped: 5, TxDropped: 6}, nil
	}}
	srv := httptest.NewServer(metrics.Handler(metrics.NewRegistry(metrics.NewCollector(src)), metrics.Limits{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// TestParseCounts reads tapfwd's real exposition (its collector over a
// forwarder whose counters the test set) into Counts summed over both
// queues, so a metric or label renamed in metrics shows here.
func TestParseCounts(t *testing.T) {
	text := page(t)
	c := ParseCounts(text, &testbed.Bed{NIC: "w1", LabIf: "lab0"})
	got := fmt.Sprintf("%v %v %v %v seg %v err %v %v nd %v %v %v %v",
		c.NICRx, c.TAPTx, c.TAPRx, c.NICTx, c.Segments, c.NICErrors, c.TAPErrors,
		c.NICNetdevRxDrop, c.NICNetdevTxDrop, c.TAPNetdevRxDrop, c.TAPNetdevTxDrop)
	if want := "300 270 150 141 seg 21 err 3 0 nd 3 4 5 6"; got != want {
		t.Errorf("Counts: %s, want %s\n%s", got, want, text)
	}
	if NonZero(c.NICDrops) != "oversize=12 bad_vnet_hdr=18" || NonZero(c.TAPDrops) != "nic_busy=9" {
		t.Errorf("drops: NIC %s, TAP %s", NonZero(c.NICDrops), NonZero(c.TAPDrops))
	}
	if len(c.NICDrops) != len(metrics.DropReasons()) || c.Goroutines < 1 {
		t.Errorf("NIC drops by %d reasons, want %d; goroutines %v", len(c.NICDrops), len(metrics.DropReasons()), c.Goroutines)
	}
	var r testkit.Recorder
	r.TB = t
	c.CheckBalance(&r, 300, 0)
	if len(r.Errs) != 0 {
		t.Errorf("balanced counts: %q", r.Errs)
	}
}

// TestSample sums the series of one metric whose labels contain every
// pair asked, and only that metric's (not one whose name it begins).
func TestSample(t *testing.T) {
	text := `# HELP x_total A counter.
x_total{device="w1",queue="0"} 2
x_total{device="w1",queue="1"} 3.5
x_total{device="w2",queue="0"} 100
x_total_more{device="w1"} 1000
x_totals 10000
x_total 7
`
	for _, c := range []struct {
		want  float64
		pairs []string
	}{
		{112.5, nil},
		{5.5, []string{`device="w1"`}},
		{2, []string{`device="w1"`, `queue="0"`}},
		{0, []string{`device="w3"`}},
	} {
		if got := Sample(text, "x_total", c.pairs...); got != c.want {
			t.Errorf("Sample(x_total, %v) = %v, want %v", c.pairs, got, c.want)
		}
	}
}

// TestCheckBalance: counts where every frame is transmitted or dropped
// pass; a frame lost without a reason, on either side, and traffic the
// wire did not send fail.
func TestCheckBalance(t *testing.T) {
	ok := Counts{NICRx: 100, TAPTx: 90, TAPRx: 20, NICTx: 18,
		NICDrops: map[string]float64{"oversize": 10, metrics.KernelRing: 5},
		TAPDrops: map[string]float64{"nic_busy": 2}}
	for _, c := range []struct {
		name string
		mod  func(*Counts)
		want string
	}{
		{"balanced", func(*Counts) {}, ""},
		{"lost toward the TAP", func(c *Counts) { c.TAPTx-- }, "NIC -> TAP: received 100 != transmitted 89 + drops 10 (kernel_ring=5 oversize=10)"},
		{"lost toward the NIC", func(c *Counts) { c.TAPRx++ }, "TAP -> NIC: received 21 != transmitted 18 + drops 2 (nic_busy=2)"},
		{"fewer than sent", func(c *Counts) { c.NICRx, c.TAPTx = 50, 40 }, "tapfwd received 50 frames (+5 kernel_ring drops) from the NIC, the wire sent 105"},
	} {
		d := ok
		d.NICDrops, d.TAPDrops = ok.NICDrops, ok.TAPDrops
		c.mod(&d)
		r := &testkit.Recorder{TB: t}
		d.CheckBalance(r, 105, 0)
		if got := strings.Join(r.Errs, "; "); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestSub and DropSum: differences counter by counter, drop sums with
// some reasons left out.
func TestSub(t *testing.T) {
	a := Counts{NICRx: 10, Goroutines: 9, NICDrops: map[string]float64{"oversize": 4, "nic_busy": 2}, TAPDrops: map[string]float64{}}
	b := Counts{NICRx: 3, Goroutines: 8, NICDrops: map[string]float64{"oversize": 1}, TAPDrops: map[string]float64{}}
	d := a.Sub(b)
	if d.NICRx != 7 || d.Goroutines != 1 || d.NICDrops["oversize"] != 3 || d.NICDrops["nic_busy"] != 2 {
		t.Errorf("Sub: %+v", d)
	}
	if DropSum(a.NICDrops) != 6 || DropSum(a.NICDrops, "nic_busy") != 4 || DropSum(nil) != 0 {
		t.Errorf("DropSum: %v %v", DropSum(a.NICDrops), DropSum(a.NICDrops, "nic_busy"))
	}
	if NonZero(map[string]float64{"oversize": 0}) != "none" {
		t.Errorf("NonZero of nothing: %q", NonZero(map[string]float64{"oversize": 0}))
	}
}
