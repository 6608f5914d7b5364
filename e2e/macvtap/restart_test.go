package macvtap

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/vm"
	"github.com/tapfwd/tapfwd/netns"
)

// pingEvery is the guest's ping interval in the restart test.
const pingEvery = 50 * time.Millisecond

// gap checks the replies around a restart: the last before down, the
// first after ready; traffic must resume within a second of ready, and the
// replies lost must be those of the pings sent while no tapfwd ran.
func gap(t *testing.T, g *vm.Guest, what string, down, ready time.Time) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var before, after *vm.Reply
	for time.Now().Before(deadline) {
		rs := g.Replies()
		before, after = nil, nil
		for i := range rs {
			if rs[i].At.Before(down) {
				before = &rs[i]
			} else if after == nil && rs[i].At.After(ready) {
				after = &rs[i]
			}
		}
		if after != nil && time.Since(after.At) > time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if before == nil || after == nil {
		t.Fatalf("%s: no replies around the restart (before %v, after %v):\n%s", what, before, after, g.Output())
	}
	outage := ready.Sub(down)
	lost := after.Seq - before.Seq - 1
	sentWhileDown := int(outage / pingEvery)
	resume := after.At.Sub(ready)
	t.Logf("%s: down %s ready %s", what, down.Format(time.StampMicro), ready.Format(time.StampMicro))
	t.Logf("%s: no tapfwd for %v (%d pings sent meanwhile); %d lost; first reply %v after ready (seq %d -> %d)",
		what, outage.Round(time.Millisecond), sentWhileDown, lost, resume.Round(time.Millisecond), before.Seq, after.Seq)
	if resume > time.Second {
		t.Errorf("%s: traffic resumed %v after the new tapfwd was ready, want within 1 s", what, resume)
	}
	// Pings in flight and the resume time may add a few to those sent
	// while nothing forwarded.
	if lost > sentWhileDown+int(resume/pingEvery)+3 {
		t.Errorf("%s: %d replies lost, but only %d pings were sent while no tapfwd ran", what, lost, sentWhileDown)
	}
	// From then on every reply arrives.
	rs := g.Replies()
	for i := 1; i < len(rs); i++ {
		if rs[i].Seq > after.Seq && rs[i].Seq != rs[i-1].Seq+1 {
			t.Errorf("%s: replies %d to %d lost after the restart", what, rs[i-1].Seq+1, rs[i].Seq-1)
		}
	}
}

// TestRestartKeepsGuests: a QEMU guest on a VM port of a persistent TAP
// pings the wire host every 50 ms while tapfwd is killed (SIGKILL) and
// started again, then stopped (SIGTERM) and started again, as an upgrade
// does. The guest's NIC never goes away, traffic resumes within a second of
// the new tapfwd being ready, and only the pings sent meanwhile are lost. A
// start with other settings is refused and leaves the lab as it was.
func TestRestartKeepsGuests(t *testing.T) {
	testkit.NeedTools(t, "qemu-system-x86_64")
	img := vm.GuestImage(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	t.Cleanup(func() { testkit.CLI(t, "down", "--tap", bed.LabIf, "--tap-netns", bed.LabNS) })
	args := []string{"--persist", "--vm-ports", "1", "--metrics-addr", ""}
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
	p := vm.Ports(t, bed.LabNS, bed.LabIf, 1)[0]
	sub := bed.WireAddr.Addr().As4()
	addr := netip.PrefixFrom(netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], 11}), 24)
	g := vm.Boot(t, bed, "guest", img, p, addr,
		"tfw.gw="+bed.WireAddr.Addr().String(), fmt.Sprintf("tfw.pingi=%g", pingEvery.Seconds()))
	g.WaitReplies(t, 20)

	// A crash: nothing is cleaned up.
	down := time.Now()
	fw.Kill()
	time.Sleep(time.Second)
	checkPersisted(t, bed, p)
	fw = testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
	gap(t, g, "SIGKILL", down, testkit.ReadyAt(t, fw))

	// An upgrade: a clean stop, then the new binary.
	down = time.Now()
	if err := fw.Stop(); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	checkPersisted(t, bed, p)
	refuseMismatch(t, bed, args)
	checkPersisted(t, bed, p)
	fw = testkit.StartOn(t, bed, testkit.Tapfwd(t), args...)
	gap(t, g, "SIGTERM", down, testkit.ReadyAt(t, fw))

	if c := g.CarrierChanges(); len(c) > 0 {
		t.Errorf("the guest's NIC changed: %v", c)
	}
	if !strings.Contains(g.Output(), "TFW: eth0 carrier=1") {
		t.Errorf("the guest never reported its carrier:\n%s", g.Output())
	}
}

// checkPersisted: with no tapfwd attached the TAP, its port and the
// port's device node are still there.
func checkPersisted(t *testing.T, bed *testbed.Bed, p vm.Port) {
	t.Helper()
	n, err := netns.Open(bed.LabNS)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	l, err := n.Link(bed.LabIf)
	if err != nil || !l.Tun.Persist {
		t.Fatalf("the persistent TAP is gone or not persistent: %+v %v", l.Tun, err)
	}
	ports, err := tapport.List(bed.LabNS, bed.LabIf)
	if err != nil || len(ports) != 1 || ports[0].Index != p.Ifindex || ports[0].Dev != p.Dev {
		t.Fatalf("the VM port did not stay as it was: %+v (was %+v), %v", ports, p, err)
	}
}

// refuseMismatch: a start with another queue count fails with one line
// naming the difference.
func refuseMismatch(t *testing.T, bed *testbed.Bed, args []string) {
	t.Helper()
	cmd := bed.Command(context.Background(), bed.FwdNS, testkit.Tapfwd(t), bed.TapfwdArgs(append(args, "--queues", "2")...)...)
	clitest.OneLineError(t, "a restart with --queues 2", cmd, "queues 1 (asked 2)")
}
