package ovs

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

const dpctl = `netdev@ovs-netdev:
  lookups: hit:11571 missed:6 lost:0
  flows: 6
  port 1: br0 (tap)
    RX packets:0 errors:0 dropped:0 overruns:0 frame:0
    TX packets:0 errors:0 dropped:4 aborted:0 carrier:0
    collisions:0
    RX bytes:0  TX bytes:0
  port 2: w1
    RX packets:7470 errors:1 dropped:2 overruns:0 frame:0
    TX packets:5080 errors:0 dropped:3 aborted:0 carrier:0
    collisions:0
    RX bytes:482678256 (460.3 MiB)  TX bytes:358789 (350.4 KiB)
  port 3: tfwtap-92880b (tap)
, could not retrieve stats (No such device)
`

func TestParseDpctl(t *testing.T) {
	st, err := parseDpctl(dpctl, "w1")
	want := Stats{RxPackets: 7470, RxErrors: 1, RxDropped: 2, TxPackets: 5080, TxDropped: 3}
	if err != nil || st != want {
		t.Errorf("parseDpctl(w1) = %+v, %v; want %+v", st, err, want)
	}
	if st, err := parseDpctl(dpctl, "br0"); err != nil || st.TxDropped != 4 || st.RxPackets != 0 {
		t.Errorf("parseDpctl(br0) = %+v, %v", st, err)
	}
	for _, port := range []string{"tfwtap-92880b", "w9"} {
		if _, err := parseDpctl(dpctl, port); err == nil {
			t.Errorf("parseDpctl(%s): counters of a port that has none", port)
		}
	}
	if _, err := parseDpctl(strings.Replace(dpctl, "packets:7470", "packets:x", 1), "w1"); err == nil {
		t.Error("parseDpctl took a count that is no number")
	}
}

// TestSwitchForwards starts Open vSwitch's userspace datapath on a bed and
// sends TCP both ways and UDP through it: the peer the bench compares
// tapfwd with must carry every row, with the veths' default offloads.
func TestSwitchForwards(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: namespaces")
	}
	need.Tools(t, programs...)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, bed, Config{CPUs: "0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
			t.Errorf("%s left behind", s.dir)
		}
	})
	if len(s.Pids()) != 2 {
		t.Errorf("Pids = %v, want ovs-vswitchd's and ovsdb-server's", s.Pids())
	}
	for _, opt := range []iperf.Options{
		{Duration: time.Second},
		{Duration: time.Second, Reverse: true},
		{Duration: time.Second, UDP: true, Len: 64, Bitrate: "10M"},
	} {
		r, err := iperf.Run(ctx, bed, opt)
		if err != nil {
			t.Fatalf("iperf3 %+v: %v", opt, err)
		}
		if r.Bytes == 0 {
			t.Errorf("iperf3 reverse=%v udp=%v: nothing arrived", opt.Reverse, opt.UDP)
		}
	}
	st, err := s.PortStats(ctx, bed.NIC)
	if err != nil {
		t.Fatal(err)
	}
	if st.RxPackets == 0 || st.TxPackets == 0 {
		t.Errorf("the NIC port's counters %v: want frames both ways", st)
	}
}
