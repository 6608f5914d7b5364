package xdp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/napi"
)

// TestPollModes forwards TCP both ways and 300 pings with each --poll mode
// on AF_XDP.
// kernel: the kernel busy-polled the veth's NAPI for tapfwd's worker
// (TcpExt BusyPollRxPackets in the NIC's namespace moves, which no other
// mode makes it do: SO_BUSY_POLL on an XSK with NAPI id 0 polls nothing).
// threaded: the NIC's NAPI runs in a kthread while tapfwd runs, and so
// with --poll block and --nic-napi-threaded enabled.
func TestPollModes(t *testing.T) {
	testkit.NeedTools(t, "iperf3", "ping")
	for _, mode := range []string{"block", "busy", "kernel", "threaded", "block-nic-napi-threaded"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--poll", mode}
			if mode == "block-nic-napi-threaded" {
				// Threaded by its own flag: the instances it needs come with
				// the XDP program, after the flags are checked.
				args = []string{"--poll", "block", "--nic-napi-threaded", "enabled"}
			}
			bed, fw := start(t, args...)
			busyPolled := func() int64 { return kernel.SNMP(t, bed, bed.FwdNS)["TcpExt.BusyPollRxPackets"] }
			before := busyPolled()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, rev := range []bool{false, true} {
				r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev})
				if err != nil || r.Bytes < 10<<20 {
					t.Fatalf("TCP (reverse %v) with --poll %s: %v, %d bytes\n%s", rev, mode, err, r.Bytes, fw.Output())
				}
				t.Logf("TCP reverse=%v: %.2f Gbit/s", rev, r.BitsPerSecond/1e9)
			}
			// Request and reply, one at a time: the worker waits for each
			// request, which is when --poll kernel busy-polls.
			testkit.BedRun(t, bed, bed.WireNS, "ping", "-c", "300", "-i", "0.005", "-q", bed.LabAddr.Addr().String())
			polled := busyPolled() - before
			t.Logf("BusyPollRxPackets +%d", polled)
			switch mode {
			case "kernel":
				if polled == 0 {
					t.Errorf("--poll kernel: BusyPollRxPackets moved by %d: the NAPI was not busy-polled", polled)
				}
			case "threaded", "block-nic-napi-threaded":
				if pids, err := napi.Kthreads(bed.NIC); err != nil || len(pids) == 0 {
					t.Errorf("%v: no napi/%s-* kthread (%v)", args, bed.NIC, err)
				}
			}
			if mode != "kernel" && polled != 0 {
				t.Errorf("--poll %s: BusyPollRxPackets moved by %d", mode, polled)
			}
			if err := fw.Stop(); err != nil {
				t.Fatalf("exit: %v\n%s", err, fw.Output())
			}
		})
	}
}

// TestReport: tapfwd features reports AF_XDP, /metrics has
// tapfwd_nic_info with the backend and mode, and /status names them.
func TestReport(t *testing.T) {
	bed, fw := start(t, "--xdp-mode", "generic")
	var feat struct {
		XDP struct {
			Sockets    bool `json:"xdp_sockets"`
			Copy       bool `json:"copy"`
			NeedWakeup bool `json:"need_wakeup"`
		} `json:"af_xdp"`
	}
	out := testkit.BedRun(t, bed, bed.FwdNS, testkit.Tapfwd(t), "features", "--json")
	if err := json.Unmarshal([]byte(out), &feat); err != nil || !feat.XDP.Sockets || !feat.XDP.Copy || !feat.XDP.NeedWakeup {
		t.Errorf("tapfwd features --json: %+v %v\n%s", feat, err, out)
	}
	if table := testkit.BedRun(t, bed, bed.FwdNS, testkit.Tapfwd(t), "features"); !strings.Contains(table, "AF_XDP") {
		t.Errorf("tapfwd features lacks AF_XDP:\n%s", table)
	}
	if v := prom.Sample(prom.Scrape(t, bed), "tapfwd_nic_info", `backend="xdp"`, `device="`+bed.NIC+`"`, `xdp_mode="generic"`); v != 1 {
		t.Errorf("tapfwd_nic_info{backend=xdp,xdp_mode=generic} = %v, want 1", v)
	}
	code, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/status")
	var st struct {
		Backend string `json:"nic_backend"`
		Mode    string `json:"xdp_mode"`
		Poll    string `json:"poll"`
	}
	if err != nil || code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.Backend != "xdp" || st.Mode != "generic" || st.Poll != "block" {
		t.Errorf("GET /status: %d %v %+v", code, err, st)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit: %v\n%s", err, fw.Output())
	}
}
