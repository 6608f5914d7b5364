package tapport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/tapport/tapporttest"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/netns"
)

// wireMAC is the sender of the test's frames "from the wire".
var wireMAC = net.HardwareAddr{0x02, 0, 0x5e, 0, 0x53, 0xee}

// TestOneAnswerForTheLab: a VM port without a guest (no one holds its
// character device) hands the frames for its guest to its own netdev in
// the lab namespace. With two such ports, an ARP who-has for the lab
// host's address written into the TAP (as tapfwd does with the wire's
// frames) gets exactly one answer, from the lab host's MAC (the TAP's, or
// its host port's), and so does a neighbour solicitation for its
// link-local address; the ports send nothing of their own (no replies, no
// IPv6 of their own) and count no tx frames.
func TestOneAnswerForTheLab(t *testing.T) {
	for _, withHost := range []bool{false, true} {
		t.Run(map[bool]string{false: "tap", true: "host-port"}[withHost], func(t *testing.T) {
			bed, d := tapporttest.LabTAP(t)
			h, err := netns.Open(bed.LabNS)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			tapLink, err := h.Link(d.Name())
			if err != nil {
				t.Fatal(err)
			}
			host, hostIndex := d.MAC(), tapLink.Index
			if withHost {
				hp, err := EnsureHost(HostConfig{TAP: d.Name(), Netns: bed.LabNS, Addr: bed.LabAddr})
				if err != nil {
					t.Fatal(err)
				}
				host, hostIndex = hp.MAC, hp.Index
			} else if err := h.AddAddr(tapLink.Index, bed.LabAddr); err != nil {
				t.Fatal(err)
			}
			ports, err := AddN(Config{TAP: d.Name(), Netns: bed.LabNS}, 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { Remove(ports) })
			for _, p := range ports {
				tapporttest.CheckSettings(t, bed.LabNS, p.Name, map[string]string{"arp_ignore": "8", "rp_filter": "1", "disable_ipv6": "1"})
			}
			ll := linkLocal(t, bed, h, hostIndex)
			fds, hdr := d.Fds(), d.Features().VnetHdrLen

			var frames [][]byte
			write(t, fds[0], hdr, arpRequest(bed.WireAddr.Addr(), bed.LabAddr.Addr()))
			frames = append(frames, readFrames(t, fds, hdr, time.Second)...)
			write(t, fds[0], hdr, neighSolicit(ll))
			frames = append(frames, readFrames(t, fds, hdr, time.Second)...)

			arp, na := answers(frames, bed.LabAddr.Addr(), ll)
			if len(arp) != 1 || !bytes.Equal(arp[0], host) {
				t.Errorf("ARP replies for %s from %v, want one from %s", bed.LabAddr.Addr(), arp, host)
			}
			if len(na) != 1 || !bytes.Equal(na[0], host) {
				t.Errorf("neighbour advertisements for %s from %v, want one from %s", ll, na, host)
			}
			for _, p := range ports {
				var sent []string // their EtherTypes
				for _, f := range frames {
					if bytes.Equal(f[6:12], p.MAC) {
						sent = append(sent, fmt.Sprintf("%#04x", binary.BigEndian.Uint16(f[12:])))
					}
				}
				st, err := h.Stats(p.Name)
				if err != nil {
					t.Fatal(err)
				}
				if len(sent) != 0 || st.TxPackets != 0 {
					t.Errorf("port %s (%s) without a guest sent frames the TAP read (EtherTypes %v), counts %d tx", p.Name, p.MAC, sent, st.TxPackets)
				}
			}
		})
	}
}

// linkLocal waits until the link with index has a link-local IPv6
// address that has passed duplicate address detection, and returns it.
func linkLocal(t *testing.T, bed *testbed.Bed, h *netns.NS, index int) netip.Addr {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		addrs, err := h.Addrs(index)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(addrs, func(p netip.Prefix) bool { return p.Addr().IsLinkLocalUnicast() })
		if i < 0 {
			continue
		}
		out := testkit.BedRun(t, bed, bed.LabNS, "ip", "-6", "-o", "addr", "show", "scope", "link")
		if line := grepLine(out, addrs[i].Addr().String()); line != "" && !strings.Contains(line, "tentative") {
			return addrs[i].Addr()
		}
	}
	t.Fatalf("link %d has no link-local IPv6 address past DAD", index)
	return netip.Addr{}
}

func grepLine(out, s string) string {
	for line := range strings.Lines(out) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// write writes frame into a TAP queue, behind a zero vnet header of hdr
// bytes.
func write(t *testing.T, fd, hdr int, frame []byte) {
	t.Helper()
	if _, err := unix.Write(fd, append(make([]byte, hdr), frame...)); err != nil {
		t.Fatalf("write into the TAP: %v", err)
	}
}

// readFrames reads what the TAP's queues hand out (the lab's frames for
// the wire) for d, each without its vnet header of hdr bytes.
func readFrames(t *testing.T, fds []int, hdr int, d time.Duration) [][]byte {
	t.Helper()
	var out [][]byte
	pfds := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	buf := make([]byte, 65536)
	for end := time.Now().Add(d); time.Now().Before(end); {
		if _, err := unix.Poll(pfds, int(time.Until(end).Milliseconds())+1); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		for _, fd := range fds {
			for {
				n, err := unix.Read(fd, buf)
				if err != nil {
					break
				}
				if n >= hdr+14 {
					out = append(out, bytes.Clone(buf[hdr:n]))
				}
			}
		}
	}
	return out
}

// arpRequest is an ARP who-has for target from wireMAC at sender.
func arpRequest(sender, target netip.Addr) []byte {
	f := make([]byte, 60)
	copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:], wireMAC)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_ARP)
	copy(f[14:], []byte{0, 1, 8, 0, 6, 4, 0, 1})
	copy(f[22:], wireMAC)
	s, tg := sender.As4(), target.As4()
	copy(f[28:], s[:])
	copy(f[38:], tg[:])
	return f
}

// neighSolicit is an IPv6 neighbour solicitation for target from wireMAC
// (RFC 4861 4.3), to target's solicited-node multicast address.
func neighSolicit(target netip.Addr) []byte {
	tg := target.As16()
	dst := [16]byte{0: 0xff, 1: 0x02, 11: 1, 12: 0xff, 13: tg[13], 14: tg[14], 15: tg[15]}
	src := [16]byte{0: 0xfe, 1: 0x80, 15: 0xee}
	icmp := make([]byte, 32)
	icmp[0] = 135
	copy(icmp[8:], tg[:])
	icmp[24], icmp[25] = 1, 1 // source link-layer address option
	copy(icmp[26:], wireMAC)
	// The checksum covers the IPv6 pseudo-header (RFC 8200 8.1).
	pseudo := append(append(append([]byte{}, src[:]...), dst[:]...), 0, 0, 0, byte(len(icmp)), 0, 0, 0, unix.IPPROTO_ICMPV6)
	binary.BigEndian.PutUint16(icmp[2:], testbed.Checksum(append(pseudo, icmp...)))
	f := make([]byte, 14+40, 14+40+len(icmp))
	copy(f, []byte{0x33, 0x33, 0xff, tg[13], tg[14], tg[15]})
	copy(f[6:], wireMAC)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_IPV6)
	f[14] = 0x60
	binary.BigEndian.PutUint16(f[18:], uint16(len(icmp)))
	f[20], f[21] = unix.IPPROTO_ICMPV6, 255
	copy(f[22:], src[:])
	copy(f[38:], dst[:])
	return append(f, icmp...)
}

// answers returns the source MACs of the ARP replies for addr and of the
// neighbour advertisements for ll among frames.
func answers(frames [][]byte, addr, ll netip.Addr) (arp, na []net.HardwareAddr) {
	a4, a16 := addr.As4(), ll.As16()
	for _, f := range frames {
		src := net.HardwareAddr(f[6:12])
		switch binary.BigEndian.Uint16(f[12:]) {
		case unix.ETH_P_ARP:
			if len(f) >= 42 && binary.BigEndian.Uint16(f[20:]) == 2 && bytes.Equal(f[28:32], a4[:]) {
				arp = append(arp, src)
			}
		case unix.ETH_P_IPV6:
			if len(f) >= 14+40+24 && f[20] == unix.IPPROTO_ICMPV6 && f[54] == 136 && bytes.Equal(f[62:78], a16[:]) {
				na = append(na, src)
			}
		}
	}
	return arp, na
}

// TestPortTakesMulticast: a guest on a port gets the multicast meant for
// it although the port's netdev has no IPv6 and so joins no group for the
// guest (its solicited-node address): the port takes every multicast
// frame, as a bridge port does; here a neighbour solicitation for the
// guest's EUI-64 link-local address and an mDNS frame.
func TestPortTakesMulticast(t *testing.T) {
	_, d := tapporttest.LabTAP(t)
	p := addForTest(t, Config{TAP: d.Name(), Netns: d.Netns()})
	fd, err := unix.Open(p.Dev, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	m := p.MAC
	guest := netip.AddrFrom16([16]byte{0xfe, 0x80, 8: m[0] ^ 2, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]})
	ns := neighSolicit(guest)
	mdns := make([]byte, 60)
	copy(mdns, []byte{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb})
	copy(mdns[6:], wireMAC)
	binary.BigEndian.PutUint16(mdns[12:], unix.ETH_P_IP)
	hdr := d.Features().VnetHdrLen
	write(t, d.Fds()[0], hdr, ns)
	write(t, d.Fds()[0], hdr, mdns)
	// The port's character device hands out a 10-byte virtio_net_hdr
	// (drivers/net/tap.c: tap_open sets IFF_VNET_HDR).
	got := readFrames(t, []int{fd}, 10, time.Second)
	for _, want := range [][]byte{ns, mdns} {
		if !slices.ContainsFunc(got, func(f []byte) bool { return bytes.Equal(f[:6], want[:6]) }) {
			t.Errorf("the guest did not get the frame to %s (got %d frames)", net.HardwareAddr(want[:6]), len(got))
		}
	}
}
