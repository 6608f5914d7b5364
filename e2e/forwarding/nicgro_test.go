package forwarding

import (
	"context"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
)

// TestNICGROMerges: with TSO and GSO off on the wire's veth, TCP from the
// wire reaches the NIC veth as MTU-sized frames. Left as it is (--nic-gro
// auto: a veth's GRO is off) tapfwd reads them one by one, no GSO frame
// among them; with --nic-gro on the veth merges them (a sender without
// TSO is what it merges), so most frames tapfwd reads from the NIC are GSO
// super-frames (tapfwd_gso_frames_total of the NIC).
func TestNICGROMerges(t *testing.T) {
	testkit.NeedRoot(t, "iperf3", "ethtool")
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	testkit.BedRun(t, bed, bed.WireNS, "ethtool", "-K", bed.WireIf, "tso", "off", "gso", "off")
	exe := testkit.PlainTapfwd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, gro := range []string{"auto", "on"} {
		fw := testkit.StartOn(t, bed, exe, "--nic-gro", gro)
		r, err := iperf.Run(ctx, bed, iperf.Options{Duration: time.Second})
		if err != nil || r.Bytes < 10<<20 {
			t.Fatalf("--nic-gro %s: TCP from the wire: %v, %d bytes", gro, err, r.Bytes)
		}
		m := prom.Scrape(t, bed)
		nic := `device="` + bed.NIC + `"`
		rx, gso := prom.Sample(m, "tapfwd_packets_total", nic, `direction="rx"`), prom.Sample(m, "tapfwd_gso_frames_total", nic)
		if err := fw.Stop(); err != nil {
			t.Fatalf("exit: %v\n%s", err, fw.Output())
		}
		t.Logf("--nic-gro %s: %.2f Gbit/s; tapfwd read %.0f frames from the NIC, %.0f of them GSO", gro, r.BitsPerSecond/1e9, rx, gso)
		switch {
		case gro == "auto" && gso != 0:
			t.Errorf("--nic-gro auto: %.0f GSO frames from a NIC without GRO and a wire without TSO", gso)
		case gro == "on" && gso*2 < rx:
			t.Errorf("--nic-gro on: %.0f of %.0f frames from the NIC are GSO, want most", gso, rx)
		}
	}
}
