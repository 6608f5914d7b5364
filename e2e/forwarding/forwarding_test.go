package forwarding

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
)

// TestModes checks that ping, ARP, IPv6 neighbour discovery, UDP and TCP in
// both directions pass through tapfwd in every napi x vnet-hdr mode, with
// the veth offloads at their defaults (TSO, GSO, checksum offload on).
func TestModes(t *testing.T) {
	testkit.NeedRoot(t, "iperf3", "ping")
	for _, napi := range []string{"on", "off"} {
		for _, vnet := range []string{"on", "off"} {
			t.Run("napi-"+napi+"/vnet-"+vnet, func(t *testing.T) {
				bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--napi", napi, "--vnet-hdr", vnet)
				// StartForwarder already saw IPv4 ping answered, which
				// needed ARP through tapfwd both ways.
				wantLog := fmt.Sprintf("napi=%v vnet_hdr=%v", napi == "on", vnet == "on")
				if !strings.Contains(fw.Output(), wantLog) {
					t.Errorf("tapfwd did not negotiate %s:\n%s", wantLog, fw.Output())
				}
				mac := kernel.LinkMAC(t, bed.LabNS, bed.LabIf).String()
				neigh := testkit.BedRun(t, bed, bed.WireNS, "ip", "neigh", "show", bed.LabAddr.Addr().String(), "dev", bed.WireIf)
				if !strings.Contains(neigh, mac) {
					t.Errorf("ARP: wire's neighbour entry %q lacks the TAP's MAC %s", neigh, mac)
				}
				kernel.LinkLocal(t, bed, bed.WireNS, bed.WireIf) // ping needs a source address
				ll := kernel.LinkLocal(t, bed, bed.LabNS, bed.LabIf)
				testkit.BedRun(t, bed, bed.WireNS, "ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", ll+"%"+bed.WireIf)
				neigh6 := testkit.BedRun(t, bed, bed.WireNS, "ip", "-6", "neigh", "show", ll, "dev", bed.WireIf)
				if !strings.Contains(neigh6, mac) {
					t.Errorf("IPv6 ND: wire's neighbour entry %q lacks the TAP's MAC %s", neigh6, mac)
				}
				traffic.CheckTCPUDP(t, bed, fw, 20<<20)
				if err := fw.Stop(); err != nil {
					t.Errorf("tapfwd did not exit 0 on SIGTERM: %v\n%s", err, fw.Output())
				}
				for q, c := range testkit.Totals(t, fw.Output()) {
					if c.Drops != 0 || c.Errors != 0 {
						t.Errorf("queue %d: %d drops, %d errors on a clean bed", q, c.Drops, c.Errors)
					}
				}
				if _, err := bed.Run(context.Background(), bed.LabNS, "ip", "link", "show", "dev", bed.LabIf); err == nil {
					t.Error("the TAP is still there after tapfwd exited")
				}
			})
		}
	}
}

// TestTwoQueues runs two TAP queues and two fanout sockets and checks that
// each worker is pinned to its CPU and that both queues carry traffic.
func TestTwoQueues(t *testing.T) {
	testkit.NeedRoot(t, "iperf3")
	bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--queues", "2", "--cpus", "0,1")
	pid := fw.Pid()

	pinned := kernel.ThreadsPinned(pid)
	if pinned["0"] < 1 || pinned["1"] < 1 {
		t.Errorf("want a worker thread pinned to CPU 0 and one to CPU 1; Cpus_allowed_list counts: %v", pinned)
	}

	queues := testkit.BedRun(t, bed, bed.LabNS, "ls", "/sys/class/net/"+bed.LabIf+"/queues")
	if f := strings.Fields(queues); len(f) != 4 {
		t.Errorf("TAP queues = %q, want rx-0 rx-1 tx-0 tx-1", queues)
	}
	// /proc/PID/net/packet lists the packet sockets of tapfwd's namespace.
	pk, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/packet", pid))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(string(pk)), "\n"); n != 2 {
		t.Errorf("want 2 packet sockets, /proc/%d/net/packet has %d:\n%s", pid, n, pk)
	}

	traffic.CheckQueues(t, bed, fw, 2)
}

// TestTAPNAPISettings checks that the TAP's NAPI sysfs settings, written
// before the TAP moves into the lab (where its sysfs then lives), hold.
func TestTAPNAPISettings(t *testing.T) {
	testkit.NeedRoot(t)
	bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--napi", "on", "--tap-napi-threaded", "--tap-gro-flush-timeout", "20us", "--tap-napi-defer-hard-irqs", "2")
	for attr, want := range map[string]string{"threaded": "1", "gro_flush_timeout": "20000", "napi_defer_hard_irqs": "2"} {
		got := strings.TrimSpace(testkit.BedRun(t, bed, bed.LabNS, "cat", "/sys/class/net/"+bed.LabIf+"/"+attr))
		if got != want {
			t.Errorf("%s = %s in the lab, want %s", attr, got, want)
		}
	}
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
}

// This kernel has no 8021q module, so VLAN devices cannot be made; a raw
// packet socket sends tagged frames instead. The receiving stack (veth or
// TAP) strips the tag into the skb (net/core/dev.c: skb_vlan_untag), so
// each side's packet socket sees it in PACKET_AUXDATA, not in the frame:
// tapfwd must put it back for the tag to survive.
func TestVLAN(t *testing.T) {
	testkit.NeedRoot(t)
	for _, vnet := range []string{"on", "off"} {
		t.Run("vnet-"+vnet, func(t *testing.T) {
			bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--vnet-hdr", vnet)
			// wire->lab, then lab->wire with priority 1, VLAN 200.
			for i, dir := range traffic.Directions(t, bed) {
				want := []uint16{100, 0x2000 | 200}[i]
				inner := traffic.UDPPacket(t, bed)
				frame := traffic.Tagged(t, dir.Src, dir.Dst, want, inner)
				if _, err := unix.Write(dir.From, frame); err != nil {
					t.Fatalf("%s: send: %v", dir.Name, err)
				}
				if tci := traffic.RecvTagged(t, dir.To, dir.Src, inner); tci != want {
					t.Errorf("%s: VLAN TCI %#x, want %#x", dir.Name, tci, want)
				}
			}
			if err := fw.Stop(); err != nil {
				t.Fatalf("tapfwd exit: %v\n%s", err, fw.Output())
			}
		})
	}
}

// TestL2Policy sends, from the lab side of the TAP, STP and LLDP frames
// (IEEE 802.1D reserved group addresses), a VLAN-tagged frame and a plain
// broadcast, ten each. With --guest-vlans deny, --l2-control drop and LLDP
// allowed, the wire sees LLDP and the broadcast only; the rest is counted
// by reason, and every frame read from the TAP is transmitted or dropped.
func TestL2Policy(t *testing.T) {
	bed, _ := testkit.Start(t, testkit.Tapfwd(t), "--guest-vlans", "deny", "--l2-control", "drop", "--l2-control-allow", "0e")
	lab := traffic.OpenRaw(t, bed, bed.LabNS, bed.LabIf)
	wire := traffic.OpenRaw(t, bed, bed.WireNS, bed.WireIf)
	src := kernel.LinkMAC(t, bed.LabNS, bed.LabIf)
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	frame := func(dst net.HardwareAddr, etype []byte, kind string) []byte {
		f := append(append(append([]byte(nil), dst...), src...), etype...)
		f = append(f, []byte("tfw-l2-"+kind+"-"+bed.ID)...)
		return append(f, make([]byte, 40)...)
	}
	kinds := map[string][]byte{
		"stp":    frame(net.HardwareAddr{0x01, 0x80, 0xc2, 0, 0, 0x00}, []byte{0x00, 0x26}, "stp"),
		"lldp":   frame(net.HardwareAddr{0x01, 0x80, 0xc2, 0, 0, 0x0e}, []byte{0x88, 0xcc}, "lldp"),
		"tagged": frame(bcast, []byte{0x81, 0x00, 0x00, 0x07, 0x88, 0xb5}, "tagged"),
		"plain":  frame(bcast, []byte{0x88, 0xb5}, "plain"),
	}
	before := prom.ParseCounts(prom.Scrape(t, bed), bed)
	ifi := kernel.Link(t, bed.LabNS, bed.LabIf).Index
	for i := 0; i < 10; i++ {
		for _, f := range kinds {
			if err := unix.Sendto(lab, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi, Halen: 6}); err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := map[string]int{}
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(wire, buf, 0)
		if err != nil {
			continue
		}
		for kind := range kinds {
			if bytes.Contains(buf[:n], []byte("tfw-l2-"+kind+"-"+bed.ID)) {
				seen[kind]++
			}
		}
	}
	if seen["lldp"] != 10 || seen["plain"] != 10 || seen["stp"] != 0 || seen["tagged"] != 0 {
		t.Errorf("the wire saw %v; want 10 lldp and plain, no stp or tagged", seen)
	}
	d := prom.SettledCounts(t, bed, 3*time.Second).Sub(before)
	if d.TAPDrops["l2_control"] != 10 || d.TAPDrops["guest_vlan"] != 10 {
		t.Errorf("drops from the TAP: %s; want l2_control=10 guest_vlan=10", prom.NonZero(d.TAPDrops))
	}
	if got := d.NICTx + prom.DropSum(d.TAPDrops); got != d.TAPRx {
		t.Errorf("from the TAP: received %v != transmitted %v + dropped %v", d.TAPRx, d.NICTx, prom.DropSum(d.TAPDrops))
	}
}
