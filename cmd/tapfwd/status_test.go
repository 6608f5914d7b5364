package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/testbed/iperf"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestStatus: /status and tapfwd status describe a running forwarder, and
// its counters agree with /metrics (each status value lies between two
// scrapes taken around it).
func TestStatus(t *testing.T) {
	bed, _ := startForwarder(t, "--vm-ports", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// The first rate window ends 5 s after the start.
	time.Sleep(6*time.Second - time.Since(start))
	before := testkit.ParseCounts(testkit.Scrape(t, bed), bed)
	code, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/status")
	if err != nil || code != 200 {
		t.Fatalf("GET /status: %d %v", code, err)
	}
	after := testkit.ParseCounts(testkit.Scrape(t, bed), bed)
	var st daemon.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if st.Schema != daemon.StatusSchema || st.TAP.Name != bed.LabIf || st.TAP.Netns != bed.LabNS || st.NIC != bed.NIC ||
		!st.TAP.VnetHdr || st.TAP.Persistent || len(st.Queues) != 1 || len(st.VMPorts) != 1 || st.UptimeSeconds < 5 {
		t.Errorf("status: %+v", st)
	}
	q := st.Queues[0]
	for _, c := range []struct {
		what          string
		got, lo, hi   float64
		nonZeroNeeded bool
	}{
		{"NIC rx", float64(q.NICToTAP.RxPackets), before.NICRx, after.NICRx, true},
		{"TAP tx", float64(q.NICToTAP.TxPackets), before.TAPTx, after.TAPTx, true},
		{"TAP rx", float64(q.TAPToNIC.RxPackets), before.TAPRx, after.TAPRx, true},
		{"NIC tx", float64(q.TAPToNIC.TxPackets), before.NICTx, after.NICTx, true},
	} {
		if c.got < c.lo || c.got > c.hi || (c.nonZeroNeeded && c.got == 0) {
			t.Errorf("%s: status %v, /metrics %v then %v", c.what, c.got, c.lo, c.hi)
		}
	}
	if st.RateSeconds == 0 || q.NICToTAP.RxBytesPerSecond <= 0 {
		t.Errorf("no rates after 6 s of traffic: window %v s, NIC->TAP %v B/s", st.RateSeconds, q.NICToTAP.RxBytesPerSecond)
	}
	out := testkit.BedRun(t, bed, bed.FwdNS, exe(t), "status")
	for _, want := range []string{"TAP " + bed.LabIf + " in network namespace " + bed.LabNS, "NIC " + bed.NIC, "nic->tap", st.VMPorts[0].Dev} {
		if !strings.Contains(out, want) {
			t.Errorf("tapfwd status lacks %q:\n%s", want, out)
		}
	}
	if out := testkit.BedRun(t, bed, bed.FwdNS, exe(t), "status", "--json"); !strings.Contains(out, `"schema": "`+daemon.StatusSchema+`"`) {
		t.Errorf("tapfwd status --json:\n%s", out)
	}
}

func TestStatusCLIErrors(t *testing.T) {
	checkCLI(t, []cliCase{
		{[]string{"status", "--addr", "127.0.0.1:1"}, 1, "no tapfwd answers at 127.0.0.1:1"},
		{[]string{"version"}, 0, "tapfwd "},
	})
}
