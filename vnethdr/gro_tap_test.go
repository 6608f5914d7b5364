package vnethdr

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/testbed"
)

// IPv6 addresses of the USO test, from the IPv6 benchmarking range
// (RFC 5180), the counterpart of the beds' 198.18.0.0/15.
var (
	usoWire6 = net.ParseIP("2001:2::1")
	usoLab6  = net.ParseIP("2001:2::2")
)

// TestUSOIntoTAP checks, on this kernel, what the UDP half of Coalesce relies
// on: a USO super-frame written into an IFF_VNET_HDR TAP (drivers/net/tun.c:
// tun_get_user -> include/linux/virtio_net.h: virtio_net_hdr_to_skb, as
// SKB_GSO_UDP_L4) reaches a plain UDP socket as the original datagrams, in
// order (net/ipv4/udp.c: udp_queue_rcv_skb -> udp_rcv_segment; the same for
// IPv6), and a socket with UDP_GRO as one read with the GSO size in a
// control message. It does so with and without IFF_NAPI (the TAP's own GRO
// must let a GSO skb through), with TUNSETOFFLOAD with and without USO (the
// offloads only say what the TAP may hand out), and it checks that a frame of
// UDP_MAX_SEGMENTS+1 datagrams is refused, which is why Coalesce stops at
// udpMaxSegments.
func TestUSOIntoTAP(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	for _, tc := range []struct {
		name     string
		napi     string
		offloads int // 0: what openUSO negotiates (USO included)
	}{
		{"no-napi", "off", 0},
		{"napi", "on", 0},
		{"napi/offloads-without-uso", "on", unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testUSOIntoTAP(t, bed, tc.napi, tc.offloads)
		})
	}
}

// usoTAP is the lab TAP the USO tests write into. Package tap imports this
// one, so these tests open it with the ioctls tap.Open makes.
type usoTAP struct {
	fd       int
	name     string
	mac      net.HardwareAddr
	offloads uint32 // TUN_F_* accepted by TUNSETOFFLOAD
}

func (d *usoTAP) Fds() []int            { return []int{d.fd} }
func (d *usoTAP) Name() string          { return d.name }
func (d *usoTAP) MAC() net.HardwareAddr { return d.mac }

// Close closes the TAP, which goes with its only fd; again, it does nothing.
func (d *usoTAP) Close() {
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// openUSO opens the bed's lab TAP with a vnet header, IFF_NAPI as napi
// says ("off", "on", or "auto": when the kernel offers it), up and with
// the bed's lab address, closed when tb ends. It skips tb if the TAP
// cannot take USO writes.
func openUSO(tb testing.TB, bed *testbed.Bed, napi string) *usoTAP {
	tb.Helper()
	d := &usoTAP{fd: -1, name: bed.LabIf}
	err := bed.Do(bed.LabNS, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		d.fd = fd
		kern, err := unix.IoctlGetUint32(fd, unix.TUNGETFEATURES)
		if err != nil {
			return err
		}
		flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if napi == "on" || napi == "auto" && kern&unix.IFF_NAPI != 0 {
			flags |= unix.IFF_NAPI
		}
		ifr, _ := unix.NewIfreq(d.name)
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("TUNSETIFF: %w", err)
		}
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, Len); err != nil {
			return err
		}
		uso := unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_USO4 | unix.TUN_F_USO6
		if unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, uso) == nil {
			d.offloads = uint32(uso)
		}
		return unix.SetNonblock(fd, true)
	})
	tb.Cleanup(d.Close)
	if err != nil {
		tb.Fatalf("opening TAP %s in %s: %v", d.name, bed.LabNS, err)
	}
	ns, err := netns.Open(bed.LabNS)
	if err != nil {
		tb.Fatal(err)
	}
	defer ns.Close()
	l, err := ns.Link(d.name)
	if err == nil {
		d.mac = l.MAC
		err = ns.SetLink(l.Index, netns.LinkChange{Up: true})
	}
	if err == nil {
		err = ns.AddAddr(l.Index, bed.LabAddr)
	}
	if err != nil {
		tb.Fatal(err)
	}
	requireUSO(tb, d)
	return d
}

// wire is f as written into a TAP: the vnet header, then the frame.
func wire(f Frame) []byte {
	b := make([]byte, Len, Len+f.End-f.Start)
	f.Hdr.Encode(b)
	return append(b, f.Buf[f.Start:f.End]...)
}

func testUSOIntoTAP(t *testing.T, bed *testbed.Bed, napi string, offloads int) {
	d := openUSO(t, bed, napi)
	fd := d.Fds()[0]
	if offloads != 0 {
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, offloads); err != nil {
			t.Fatalf("TUNSETOFFLOAD %#x: %v", offloads, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := bed.Run(ctx, bed.LabNS, "ip", "-6", "addr", "add", usoLab6.String()+"/64", "dev", d.Name(), "nodad"); err != nil {
		t.Fatalf("adding %s: %v %s", usoLab6, err, out)
	}
	lab4 := net.IP(bed.LabAddr.Addr().AsSlice())
	wire4 := net.IP(bed.WireAddr.Addr().AsSlice())
	bcast4 := lab4.Mask(net.CIDRMask(bed.LabAddr.Bits(), 32))
	bcast4[3] |= ^byte(0) >> (bed.LabAddr.Bits() - 24)

	for _, dst := range []struct {
		v6, bcast bool
	}{
		{v6: false}, {v6: true},
		// A subnet broadcast takes the multicast path of the UDP stack
		// (__udp4_lib_mcast_deliver), which splits a GSO skb per socket.
		{bcast: true},
	} {
		v6 := dst.v6
		for _, sz := range []struct{ n, size, last int }{
			{40, 100, 37}, // a short last datagram ends the run
			{udpMaxSegments, 18, 0},
			{3, 1472, 0},
		} {
			for _, groSock := range []bool{false, true} {
				name := fmt.Sprintf("v6=%v/broadcast=%v/%dx%d+%d/udp_gro=%v", v6, dst.bcast, sz.n, sz.size, sz.last, groSock)
				t.Run(name, func(t *testing.T) {
					port := uint16(7001)
					if groSock {
						port++
					}
					base := groSeg{udp: true, v6: v6, dstPort: port, dstMAC: d.MAC(), id: 0xfff0,
						srcIP: wire4, dstIP: lab4}
					bind := base.dstIP
					switch {
					case v6:
						base.srcIP, base.dstIP = usoWire6, usoLab6
						bind = base.dstIP
					case dst.bcast:
						base.dstPort += 2
						base.dstIP, base.dstMAC = bcast4, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
						bind = net.IPv4zero
					}
					s := udpSocket(t, bed, bed.LabNS, bind, base.dstPort, groSock)
					segs := run(base, sz.n, sz.size, sz.last, byte(sz.size))
					f := coalesceSegs(t, segs, mixedModes, groups(sz.n, sz.n))[0]
					buf := wire(f)
					before := udpStats(t, bed, v6)
					if _, err := unix.Write(fd, buf); err != nil {
						t.Fatalf("writing the %d-byte super-frame %+v: %v", len(buf), f.Hdr, err)
					}
					if groSock {
						recvGRO(t, s, segs)
					} else {
						recvAll(t, s, segs)
					}
					after := udpStats(t, bed, v6)
					t.Logf("%s: one %d-byte write (gso_size %d, %d datagrams); socket: %d datagrams in, %d errors, %d checksum errors",
						name, len(buf), f.Hdr.GSOSize, len(segs), after[0]-before[0], after[1]-before[1], after[2]-before[2])
					if after[1] != before[1] || after[2] != before[2] {
						t.Errorf("UDP errors in the lab: before %v, after %v", before, after)
					}
				})
			}
		}
	}

	// UDP_MAX_SEGMENTS on this kernel: one datagram more than Coalesce
	// ever merges is refused at the write.
	for _, segs := range []int{udpMaxSegments, udpMaxSegments + 1} {
		h, frame := superFrame(t, spec{udp: true, payload: pattern(18*segs, 9)}, 18)
		_, err := unix.Write(fd, wire(Frame{Buf: frame, End: len(frame), Hdr: h}))
		switch {
		case segs <= udpMaxSegments && err != nil:
			t.Errorf("a USO frame of %d segments: %v", segs, err)
		case segs > udpMaxSegments && !errors.Is(err, unix.EINVAL):
			t.Errorf("a USO frame of %d segments: %v, want EINVAL (UDP_MAX_SEGMENTS is %d)", segs, err, udpMaxSegments)
		}
	}
}

// udpSocket opens a UDP socket in namespace ns bound to addr:port, with
// UDP_GRO if gro, and a 2 s receive timeout.
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

// rxPackets reads a netdev's rx_packets in namespace ns.
func rxPackets(t *testing.T, bed *testbed.Bed, ns, dev string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := bed.Run(ctx, ns, "cat", "/sys/class/net/"+dev+"/statistics/rx_packets")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// recvAll reads segs from a socket without UDP_GRO: one datagram each, in
// order, from port 40000, and nothing after them.
func recvAll(t *testing.T, fd int, segs []groSeg) {
	t.Helper()
	for i, sg := range segs {
		b, _, from, err := recv(fd, make([]byte, 65536), nil, 0)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, len(segs), err)
		}
		if from != 40000 {
			t.Fatalf("datagram %d from port %d, want 40000", i, from)
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
func recvGRO(t *testing.T, fd int, segs []groSeg) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	file, prefix := "/proc/net/snmp", "Udp"
	if v6 {
		file, prefix = "/proc/net/snmp6", "Udp6"
	}
	s, err := bed.Run(ctx, bed.LabNS, "cat", file)
	if err != nil {
		t.Fatal(err)
	}
	// snmp6 has a line per counter ("Udp6InErrors 0"), snmp a line of
	// names ("Udp: InDatagrams ...") and then one of values.
	vals := map[string]string{}
	var names []string
	for _, line := range strings.Split(s, "\n") {
		switch f := strings.Fields(line); {
		case v6 && len(f) == 2:
			vals[f[0]] = f[1]
		case v6 || len(f) == 0 || f[0] != "Udp:":
		case names == nil:
			names = f
		default:
			for i := 1; i < min(len(f), len(names)); i++ {
				vals["Udp"+names[i]] = f[i]
			}
		}
	}
	var out [3]int64
	for i, name := range []string{"InDatagrams", "InErrors", "InCsumErrors"} {
		out[i], _ = strconv.ParseInt(vals[prefix+name], 10, 64)
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
	for k, napi := range []string{"off", "on"} {
		d := openUSO(b, bed, napi)
		fd := d.Fds()[0]
		port := uint16(7001 + k)
		base := groSeg{udp: true, dstPort: port, dstMAC: d.MAC(),
			srcIP: net.IP(bed.WireAddr.Addr().AsSlice()), dstIP: net.IP(bed.LabAddr.Addr().AsSlice())}
		udpSocket(b, bed, bed.LabNS, base.dstIP, port, false)
		segs := run(base, 64, 64, 0, 1)
		var single [][]byte
		fs := make([]Frame, len(segs))
		for i, s := range segs {
			fs[i] = segFrame(b, s, csumValid, bigRoom)
			single = append(single, wire(fs[i]))
		}
		if NewGRO(len(fs)).Coalesce(fs) != len(fs)-1 {
			b.Fatal("the batch did not merge into one frame")
		}
		uso := wire(fs[0])
		name := "napi=" + napi
		write := func(b *testing.B, w []byte) {
			for {
				_, err := unix.Write(fd, w)
				if err == nil {
					return
				}
				if err != unix.EAGAIN && err != unix.EINTR {
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
			measure(b, func(b *testing.B) {
				for _, w := range single {
					write(b, w)
				}
			})
		})
		b.Run(name+"/uso", func(b *testing.B) {
			measure(b, func(b *testing.B) { write(b, uso) })
		})
		d.Close()
	}
}

// requireUSO skips tb when the TAP's kernel cannot take USO writes: USO came
// to virtio_net_hdr_to_skb with TUN_F_USO4/TUN_F_USO6 (Linux 6.2), so a
// TUNSETOFFLOAD that refused them says the write would be refused too.
func requireUSO(tb testing.TB, d *usoTAP) {
	tb.Helper()
	if uso := uint32(unix.TUN_F_USO4 | unix.TUN_F_USO6); d.offloads&uso != uso {
		tb.Skip("this kernel's TAP has no USO (Linux 6.2 added it): the forwarder must run GRO with SetUDP(false)")
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
	d := openUSO(t, bed, "auto")
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
	fd := d.Fds()[0]
	for i, uso := range []string{"on", "off"} {
		t.Run("tx-udp-segmentation="+uso, func(t *testing.T) {
			if out, err := bed.Run(ctx, bed.LabNS, "ethtool", "-K", "f0", "tx-udp-segmentation", uso); err != nil {
				t.Fatalf("ethtool: %v %s", err, out)
			}
			port := uint16(7010 + i)
			s := udpSocket(t, bed, bed.WireNS, far, port, false)
			// Not the wire's own 198.18.X.1: a packet from a local
			// address arriving on f1 is a martian there.
			base := groSeg{udp: true, dstPort: port, dstMAC: d.MAC(), id: 100,
				srcIP: net.IPv4(198, 18, x, 3).To4(), dstIP: far}
			segs := run(base, 64, 64, 20, 7)
			fs := frames(t, segs, allModes(csumValid), bigRoom)
			if n := NewGRO(len(fs)).Coalesce(fs); n != len(fs)-1 {
				t.Fatalf("merged %d of %d", n, len(fs))
			}
			buf := wire(fs[0])
			before := rxPackets(t, bed, bed.WireNS, "f1")
			if _, err := unix.Write(fd, buf); err != nil {
				t.Fatal(err)
			}
			recvAll(t, s, segs)
			// Whole through the veth, or segmented before it. The count
			// may include a little IPv6 chatter (router solicitations) of
			// the freshly made veth.
			got := rxPackets(t, bed, bed.WireNS, "f1") - before
			if uso == "on" && (got < 1 || got > 3) {
				t.Errorf("f1 received %d packets, want the one super-frame", got)
			}
			if uso == "off" && (got < int64(len(segs)) || got > int64(len(segs))+2) {
				t.Errorf("f1 received %d packets, want the %d datagrams", got, len(segs))
			}
		})
	}
}
