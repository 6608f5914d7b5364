package vxlan

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/iperf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/internal/testkit/vm"
)

// TestVXLAN runs tapfwd on the VXLAN device of each of two hosts (the
// two-host bed: an underlay veth, a VXLAN device per host with the other
// host in its forwarding database, a lab per host in one subnet) and shows
// the two labs one L2 segment: the TAPs take the VXLAN MTU, ping, ARP,
// IPv6 neighbour discovery and multicast, UDP, TCP and VLAN-tagged frames
// cross in both directions, GSO super-frames cross the tunnel whole both
// ways (tapfwd's counters on both hosts and a capture on the underlay),
// and a QEMU guest on a VM port of each host reaches the other host's lab
// and the other guest.
func TestVXLAN(t *testing.T) {
	testkit.NeedRoot(t, "iperf3", "ping")
	img := vm.GuestImage(t)
	h := testbed.NewHostsForTest(t, testbed.HostsConfig{})
	fws := testkit.StartHosts(t, h, testkit.Tapfwd(t), nil)
	// views[i] looks at host i from the other host's lab: its WireNS is
	// that lab, its FwdNS (scraped for metrics) host i.
	views := [2]*testbed.Bed{h.View(1, 0), h.View(0, 1)}

	t.Run("mtu", func(t *testing.T) { vxlanMTU(t, h, fws) })
	t.Run("arp-nd-multicast", func(t *testing.T) { vxlanNeighbours(t, h, views) })
	t.Run("udp", func(t *testing.T) { vxlanUDP(t, h, views) })
	t.Run("tcp-gso", func(t *testing.T) { vxlanTCP(t, h, views) })
	t.Run("tunnel-in-tunnel", func(t *testing.T) { vxlanNested(t, h, views) })
	t.Run("vlan", func(t *testing.T) { vxlanVLAN(t, h, views) })
	t.Run("guests", func(t *testing.T) { vxlanGuests(t, h, views, img) })

	for i, fw := range fws {
		if err := fw.Stop(); err != nil {
			t.Errorf("tapfwd on host %d did not exit 0 on SIGTERM: %v\n%s", i+1, err, fw.Output())
		}
		for q, c := range testkit.Totals(t, fw.Output()) {
			if c.Errors != 0 {
				t.Errorf("host %d queue %d: %d errors", i+1, q, c.Errors)
			}
		}
	}
}

// vxlanMTU: each TAP took its VXLAN device's MTU (1450 on the 1500-byte
// underlay) by itself, and a packet of exactly that size crosses with DF
// set while one byte more does not leave the lab.
func vxlanMTU(t *testing.T, h *testbed.Hosts, fws [2]*testbed.Process) {
	for i, host := range h.Host {
		out := testkit.BedRun(t, h.View(1-i, i), host.LabNS, "ip", "-o", "link", "show", "dev", host.LabIf)
		if !strings.Contains(out, fmt.Sprintf(" mtu %d ", h.MTU)) {
			t.Errorf("host %d's TAP: %q, want mtu %d", i+1, out, h.MTU)
		}
		if !strings.Contains(fws[i].Output(), fmt.Sprintf("nic=%s", host.VXLAN)) || !strings.Contains(fws[i].Output(), fmt.Sprintf("mtu=%d", h.MTU)) {
			t.Errorf("host %d: tapfwd did not log nic=%s mtu=%d:\n%s", i+1, host.VXLAN, h.MTU, fws[i].Output())
		}
	}
	v := h.View(0, 1)
	payload := h.MTU - 28 // IPv4 and ICMP headers
	testkit.BedRun(t, v, v.WireNS, "ping", "-c", "2", "-i", "0.2", "-M", "do", "-s", fmt.Sprint(payload), v.LabAddr.Addr().String())
	if out, err := v.Run(context.Background(), v.WireNS, "ping", "-c", "1", "-M", "do", "-s", fmt.Sprint(payload+1), v.LabAddr.Addr().String()); err == nil {
		t.Errorf("a %d-byte packet with DF left a lab whose MTU is %d:\n%s", h.MTU+1, h.MTU, out)
	}
}

// vxlanNeighbours: ARP and IPv6 neighbour discovery resolve the other
// lab's TAP across the tunnel (broadcast and solicited-node multicast
// out, unicast back), and a ping to all-nodes multicast is answered by the
// other lab.
func vxlanNeighbours(t *testing.T, h *testbed.Hosts, views [2]*testbed.Bed) {
	for _, v := range views {
		testkit.BedRun(t, v, v.WireNS, "ping", "-c", "2", "-i", "0.2", "-W", "2", v.LabAddr.Addr().String())
		mac := kernel.LinkMAC(t, v.LabNS, v.LabIf).String()
		neigh := testkit.BedRun(t, v, v.WireNS, "ip", "neigh", "show", v.LabAddr.Addr().String(), "dev", v.WireIf)
		if !strings.Contains(neigh, mac) {
			t.Errorf("ARP: %s's neighbour entry %q lacks the other TAP's MAC %s", v.WireNS, neigh, mac)
		}
		kernel.LinkLocal(t, v, v.WireNS, v.WireIf) // ping needs a source address
		ll := kernel.LinkLocal(t, v, v.LabNS, v.LabIf)
		testkit.BedRun(t, v, v.WireNS, "ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", ll+"%"+v.WireIf)
		neigh6 := testkit.BedRun(t, v, v.WireNS, "ip", "-6", "neigh", "show", ll, "dev", v.WireIf)
		if !strings.Contains(neigh6, mac) {
			t.Errorf("IPv6 ND: %s's neighbour entry %q lacks the other TAP's MAC %s", v.WireNS, neigh6, mac)
		}
		all := testkit.BedRun(t, v, v.WireNS, "ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", "ff02::1%"+v.WireIf)
		if !strings.Contains(all, "from "+ll) {
			t.Errorf("ping ff02::1 from %s: no answer from the other lab's %s:\n%s", v.WireNS, ll, all)
		}
	}
}

// vxlanUDP: every datagram iperf3's sender put on the wire in one lab
// reaches the other lab's stack, or is counted as dropped on the way (by a
// forwarder, or by the kernel on a TAP, VXLAN device or underlay veth),
// both ways. What was sent is the sending stack's count, not iperf3's: on
// a busy machine the receiving iperf3 may see only part of the run.
func vxlanUDP(t *testing.T, h *testbed.Hosts, views [2]*testbed.Bed) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	drops := func() int64 {
		n := int64(prom.CountedDrops(t, views[0]) + prom.CountedDrops(t, views[1]))
		for _, host := range h.Host {
			st := kernel.Netdev(t, host.NS, host.Underlay)
			n += int64(st.RxDropped + st.TxDropped)
		}
		return n
	}
	sent := func(ns string) int64 {
		n, err := kernel.SNMP(t, views[0], ns).Counter("Udp", "OutDatagrams")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	v := h.View(0, 1)
	for _, rev := range []bool{false, true} {
		dir := map[bool]string{false: "lab 1 -> lab 2", true: "lab 2 -> lab 1"}[rev]
		txNS := map[bool]string{false: v.WireNS, true: v.LabNS}[rev]
		rxNS := map[bool]string{false: v.LabNS, true: v.WireNS}[rev]
		sentBefore, arrivedBefore, dropsBefore := sent(txNS), kernel.UDPArrived(t, v, rxNS), drops()
		u, err := iperf.Run(ctx, v, iperf.Options{Duration: 2 * time.Second, Reverse: rev, UDP: true, Bitrate: "20M", Len: 1200})
		if err != nil {
			t.Fatalf("UDP %s: %v", dir, err)
		}
		out := sent(txNS) - sentBefore
		arrived, dropped := int64(kernel.UDPArrived(t, v, rxNS)-arrivedBefore), drops()-dropsBefore
		t.Logf("UDP %s: %d datagrams sent, %d arrived, %d counted as dropped (iperf3: %d in its window, %.1f%% lost)",
			dir, out, arrived, dropped, u.Packets, u.LostPercent)
		if out < 1000 || float64(arrived+dropped) < 0.99*float64(out) {
			t.Errorf("UDP %s: %d datagrams sent, %d reached the receiver's stack, %d counted as dropped", dir, out, arrived, dropped)
		}
	}
}

// gsoFrames reads tapfwd_gso_frames_total of dev from the forwarder of
// view v's host.
func gsoFrames(t *testing.T, v *testbed.Bed, dev string) float64 {
	t.Helper()
	return prom.Sample(prom.Scrape(t, v), "tapfwd_gso_frames_total", `device="`+dev+`"`)
}

// vxlanTCP: iperf3 TCP both ways, and GSO super-frames cross whole: the
// sending host's tapfwd reads them from its TAP, the tunnel carries them
// as super-frames on the underlay (larger than its MTU: the kernel's
// UDP-tunnel segmentation is left to the end of the path), and the
// receiving host's tapfwd gets them from its VXLAN device.
func vxlanTCP(t *testing.T, h *testbed.Hosts, views [2]*testbed.Bed) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := h.View(0, 1)
	for _, rev := range []bool{false, true} {
		src, dst := 0, 1
		if rev {
			src, dst = 1, 0
		}
		dir := fmt.Sprintf("lab %d -> lab %d", src+1, dst+1)
		from, to := h.Host[src], h.Host[dst]
		// Outer frames from the sending host's underlay address, seen
		// arriving on the receiving host's underlay veth.
		underlay := traffic.StartCapture(t, views[dst], to.NS, to.Underlay, func(s, d netip.Addr) bool {
			return s == from.UnderlayAddr.Addr() && d == to.UnderlayAddr.Addr()
		})
		tapBefore, nicBefore := gsoFrames(t, views[src], from.LabIf), gsoFrames(t, views[dst], to.VXLAN)
		r, err := iperf.Run(ctx, v, iperf.Options{Duration: 2 * time.Second, Reverse: rev})
		if err != nil {
			t.Fatalf("TCP %s: %v", dir, err)
		}
		underlay.Finish()
		tapGSO := gsoFrames(t, views[src], from.LabIf) - tapBefore
		nicGSO := gsoFrames(t, views[dst], to.VXLAN) - nicBefore
		t.Logf("TCP %s: %.2f Gbit/s, %d retransmits; GSO frames from host %d's TAP %v, from host %d's VXLAN device %v; underlay: %v",
			dir, r.BitsPerSecond/1e9, r.Retransmits, src+1, tapGSO, dst+1, nicGSO, underlay)
		// A stalled path moves almost nothing; the rate is the machine's.
		if r.Bytes < 4<<20 {
			t.Errorf("TCP %s: only %d bytes in 2 s", dir, r.Bytes)
		}
		if tapGSO == 0 || nicGSO == 0 {
			t.Errorf("TCP %s: GSO super-frames from the TAP %v, from the VXLAN device %v; want both above 0", dir, tapGSO, nicGSO)
		}
		if underlay.Big == 0 {
			t.Errorf("TCP %s: the underlay carried no frame above 1514 bytes (%v): the tunnel segmented the super-frames", dir, underlay)
		}
	}
}

// vxlanNested: the labs run a VXLAN tunnel of their own over their
// segment (VNI 77, port 4789), as a guest cluster's overlay would. Host 2's
// VXLAN device has a socket on that port, so its GRO merges the lab
// tunnel's TCP segments into super-frames of TCP inside a UDP tunnel, which
// the vnet header of a packet socket can only call TCPv4: tapfwd segments
// them (offload.SegmentTunnel) rather than drop them as bad_vnet_hdr. A
// token bucket on host 1's underlay releases frames in bursts, so host
// 2's GRO gets several per poll, as a NIC's interrupt coalescing gives it.
func vxlanNested(t *testing.T, h *testbed.Hosts, views [2]*testbed.Bed) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := h.Host[0].LabAddr.Addr().As4()
	inner := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{x[0], x[1], x[2] + 1, byte(i + 1)}) }
	for i, host := range h.Host {
		for _, s := range [][]string{
			{"ip", "link", "add", "vxin", "mtu", fmt.Sprint(h.MTU - testbed.VXLANOverhead), "type", "vxlan", "id", "77", "dstport", "4789",
				"local", host.LabAddr.Addr().String(), "remote", h.Host[1-i].LabAddr.Addr().String(), "dev", host.LabIf},
			{"ip", "addr", "add", inner(i).String() + "/24", "dev", "vxin"},
			{"ip", "link", "set", "dev", "vxin", "up"},
		} {
			testkit.BedRun(t, views[i], host.LabNS, s...)
		}
		defer h.Run(ctx, host.LabNS, "ip", "link", "del", "dev", "vxin")
	}
	host1 := h.Host[0]
	testkit.BedRun(t, views[0], host1.NS, "tc", "qdisc", "replace", "dev", host1.Underlay, "root", "tbf", "rate", "400mbit", "burst", "32k", "latency", "20ms")
	defer h.Run(ctx, host1.NS, "tc", "qdisc", "del", "dev", host1.Underlay, "root")
	// vx0's GRO merges the lab tunnel's segments only when they arrive in
	// bursts, which a busy machine may not give in one run: up to three.
	for try := 1; ; try++ {
		before := prom.ParseCounts(prom.Scrape(t, views[1]), views[1])
		r, err := iperf.Run(ctx, h.View(0, 1), iperf.Options{Duration: 2 * time.Second, Addr: inner(1)})
		if err != nil {
			t.Fatalf("TCP over the labs' own tunnel: %v", err)
		}
		d := prom.ParseCounts(prom.Scrape(t, views[1]), views[1]).Sub(before)
		t.Logf("TCP over the labs' tunnel, lab 1 -> lab 2: %.2f Gbit/s, %d retransmits; host 2's tapfwd: %v frames from vx0, %v segments made, drops %s",
			r.BitsPerSecond/1e9, r.Retransmits, d.NICRx, d.Segments, prom.NonZero(d.NICDrops))
		// The rate is not the point (a shared machine and the token bucket
		// decide it): that the flow moves, and nothing is dropped, is.
		if r.Bytes < 1<<20 {
			t.Errorf("only %d bytes in 2 s over the labs' tunnel", r.Bytes)
		}
		if d.NICDrops["bad_vnet_hdr"] != 0 || d.NICDrops["segmentation"] != 0 {
			t.Errorf("host 2's tapfwd dropped frames from its VXLAN device: %s", prom.NonZero(d.NICDrops))
		}
		if d.Segments > 0 || t.Failed() {
			return
		}
		if try == 3 {
			t.Error("host 2's tapfwd segmented nothing in three runs: its VXLAN device's GRO merged none of the lab tunnel's segments (no bursts?)")
			return
		}
	}
}

// vxlanVLAN: 802.1Q-tagged frames from one lab reach the other with their
// tag, both ways (the VXLAN device, like a veth, strips it into the skb on
// receive; tapfwd puts it back): a small one, and one whose IP packet fills
// the MTU. The tag takes that one 4 bytes past what the underlay carries
// in one packet (1450 + 18 + 50 > 1500), so the VXLAN device's outer
// packet is fragmented on the underlay (its df is unset by default) and
// reassembled by the other host.
func vxlanVLAN(t *testing.T, h *testbed.Hosts, views [2]*testbed.Bed) {
	for i, v := range views {
		// v: from lab 2-i to lab i+1.
		src, dst := kernel.LinkMAC(t, v.WireNS, v.WireIf), kernel.LinkMAC(t, v.LabNS, v.LabIf)
		from := traffic.OpenRaw(t, v, v.WireNS, v.WireIf)
		to := traffic.OpenRaw(t, v, v.LabNS, v.LabIf)
		for _, payload := range []int{400, h.MTU - 28} {
			inner := traffic.UDPPacketLen(t, v, payload)
			tci := uint16(0x2000 | (100 + i))
			reasm := func() int64 {
				n, _ := kernel.SNMP(t, v, v.FwdNS).Counter("Ip", "ReasmOKs")
				return n
			}
			before := reasm()
			if _, err := syscall.Write(from, traffic.Tagged(t, src, dst, tci, inner)); err != nil {
				t.Fatalf("%d-byte packet: %v", len(inner), err)
			}
			if got := traffic.RecvTagged(t, to, src, inner); got != tci {
				t.Errorf("%s -> %s, %d-byte packet: VLAN TCI %#x, want %#x", v.WireNS, v.LabNS, len(inner), got, tci)
			}
			if n := reasm() - before; payload > 400 && n == 0 {
				t.Errorf("%s -> %s, %d-byte packet: host %d reassembled no outer packet; want the tagged full-size frame fragmented on the underlay",
					v.WireNS, v.LabNS, len(inner), i+1)
			}
		}
	}
}

// vxlanGuests boots a QEMU guest on a VM port of each host's TAP, both at
// once. Each pings the other host's lab and the other guest, and sends 4
// MiB to the other host's lab and fetches 4 MiB from it (SHA-256 on both
// ends), with its TSO on: the guests' super-frames cross the tunnel too.
// The guests are offered the VXLAN MTU (host_mtu): a guest that assumed
// 1500 would send frames the tunnel cannot carry.
func vxlanGuests(t *testing.T, h *testbed.Hosts, views [2]*testbed.Bed, img vm.Image) {
	const mib = 4
	var (
		ports  [2]vm.Port
		srvs   [2]*traffic.DataServer
		guests [2]*vm.Guest
	)
	base := h.Host[0].LabAddr.Addr().As4()
	guestAddr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(11 + i)}) }
	for i, host := range h.Host {
		ports[i] = vm.AddPort(t, testkit.Tapfwd(t), host.LabNS, host.LabIf)
		// The data server of guest i runs in the other host's lab:
		// views[i]'s WireNS.
		srvs[i] = traffic.StartDataServer(t, views[i], mib<<20)
	}
	for i := range guests {
		p := ports[i]
		p.MTU = h.MTU
		other := h.Host[1-i].LabAddr.Addr()
		guests[i] = vm.Boot(t, views[i], fmt.Sprintf("guest%d", i+1), img, p, netip.PrefixFrom(guestAddr(i), 24),
			"tfw.gw="+other.String(), "tfw.ping="+guestAddr(1-i).String(),
			fmt.Sprintf("tfw.tx=%d", srvs[i].TxPort), fmt.Sprintf("tfw.rx=%d", srvs[i].RxPort), fmt.Sprintf("tfw.mib=%d", mib))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(guests))
	for i, g := range guests {
		wg.Go(func() { errs[i] = g.Wait(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("both guests done %.1f s after boot", time.Since(start).Seconds())
	for i, g := range guests {
		g.CheckPings(t, h.Host[1-i].LabAddr.Addr(), guestAddr(1-i))
		// virtio-net feature bits (include/uapi/linux/virtio_net.h): MTU
		// 3 (the host_mtu offered), HOST_TSO4 11 (the guest sends TSO).
		g.CheckFeatures(t, 3, 11)
		srvs[i].Check(t, fmt.Sprintf("%s on host %d, with lab %d", g.Name, i+1, 2-i), g.Addr, g.Line)
	}
}

// TestVXLANStrictMAC runs both forwarders with --strict-mac: the labs still
// reach each other (the filter on the VXLAN device's packet sockets lets
// through the TAP's unicast, broadcast and multicast), and a frame with a
// forged source MAC from a lab is dropped as spoofed_mac on its host.
func TestVXLANStrictMAC(t *testing.T) {
	testkit.NeedRoot(t, "ping")
	h := testbed.NewHostsForTest(t, testbed.HostsConfig{Peering: testbed.PeerRemote})
	testkit.StartHosts(t, h, testkit.Tapfwd(t), func(int) []string { return []string{"--strict-mac"} })
	v := h.View(0, 1)
	testkit.BedRun(t, v, v.WireNS, "ping", "-c", "3", "-i", "0.2", v.LabAddr.Addr().String())
	testkit.BedRun(t, v, v.LabNS, "ping", "-c", "3", "-i", "0.2", v.WireAddr.Addr().String())

	lab := traffic.OpenRaw(t, v, v.WireNS, v.WireIf)
	bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	forged := append(append(append([]byte(nil), bcast...), 2, 0, 0, 0xbb, 0, 9), 0x08, 0x00)
	forged = append(forged, traffic.UDPPacket(t, v)...)
	for i := 0; i < 5; i++ {
		if _, err := syscall.Write(lab, forged); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	host1 := h.View(1, 0) // scrapes host 1's forwarder
	m := prom.Scrape(t, host1)
	if d := prom.Sample(m, "tapfwd_drops_total", `reason="spoofed_mac"`, `device="`+h.Host[0].LabIf+`"`); d < 5 {
		t.Errorf("host 1: spoofed_mac drops = %v, want >= 5", d)
	}
}
