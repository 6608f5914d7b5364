package tap_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/offload"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// What offload's GRO builds, checked against this kernel: the UDP
// super-frames Coalesce makes (their layout is checked in offload's own
// tests) written into a real TAP, and what the kernel does with them.

// IPv6 addresses of the USO test, from the IPv6 benchmarking range
// (RFC 5180), the counterpart of the beds' 198.18.0.0/15.
var (
	usoWire6 = net.ParseIP("2001:2::1")
	usoLab6  = net.ParseIP("2001:2::2")
)

// udpMaxSegments is UDP_MAX_SEGMENTS (include/linux/udp.h): the most
// datagrams the kernel takes in one USO frame; udpGROMaxSegments is
// UDP_GRO_CNT_MAX (net/ipv4/udp_offload.c), the most its GRO merges into
// one, where offload's GRO stops too. TestUSOIntoTAP checks both.
const (
	udpMaxSegments    = 128
	udpGROMaxSegments = 64
)

// TestUSOIntoTAP checks, on this kernel, what the UDP half of
// offload.GRO.Coalesce relies on: a USO super-frame written into an
// IFF_VNET_HDR TAP (drivers/net/tun.c: tun_get_user ->
// include/linux/virtio_net.h: virtio_net_hdr_to_skb, as SKB_GSO_UDP_L4)
// reaches a plain UDP socket as the original datagrams, in order
// (net/ipv4/udp.c: udp_queue_rcv_skb -> udp_rcv_segment; the same for
// IPv6), and a socket with UDP_GRO as one read with the GSO size in a
// control message. It does so with and without IFF_NAPI (the TAP's own GRO
// must let a GSO skb through), with TUNSETOFFLOAD with and without USO (the
// offloads only say what the TAP may hand out), and it checks that a frame
// of UDP_MAX_SEGMENTS+1 datagrams is refused; Coalesce stops earlier, at
// the kernel GRO's UDP_GRO_CNT_MAX.
func TestUSOIntoTAP(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	for _, tc := range []struct {
		name     string
		napi     tap.Want
		offloads int // 0: what tap.Open negotiates (USO included)
	}{
		{"no-napi", tap.Off, 0},
		{"napi", tap.On, 0},
		{"napi/offloads-without-uso", tap.On, unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testUSOIntoTAP(t, bed, tc.napi, tc.offloads)
		})
	}
}

// openUSO opens bed's lab TAP in the lab with a vnet header, IFF_NAPI as
// napi says, up and with the bed's lab address; it is closed when tb ends.
// It skips tb if the TAP cannot take USO writes.
func openUSO(tb testing.TB, bed *testbed.Bed, napi tap.Want) *tap.Device {
	tb.Helper()
	var d *tap.Device
	err := bed.Do(bed.LabNS, func() error {
		var err error
		d, err = tap.Open(tap.Config{Name: bed.LabIf, NAPI: napi, VnetHdr: tap.On, Addr: bed.LabAddr})
		return err
	})
	if err != nil {
		tb.Fatalf("opening TAP %s in %s: %v", bed.LabIf, bed.LabNS, err)
	}
	tb.Cleanup(func() { d.Close() })
	requireUSO(tb, d)
	return d
}

// requireUSO skips tb when the TAP's kernel cannot take USO writes: USO came
// to virtio_net_hdr_to_skb with TUN_F_USO4/TUN_F_USO6 (Linux 6.2), so a
// TUNSETOFFLOAD that refused them says the write would be refused too.
func requireUSO(tb testing.TB, d *tap.Device) {
	tb.Helper()
	if uso := uint32(unix.TUN_F_USO4 | unix.TUN_F_USO6); d.Features().Offloads&uso != uso {
		tb.Skip("this kernel's TAP has no USO (Linux 6.2 added it): the forwarder must run GRO with SetUDP(false)")
	}
}

// write writes one frame, vnet header first, into the TAP's first queue.
func write(d *tap.Device, b []byte) error {
	_, err := d.Queues()[0].Write([][]byte{b}, 0)
	return err
}

func testUSOIntoTAP(t *testing.T, bed *testbed.Bed, napi tap.Want, offloads int) {
	d := openUSO(t, bed, napi)
	if offloads != 0 {
		if err := unix.IoctlSetInt(d.Fds()[0], unix.TUNSETOFFLOAD, offloads); err != nil {
			t.Fatalf("TUNSETOFFLOAD %#x: %v", offloads, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := bed.Run(ctx, bed.LabNS, "ip", "-6", "addr", "add", usoLab6.String()+"/64", "dev", d.Name(), "nodad"); err != nil {
		t.Fatalf("adding %s: %v %s", usoLab6, err, out)
	}
	for _, dst := range []struct {
		v6, bcast bool
	}{
		{v6: false}, {v6: true},
		// A subnet broadcast takes the multicast path of the UDP stack
		// (__udp4_lib_mcast_deliver), which splits a GSO skb per socket.
		{bcast: true},
	} {
		for _, sz := range []struct{ n, size, last int }{
			{40, 100, 37}, // a short last datagram ends the run
			{udpGROMaxSegments, 18, 0},
			{3, 1472, 0},
		} {
			for _, groSock := range []bool{false, true} {
				name := fmt.Sprintf("v6=%v/broadcast=%v/%dx%d+%d/udp_gro=%v", dst.v6, dst.bcast, sz.n, sz.size, sz.last, groSock)
				t.Run(name, func(t *testing.T) {
					base, bind := usoBase(bed, d, dst.v6, dst.bcast, groSock)
					s := udpSocket(t, bed, bed.LabNS, bind, base.dport, groSock)
					segs := run(base, sz.n, sz.size, sz.last, byte(sz.size))
					f := coalesceAll(t, segs, vnethdrtest.MixedModes)
					buf := wire(f)
					before := udpStats(t, bed, dst.v6)
					if err := write(d, buf); err != nil {
						t.Fatalf("writing the %d-byte super-frame %+v: %v", len(buf), f.Hdr, err)
					}
					if groSock {
						recvGRO(t, s, segs)
					} else {
						recvAll(t, s, segs)
					}
					after := udpStats(t, bed, dst.v6)
					t.Logf("%s: one %d-byte write (gso_size %d, %d datagrams); socket: %d datagrams in, %d errors, %d checksum errors",
						name, len(buf), f.Hdr.GSOSize, len(segs), after[0]-before[0], after[1]-before[1], after[2]-before[2])
					if after[1] != before[1] || after[2] != before[2] {
						t.Errorf("UDP errors in the lab: before %v, after %v", before, after)
					}
				})
			}
		}
	}
	testMaxSegments(t, bed, d)
}

// usoBase is the first datagram of a run from the wire to the lab's TAP d
// (or its subnet broadcast), to port 7001 (7002 for a UDP_GRO socket, 2
// more for broadcast), and the address its socket binds.
func usoBase(bed *testbed.Bed, d *tap.Device, v6, bcast, groSock bool) (datagram, net.IP) {
	lab4 := net.IP(bed.LabAddr.Addr().AsSlice())
	port := uint16(7001)
	if groSock {
		port++
	}
	base := datagram{dport: port, dstMAC: d.MAC(), id: 0xfff0,
		src: net.IP(bed.WireAddr.Addr().AsSlice()), dst: lab4}
	switch {
	case v6:
		base.v6, base.src, base.dst = true, usoWire6, usoLab6
	case bcast:
		bcast4 := lab4.Mask(net.CIDRMask(bed.LabAddr.Bits(), 32))
		bcast4[3] |= ^byte(0) >> (bed.LabAddr.Bits() - 24)
		base.dport += 2
		base.dst, base.dstMAC = bcast4, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		return base, net.IPv4zero
	}
	return base, base.dst
}

// testMaxSegments checks UDP_MAX_SEGMENTS on this kernel: one datagram more
// than Coalesce ever merges is refused at the write, and Coalesce merges no
// more than the kernel takes.
func testMaxSegments(t *testing.T, bed *testbed.Bed, d *tap.Device) {
	base, _ := usoBase(bed, d, false, false, false)
	base.dstMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 2} // not the TAP's: the stack drops it unread
	for _, segs := range []int{udpMaxSegments, udpMaxSegments + 1} {
		err := write(d, wire(uso(t, base, 18, segs)))
		switch {
		case segs <= udpMaxSegments && err != nil:
			t.Errorf("a USO frame of %d segments: %v", segs, err)
		case segs > udpMaxSegments && !errors.Is(err, unix.EINVAL):
			t.Errorf("a USO frame of %d segments: %v, want EINVAL (UDP_MAX_SEGMENTS is %d)", segs, err, udpMaxSegments)
		}
	}
	// 129 datagrams: runs of 64, 64 and 1.
	fs := frames(t, run(base, udpMaxSegments+1, 18, 0, 5), vnethdrtest.AllModes(vnethdrtest.CsumValid))
	want := udpMaxSegments + 1 - 3
	if n := offload.NewGRO(len(fs)).Coalesce(fs); n != want || fs[udpGROMaxSegments].Merged || fs[2*udpGROMaxSegments].Merged {
		t.Errorf("Coalesce of %d datagrams merged %d (datagram %d merged: %v, %d: %v); want %d, runs of at most %d",
			udpMaxSegments+1, n, udpGROMaxSegments, fs[udpGROMaxSegments].Merged, 2*udpGROMaxSegments, fs[2*udpGROMaxSegments].Merged, want, udpGROMaxSegments)
	}
}

// udpSocket opens a UDP socket in namespace ns bound to addr:port, with
// UDP_GRO if gro, and a 2 s receive timeout; it is closed when t ends.
func udpSocket(t testing.TB, bed *testbed.Bed, ns string, addr net.IP, port uint16, gro bool) int {
	t.Helper()
	fd := -1
	err := bed.Do(ns, func() error {
		var sa unix.Sockaddr
		family := unix.AF_INET
		if a4 := addr.To4(); a4 != nil {
			sa = &unix.SockaddrInet4{Port: int(port), Addr: [4]byte(a4)}
		} else {
			family = unix.AF_INET6
			sa = &unix.SockaddrInet6{Port: int(port), Addr: [16]byte(addr.To16())}
		}
		var err error
		if fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20); err != nil {
			return err
		}
		if gro {
			if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
				return fmt.Errorf("UDP_GRO: %w", err)
			}
		}
		tv := unix.NsecToTimeval((2 * time.Second).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, sa)
	})
	if fd >= 0 {
		t.Cleanup(func() { unix.Close(fd) })
	}
	if err != nil {
		t.Fatalf("UDP socket on %s port %d: %v", addr, port, err)
	}
	return fd
}

// recv reads one datagram into b and its control messages into oob, and
// returns them with the sender's port; without MSG_DONTWAIT in flags the
// socket's SO_RCVTIMEO bounds the wait.
func recv(fd int, b, oob []byte, flags int) (data, cmsgs []byte, port int, err error) {
	for {
		n, oobn, _, from, err := unix.Recvmsg(fd, b, oob, flags)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, nil, 0, err
		}
		switch sa := from.(type) {
		case *unix.SockaddrInet4:
			port = sa.Port
		case *unix.SockaddrInet6:
			port = sa.Port
		}
		return b[:n], oob[:oobn], port, nil
	}
}

// recvAll reads segs from a socket without UDP_GRO: one datagram each, in
// order, from port 40000, and nothing after them.
func recvAll(t *testing.T, fd int, segs []datagram) {
	t.Helper()
	for i, sg := range segs {
		b, _, from, err := recv(fd, make([]byte, 65536), nil, 0)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, len(segs), err)
		}
		if from != srcPort {
			t.Fatalf("datagram %d from port %d, want %d", i, from, srcPort)
		}
		if !bytes.Equal(b, sg.payload) {
			t.Fatalf("datagram %d: %d bytes %x, want %d bytes %x", i, len(b), b, len(sg.payload), sg.payload)
		}
	}
	// Every datagram of the skb was queued at once (udp_queue_rcv_skb), so
	// nothing more is coming.
	if b, _, _, err := recv(fd, make([]byte, 65536), nil, unix.MSG_DONTWAIT); err == nil {
		t.Fatalf("one datagram too many: %d bytes", len(b))
	}
}

// recvGRO reads what a UDP_GRO socket gets for segs: the payloads in one
// read, with the GSO size (the first datagram's length) in a UDP_GRO control
// message (net/ipv4/udp.c: udp_cmsg_recv).
func recvGRO(t *testing.T, fd int, segs []datagram) {
	t.Helper()
	var want []byte
	for _, s := range segs {
		want = append(want, s.payload...)
	}
	b, oob, _, err := recv(fd, make([]byte, 65536), make([]byte, unix.CmsgSpace(4)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("UDP_GRO read of %d bytes, want the %d bytes of %d datagrams", len(b), len(want), len(segs))
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 || msgs[0].Header.Level != unix.SOL_UDP || msgs[0].Header.Type != unix.UDP_GRO || len(msgs[0].Data) < 4 {
		t.Fatalf("control messages %+v, %v: want one UDP_GRO", msgs, err)
	}
	if got := int(binary.NativeEndian.Uint32(msgs[0].Data)); got != len(segs[0].payload) {
		t.Fatalf("UDP_GRO gso_size %d, want %d", got, len(segs[0].payload))
	}
}

// udpStats reads InDatagrams, InErrors and InCsumErrors of Udp (or Udp6)
// in the lab.
func udpStats(t *testing.T, bed *testbed.Bed, v6 bool) [3]int64 {
	t.Helper()
	proto := "Udp"
	if v6 {
		proto = "Udp6"
	}
	c := kernel.SNMP(t, bed, bed.LabNS)
	var out [3]int64
	for i, name := range []string{"InDatagrams", "InErrors", "InCsumErrors"} {
		v, err := c.Counter(proto, name)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

// BenchmarkTAPWriteUSO is what the UDP half of Coalesce saves the forwarder:
// 64 datagrams (64 bytes of payload each, iperf3 -u -l 64) written into a
// TAP one write each ("datagrams") or as one USO super-frame ("uso"), with
// and without IFF_NAPI. A UDP socket in the lab is bound to the port but
// never read: once its buffer is full the kernel drops each datagram at the
// socket queue (UDP RcvbufErrors), so both ways pay the receive path up to
// there and nothing after. It needs root (a test bed); pps counts datagrams.
func BenchmarkTAPWriteUSO(b *testing.B) {
	bed := testbed.NewForTest(b, testbed.Config{Mode: testbed.Forwarder})
	for k, napi := range []tap.Want{tap.Off, tap.On} {
		d := openUSO(b, bed, napi)
		q := d.Queues()[0]
		port := uint16(7001 + k)
		base := datagram{dport: port, dstMAC: d.MAC(),
			src: net.IP(bed.WireAddr.Addr().AsSlice()), dst: net.IP(bed.LabAddr.Addr().AsSlice())}
		udpSocket(b, bed, bed.LabNS, base.dst, port, false)
		segs := run(base, 64, 64, 0, 1)
		fs := frames(b, segs, vnethdrtest.AllModes(vnethdrtest.CsumValid))
		var single [][]byte
		for _, f := range fs {
			single = append(single, wire(f))
		}
		if offload.NewGRO(len(fs)).Coalesce(fs) != len(fs)-1 {
			b.Fatal("the batch did not merge into one frame")
		}
		uso := [][]byte{wire(fs[0])}
		name := "napi=" + napi.String()
		write := func(b *testing.B, w [][]byte) {
			for len(w) > 0 {
				n, err := q.Write(w, 0)
				w = w[n:]
				if err != nil && err != unix.EAGAIN {
					b.Fatal(err)
				}
			}
		}
		measure := func(b *testing.B, batch func(b *testing.B)) {
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch(b)
			}
			b.ReportMetric(float64(len(segs))*float64(b.N)/b.Elapsed().Seconds(), "pps")
		}
		b.Run(name+"/datagrams", func(b *testing.B) {
			measure(b, func(b *testing.B) { write(b, single) })
		})
		b.Run(name+"/uso", func(b *testing.B) {
			measure(b, func(b *testing.B) { write(b, uso) })
		})
		d.Close()
	}
}

// TestUSOForwarded checks the other way the kernel splits a USO super-frame
// written into a TAP: when the namespace routes it on (net/ipv4/ip_forward.c
// checks each segment against the MTU), out of a veth that keeps it whole
// (tx-udp-segmentation on, the receiving namespace's socket splits it) or
// one that makes the kernel segment it at transmit
// (net/core/dev.c: validate_xmit_skb -> skb_gso_segment).
func TestUSOForwarded(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	d := openUSO(t, bed, tap.Auto)
	// lab f0 198.19.X.2/24 <-> wire f1 198.19.X.1/24: the second half of
	// the benchmarking range, in the bed's own namespaces.
	x := bed.LabAddr.Addr().As4()[2]
	far := net.IPv4(198, 19, x, 1).To4()
	farMAC := "02:00:00:00:19:01"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range [][]string{
		{"ip", "-n", bed.LabNS, "link", "add", "f0", "type", "veth", "peer", "name", "f1", "address", farMAC, "netns", bed.WireNS},
		{"ip", "-n", bed.LabNS, "addr", "add", fmt.Sprintf("198.19.%d.2/24", x), "dev", "f0"},
		{"ip", "-n", bed.WireNS, "addr", "add", fmt.Sprintf("198.19.%d.1/24", x), "dev", "f1"},
		{"ip", "-n", bed.LabNS, "link", "set", "f0", "up"},
		{"ip", "-n", bed.WireNS, "link", "set", "f1", "up"},
		{"ip", "-n", bed.LabNS, "neigh", "replace", far.String(), "lladdr", farMAC, "dev", "f0", "nud", "permanent"},
		{"ip", "netns", "exec", bed.LabNS, "sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"},
	} {
		if out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", strings.Join(c, " "), err, out)
		}
	}
	for i, uso := range []string{"on", "off"} {
		t.Run("tx-udp-segmentation="+uso, func(t *testing.T) {
			if out, err := bed.Run(ctx, bed.LabNS, "ethtool", "-K", "f0", "tx-udp-segmentation", uso); err != nil {
				t.Fatalf("ethtool: %v %s", err, out)
			}
			port := uint16(7010 + i)
			s := udpSocket(t, bed, bed.WireNS, far, port, false)
			// Not the wire's own 198.18.X.1: a packet from a local
			// address arriving on f1 is a martian there.
			base := datagram{dport: port, dstMAC: d.MAC(), id: 100,
				src: net.IPv4(198, 18, x, 3).To4(), dst: far}
			segs := run(base, 64, 64, 20, 7)
			fs := frames(t, segs, vnethdrtest.AllModes(vnethdrtest.CsumValid))
			if n := offload.NewGRO(len(fs)).Coalesce(fs); n != len(fs)-1 {
				t.Fatalf("merged %d of %d", n, len(fs))
			}
			before := kernel.Netdev(t, bed.WireNS, "f1").RxPackets
			if err := write(d, wire(fs[0])); err != nil {
				t.Fatal(err)
			}
			recvAll(t, s, segs)
			// Whole through the veth, or segmented before it. The count
			// may include a little IPv6 chatter (router solicitations) of
			// the freshly made veth.
			got := kernel.Netdev(t, bed.WireNS, "f1").RxPackets - before
			if uso == "on" && (got < 1 || got > 3) {
				t.Errorf("f1 received %d packets, want the one super-frame", got)
			}
			if uso == "off" && (got < uint64(len(segs)) || got > uint64(len(segs))+2) {
				t.Errorf("f1 received %d packets, want the %d datagrams", got, len(segs))
			}
		})
	}
}

// ---- UDP datagrams and the frames Coalesce takes ----

// srcPort is the source port of every test datagram.
const srcPort = 40000

// datagram is one UDP datagram from src to dst (IPv4, or IPv6 with v6).
type datagram struct {
	v6       bool
	src, dst net.IP
	dstMAC   net.HardwareAddr
	dport    uint16
	id       uint16 // IPv4 identification
	payload  []byte
}

// run makes n datagrams of base with size bytes of payload each (the last
// one last bytes if not 0), numbered from base.id.
func run(base datagram, n, size, last int, seed byte) []datagram {
	out := make([]datagram, n)
	for i := range out {
		s := base
		sz := size
		if i == n-1 && last != 0 {
			sz = last
		}
		s.id = base.id + uint16(i)
		s.payload = make([]byte, sz)
		for j := range s.payload {
			s.payload[j] = seed + byte(i) + byte(j*7)
		}
		out[i] = s
	}
	return out
}

// l4 is the offset of the UDP header in the frame.
func (d datagram) l4() int {
	if d.v6 {
		return 14 + 40
	}
	return 14 + 20
}

// build serializes d as an Ethernet frame, lengths and checksums computed
// by gopacket (a computed 0 sent as 0xffff, RFC 768), DF set on IPv4.
func (d datagram) build(tb testing.TB) []byte {
	tb.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 1}, DstMAC: d.dstMAC, EthernetType: layers.EthernetTypeIPv4}
	u := &layers.UDP{SrcPort: srcPort, DstPort: layers.UDPPort(d.dport)}
	var ip gopacket.SerializableLayer
	if d.v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: d.src, DstIP: d.dst, NextHeader: layers.IPProtocolUDP}
		u.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	} else {
		ip4 := &layers.IPv4{Version: 4, TTL: 64, Id: d.id, Flags: layers.IPv4DontFragment, SrcIP: d.src, DstIP: d.dst, Protocol: layers.IPProtocolUDP}
		u.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true},
		eth, ip, u, gopacket.Payload(d.payload)); err != nil {
		tb.Fatal(err)
	}
	// Cut gopacket's padding to 60 bytes: a packet socket does not pad.
	b := append([]byte(nil), buf.Bytes()[:d.l4()+8+len(d.payload)]...)
	if c := b[d.l4()+6:]; c[0] == 0 && c[1] == 0 {
		c[0], c[1] = 0xff, 0xff
	}
	return b
}

// pseudoSum is the folded ones' complement sum of d's pseudo-header for
// l4Len bytes of UDP (RFC 768, RFC 8200 section 8.1): what the check
// field holds with NEEDS_CSUM.
func (d datagram) pseudoSum(l4Len int) uint16 {
	var p []byte
	if d.v6 {
		p = append(append(p, d.src.To16()...), d.dst.To16()...)
		p = append(p, 0, 0, byte(l4Len>>8), byte(l4Len), 0, 0, 0, unix.IPPROTO_UDP)
	} else {
		p = append(append(p, d.src.To4()...), d.dst.To4()...)
		p = append(p, 0, unix.IPPROTO_UDP, byte(l4Len>>8), byte(l4Len))
	}
	return ^testbed.Checksum(p)
}

// headroom is where test frames start in their Buf, like the forwarder's.
const headroom = 32

// frames puts segs into Frames with room to grow to a 64 KiB super-frame,
// in the checksum states mode gives.
func frames(tb testing.TB, segs []datagram, mode func(int) vnethdrtest.CsumMode) []offload.Frame {
	tb.Helper()
	fs := make([]offload.Frame, len(segs))
	for i, s := range segs {
		f := s.build(tb)
		buf := make([]byte, headroom+len(f), headroom+len(f)+65536)
		copy(buf[headroom:], f)
		fs[i] = offload.Frame{Buf: buf, Start: headroom, End: headroom + len(f)}
		switch mode(i) {
		case vnethdrtest.CsumValid:
			fs[i].Hdr.Flags = vnethdr.FlagDataValid
		case vnethdrtest.CsumPartial:
			binary.BigEndian.PutUint16(buf[headroom+s.l4()+6:], s.pseudoSum(len(f)-s.l4()))
			fs[i].Hdr = vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, HdrLen: uint16(s.l4() + 8),
				CsumStart: uint16(s.l4()), CsumOffset: 6}
		}
	}
	return fs
}

// coalesceAll coalesces segs, which must merge into one super-frame, and
// returns it.
func coalesceAll(t *testing.T, segs []datagram, mode func(int) vnethdrtest.CsumMode) offload.Frame {
	t.Helper()
	fs := frames(t, segs, mode)
	if n := offload.NewGRO(len(fs)).Coalesce(fs); n != len(fs)-1 {
		t.Fatalf("Coalesce merged %d of %d datagrams, want all into the first", n, len(fs))
	}
	return fs[0]
}

// uso is one USO super-frame of segs datagrams of size bytes from base, as
// a packet socket hands one out: IP and UDP lengths of the whole, the
// pseudo-header sum in the check field, NEEDS_CSUM, GSO_UDP_L4.
func uso(tb testing.TB, base datagram, size, segs int) offload.Frame {
	tb.Helper()
	base.payload = bytes.Repeat([]byte{9}, size*segs)
	f := frames(tb, []datagram{base}, vnethdrtest.AllModes(vnethdrtest.CsumPartial))[0]
	f.Hdr.GSOType, f.Hdr.GSOSize = vnethdr.GSOUDPL4, uint16(size)
	return f
}

// wire is f as written into a TAP: the vnet header, then the frame.
func wire(f offload.Frame) []byte {
	b := make([]byte, vnethdr.Len, vnethdr.Len+f.End-f.Start)
	f.Hdr.Encode(b)
	return append(b, f.Buf[f.Start:f.End]...)
}
