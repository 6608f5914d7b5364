package metrics

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// guestSource is a Source over a fake forwarder with one vhost-user port
// ("tap0-0", running) and one macvtap ("tfwvm0").
func guestSource(t *testing.T) (Source, *forward.GuestWorker) {
	gp := forward.GuestPort{Queues: []forward.GuestQueue{{Guest: forwardtest.NewFake(t), NIC: forwardtest.NewFake(t), CPU: -1}},
		MAC: net.HardwareAddr{0x02, 0, 0, 0, 0x10, 0}}
	fw, _, _ := fakeForwarderWith(t, forward.Config{TAPVnetHdr: true, Guests: []forward.GuestPort{gp}})
	g := fw.GuestWorkers()[0]
	src := Source{TAP: "tap0", NIC: "eth1", Forwarder: fw,
		LinkStats: func(string) (netns.LinkStats, error) { return netns.LinkStats{RxPackets: 7, RxDropped: 2}, nil },
		VMPorts:   func() ([]string, error) { return []string{"tfwvm0"}, nil },
		GuestPorts: []GuestPort{{Name: "tap0-0", State: func() vhostuser.State { return vhostuser.StateRunning }, Guest: g,
			Stats: func() vhostuser.Stats {
				return vhostuser.Stats{Connects: 3, Disconnects: 2, ProtocolErrors: 4, TurnedAway: 1, Resets: 5, RxFrames: 99, TxDropped: 11}
			}}}}
	return src, g
}

// A vhost-user port's counters are in the VM-port families beside the
// macvtap's: rx what its worker handed the guest, tx what the guest sent,
// drops by reason, GSO frames from the guest and its state.
func TestGuestPortMetrics(t *testing.T) {
	src, g := guestSource(t)
	g.Counters.To.Tx.Packets.Add(5)
	g.Counters.To.Tx.Bytes.Add(500)
	g.Counters.From.Rx.Packets.Add(9)
	g.Counters.From.Rx.Bytes.Add(90000)
	g.Counters.From.GSO.Add(3)
	g.Counters.To.Drops[forward.DropGuestBusy].Add(4)
	g.Counters.To.Drops[forward.DropGuestRefused].Add(1)
	g.Counters.From.Drops[forward.DropNICBusy].Add(2)
	q := &src.Forwarder.QueueWorkers()[0].Counters
	q.NICToTAP.ToGuests.Add(6)
	q.TAPToNIC.ToGuests.Add(8)
	c := NewCollector(src)
	want := `
# HELP tapfwd_vm_port_gso_frames_total GSO super-frames a vhost-user port's guest sent.
# TYPE tapfwd_vm_port_gso_frames_total counter
tapfwd_vm_port_gso_frames_total{device="tap0",port="tap0-0"} 3
# HELP tapfwd_vm_port_state 1 for the state a vhost-user port is in, 0 for the others: listening (no front-end), connected, running (frames move), broken (the guest broke the virtqueue rules).
# TYPE tapfwd_vm_port_state gauge
tapfwd_vm_port_state{device="tap0",port="tap0-0",state="broken"} 0
tapfwd_vm_port_state{device="tap0",port="tap0-0",state="connected"} 0
tapfwd_vm_port_state{device="tap0",port="tap0-0",state="listening"} 0
tapfwd_vm_port_state{device="tap0",port="tap0-0",state="running"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "tapfwd_vm_port_gso_frames_total", "tapfwd_vm_port_state"); err != nil {
		t.Error(err)
	}
	page := gather(t, c)
	for _, line := range []string{
		`tapfwd_vm_port_packets_total{device="tap0",direction="rx",port="tap0-0"} 5`,
		`tapfwd_vm_port_bytes_total{device="tap0",direction="rx",port="tap0-0"} 500`,
		`tapfwd_vm_port_packets_total{device="tap0",direction="tx",port="tap0-0"} 9`,
		`tapfwd_vm_port_bytes_total{device="tap0",direction="tx",port="tap0-0"} 90000`,
		`tapfwd_vm_port_drops_total{device="tap0",direction="rx",port="tap0-0",reason="guest_busy"} 4`,
		`tapfwd_vm_port_drops_total{device="tap0",direction="rx",port="tap0-0",reason="guest_refused"} 1`,
		`tapfwd_vm_port_drops_total{device="tap0",direction="tx",port="tap0-0",reason="nic_busy"} 2`,
		`tapfwd_vm_port_drops_total{device="tap0",direction="tx",port="tap0-0",reason="oversize"} 0`,
		`tapfwd_vm_port_packets_total{device="tap0",direction="rx",port="tfwvm0"} 7`,
		`tapfwd_vm_port_drops_total{device="tap0",direction="rx",port="tfwvm0",reason="netdev"} 2`,
		`tapfwd_vm_port_events_total{device="tap0",event="connect",port="tap0-0"} 3`,
		`tapfwd_vm_port_events_total{device="tap0",event="disconnect",port="tap0-0"} 2`,
		`tapfwd_vm_port_events_total{device="tap0",event="protocol_error",port="tap0-0"} 4`,
		`tapfwd_vm_port_events_total{device="tap0",event="turned_away",port="tap0-0"} 1`,
		`tapfwd_vm_port_events_total{device="tap0",event="reset",port="tap0-0"} 5`,
		`tapfwd_vm_port_drops_total{device="tap0",direction="tx",port="tap0-0",reason="port"} 11`,
		`tapfwd_to_guests_frames_total{device="eth1",queue="0"} 6`,
		`tapfwd_to_guests_frames_total{device="tap0",queue="0"} 8`,
	} {
		if !strings.Contains(page, line+"\n") {
			t.Errorf("the page lacks %s", line)
		}
	}
	if strings.Contains(page, `reason="guest_vlan"`) {
		t.Error("a drop reason the configuration cannot have is exported")
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// gather is the text exposition of c's metrics.
func gather(t *testing.T, c *Collector) string {
	t.Helper()
	mfs, err := NewRegistry(c).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			b.WriteString(mf.GetName() + "{" + strings.Join(labels, ",") + "} " + strconvF(v) + "\n")
		}
	}
	return b.String()
}

func strconvF(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
