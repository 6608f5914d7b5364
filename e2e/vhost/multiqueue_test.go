package vhost

import (
	"context"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/vm"
)

// TestVhostUserMultiqueue boots a QEMU guest (TCG, 2 vCPUs) with queues=2
// on a tapfwd vhost-user port of --vm-port-queues 2: the port and its
// printed lines offer two pairs, the guest's driver negotiates mq and runs
// both, its pings reach the wire host and the lab host, and /metrics
// counts one connect and no protocol error (no ring refused).
func TestVhostUserMultiqueue(t *testing.T) {
	testkit.NeedRoot(t)
	img := vm.GuestImage(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	dir := filepath.Join(t.TempDir(), "vhost")
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), "--vhost-user", dir, "--vm-ports", "1", "--vm-port-queues", "2")
	p := vhostPorts(t, bed, 1)[0]
	if p.QueuePairs != 2 || !strings.Contains(p.QEMU, ",queues=2 ") || !strings.Contains(p.QEMU, ",mq=on,vectors=0") ||
		!strings.Contains(p.Libvirt, "<driver queues='2'/>") {
		t.Errorf("the port offers %d queue pairs; its lines:\n%s\n%s", p.QueuePairs, p.QEMU, p.Libvirt)
	}
	if !strings.Contains(fw.Output(), " queues=2 ") {
		t.Errorf("tapfwd's vm-port line does not say queues=2:\n%s", fw.Output())
	}
	sub := bed.WireAddr.Addr().As4()
	sub[3] = 21
	gp := p.Port
	gp.Queues = 2
	g := vm.BootVhost(t, bed, "mq", img, gp, netip.PrefixFrom(netip.AddrFrom4(sub), 24),
		"tfw.gw="+bed.WireAddr.Addr().String(), "tfw.ping="+bed.LabAddr.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		t.Fatalf("%v; tapfwd said:\n%s", err, fw.Output())
	}
	g.CheckPings(t, bed.WireAddr.Addr(), bed.LabAddr.Addr())
	st := vhostPorts(t, bed, 1)[0]
	if !slices.Contains(st.Features, "mq") || st.ActivePairs != 2 || st.State != "running" {
		t.Errorf("port: features %v, %d of %d pairs running, %s; want mq, 2 running", st.Features, st.ActivePairs, st.QueuePairs, st.State)
	}
	m := prom.Scrape(t, bed)
	port := `port="` + p.Name + `"`
	if c, e := prom.Sample(m, "tapfwd_vm_port_events_total", port, `event="connect"`),
		prom.Sample(m, "tapfwd_vm_port_events_total", port, `event="protocol_error"`); c != 1 || e != 0 {
		t.Errorf("events: %v connects, %v protocol errors; want 1, 0", c, e)
	}
	if v := prom.Sample(m, "tapfwd_vm_port_packets_total", port, `direction="rx"`); v == 0 {
		t.Errorf("nothing handed to the guest: %v", v)
	}
}
