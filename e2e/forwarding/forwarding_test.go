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

	"github.com/tapfwd/tapfwd/internal/testbed/iperf"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
)

// TestModes checks that ping, ARP, IPv6 neighbour discovery, UDP and TCP in
// both directions pass through tapfwd in every napi x vnet-hdr mode, with
// the veth offloads at their defaults (TSO, GSO, checksum offload on).
func TestModes(t *testing.T) {
	testkit.NeedRoot(t)
	testkit.NeedTools(t, "iperf3", "ping")
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
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, rev := range []bool{false, true} {
					dir := map[bool]string{false: "wire->lab", true: "lab->wire"}[rev]
					r, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev})
					if err != nil {
						t.Fatalf("TCP %s: %v", dir, err)
					}
					// A stalled forwarder (broken partial checksums or GSO
					// handling) moves almost nothing.
					if r.Bytes < 20<<20 {
						t.Errorf("TCP %s: only %d bytes in 2 s", dir, r.Bytes)
					}
					t.Logf("TCP %s: %.2f Gbit/s, %d retransmits", dir, r.BitsPerSecond/1e9, r.Retransmits)
					// UDP: every datagram the sender sent must reach the
					// receiving stack. A busy 2-core machine can overflow the
					// receiving iperf3's socket buffer; those count as
					// RcvbufErrors there, after tapfwd delivered them.
					rxNS := map[bool]string{false: bed.LabNS, true: bed.WireNS}[rev]
					before := kernel.UDPArrived(t, bed, rxNS)
					dropsBefore := prom.CountedDrops(t, bed)
					u, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Reverse: rev, UDP: true, Bitrate: "20M", Len: 1200})
					if err != nil {
						t.Fatalf("UDP %s: %v", dir, err)
					}
					arrived := kernel.UDPArrived(t, bed, rxNS) - before
					// A datagram either arrives or is counted as dropped:
					// when the machine is busy, the TAP's queue or the
					// packet socket's can overflow while tapfwd waits for a
					// CPU, and the kernel counts that.
					dropped := prom.CountedDrops(t, bed) - dropsBefore
					if dropped > 0 {
						t.Logf("UDP %s: %d datagrams arrived, %d counted as dropped", dir, arrived, dropped)
					}
					if u.Packets < 1000 || float64(arrived+dropped) < 0.99*float64(u.Packets) {
						t.Errorf("UDP %s: %d datagrams sent, %d reached the receiver's stack (iperf3: %.1f%% lost)", dir, u.Packets, arrived, u.LostPercent)
					}
				}
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
	testkit.NeedRoot(t)
	testkit.NeedTools(t, "iperf3")
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

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, rev := range []bool{false, true} {
		if _, err := iperf.Run(ctx, bed, iperf.Options{Duration: 2 * time.Second, Streams: 16, Reverse: rev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("tapfwd exit: %v\n%s", err, fw.Output())
	}
	tot := testkit.Totals(t, fw.Output())
	for q := 0; q < 2; q++ {
		if tot[q].NICRx == 0 || tot[q].TAPRx == 0 {
			t.Errorf("queue %d carried no traffic in one direction: %+v (16 flows hash onto both queues)", q, tot[q])
		}
	}
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
			tapHW := kernel.LinkMAC(t, bed.LabNS, bed.LabIf)
			wireHW := kernel.LinkMAC(t, bed.WireNS, bed.WireIf)
			wire := traffic.OpenRaw(t, bed, bed.WireNS, bed.WireIf)
			lab := traffic.OpenRaw(t, bed, bed.LabNS, bed.LabIf)

			for _, tc := range []struct {
				name     string
				from, to int
				src, dst net.HardwareAddr
				tci      uint16
			}{
				{"wire->lab", wire, lab, wireHW, tapHW, 100},
				{"lab->wire", lab, wire, tapHW, wireHW, 0x2000 | 200}, // priority 1, VLAN 200
			} {
				inner := traffic.UDPPacket(t, bed)
				frame := traffic.Tagged(t, tc.src, tc.dst, tc.tci, inner)
				if _, err := unix.Write(tc.from, frame); err != nil {
					t.Fatalf("%s: send: %v", tc.name, err)
				}
				if tci := traffic.RecvTagged(t, tc.to, tc.src, inner); tci != tc.tci {
					t.Errorf("%s: VLAN TCI %#x, want %#x", tc.name, tci, tc.tci)
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
