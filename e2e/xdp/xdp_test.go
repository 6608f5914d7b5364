package xdp

import (
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
)

// xdpArgs are the flags of every run here.
var xdpArgs = []string{"--nic-backend", "xdp"}

// start runs tapfwd with AF_XDP on a fresh bed, with args after xdpArgs.
func start(t *testing.T, args ...string) (*testbed.Bed, *testbed.Process) {
	t.Helper()
	testkit.NeedRoot(t)
	return testkit.Start(t, testkit.Tapfwd(t), append(append([]string(nil), xdpArgs...), args...)...)
}

// TestTraffic: ARP (the start already saw ping answered), TCP and UDP both
// ways through AF_XDP in native and generic mode; the log names the
// backend, and the XDP program leaves the NIC at SIGTERM.
func TestTraffic(t *testing.T) {
	testkit.NeedTools(t, "iperf3", "ping")
	for _, mode := range []string{"native", "generic"} {
		t.Run(mode, func(t *testing.T) {
			bed, fw := start(t, "--xdp-mode", mode)
			if want := "xdp_mode=" + mode; !strings.Contains(fw.Output(), want) {
				t.Errorf("the log lacks %q:\n%s", want, fw.Output())
			}
			if prog := xdpProg(t, bed); prog == "" {
				t.Errorf("no XDP program on %s while tapfwd runs", bed.NIC)
			}
			mac := kernel.LinkMAC(t, bed.LabNS, bed.LabIf).String()
			neigh := testkit.BedRun(t, bed, bed.WireNS, "ip", "neigh", "show", bed.LabAddr.Addr().String(), "dev", bed.WireIf)
			if !strings.Contains(neigh, mac) {
				t.Errorf("ARP: wire's neighbour entry %q lacks the TAP's MAC %s", neigh, mac)
			}
			traffic.CheckTCPUDP(t, bed, fw, 10<<20)
			if err := fw.Stop(); err != nil {
				t.Errorf("tapfwd did not exit 0 on SIGTERM: %v\n%s", err, fw.Output())
			}
			if prog := xdpProg(t, bed); prog != "" {
				t.Errorf("XDP program still on %s after SIGTERM: %s", bed.NIC, prog)
			}
		})
	}
}

// xdpProg is what `ip link` says of the NIC's XDP program; empty: none.
func xdpProg(t *testing.T, bed *testbed.Bed) string {
	out := testkit.BedRun(t, bed, bed.FwdNS, "ip", "-d", "link", "show", "dev", bed.NIC)
	if i := strings.Index(out, "prog/xdp"); i >= 0 {
		return strings.Fields(out[i:])[0] + " " + strings.Fields(out[i:])[1]
	}
	return ""
}
