package forwarding

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestSplitDirections: with --split-directions each queue runs as two
// workers, the NIC's reader on the queue's CPU and the TAP's reader on the
// next one, as /status says; TCP crosses both ways, with veth's default
// offloads, and 64 B UDP arrives.
func TestSplitDirections(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	cpus, want := "0,1", [2]int{0, 1}
	if runtime.NumCPU() < 2 {
		cpus, want = "0", [2]int{0, 0}
	}
	bed, _ := testkit.Start(t, testkit.Tapfwd(t), "--split-directions", "--cpus", cpus)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tcpBothWays(t, ctx, bed)
	u, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, UDP: true, Bitrate: "20M", Len: 64})
	if err != nil || u.Packets < 1000 || u.LostPercent > 50 {
		t.Fatalf("UDP 64 B: %v, %d packets, %.1f%% lost", err, u.Packets, u.LostPercent)
	}
	code, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/status")
	if err != nil || code != 200 {
		t.Fatalf("GET /status: %d %v", code, err)
	}
	var st struct {
		Queues []struct {
			CPU    int `json:"cpu"`
			TAPCPU int `json:"tap_cpu"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if len(st.Queues) != 1 || st.Queues[0].CPU != want[0] || st.Queues[0].TAPCPU != want[1] {
		t.Errorf("split over CPUs %s: queues %+v, want the NIC's reader on %d and the TAP's on %d", cpus, st.Queues, want[0], want[1])
	}
}
