package traffic

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// ethPAll is ETH_P_ALL in network byte order, the order packet sockets
// take protocol numbers in.
var ethPAll = binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, unix.ETH_P_ALL))

// WireSocket opens a packet socket on bed's wire veth for sending only
// (protocol 0: nothing is queued to it); it is closed when t ends. With
// vnet, every frame written to it starts with a virtio_net_hdr
// (PACKET_VNET_HDR), which is how a sender on a veth hands the peer a
// partial checksum.
func WireSocket(t testing.TB, bed *testbed.Bed, vnet bool) int {
	t.Helper()
	fd := -1
	err := bed.Do(bed.WireNS, func() error {
		ifi, err := net.InterfaceByName(bed.WireIf)
		if err != nil {
			return err
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if vnet {
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
				return err
			}
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index})
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		t.Fatalf("packet socket on %s in %s: %v", bed.WireIf, bed.WireNS, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// OpenRaw opens a packet socket for every protocol on dev in ns, with
// PACKET_AUXDATA and a 200 ms receive timeout; it is closed when t ends.
func OpenRaw(t testing.TB, bed *testbed.Bed, ns, dev string) int {
	t.Helper()
	fd := -1
	err := bed.Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(ethPAll))
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return err
		}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 0, Usec: 200000})
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: ethPAll, Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatalf("packet socket on %s in %s: %v", dev, ns, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// UDPPacket is an IPv4/UDP packet (no Ethernet header) with valid
// checksums from bed's wire address to its lab address, 400 bytes of
// payload.
func UDPPacket(t testing.TB, bed *testbed.Bed) []byte {
	t.Helper()
	return UDPPacketLen(t, bed, 400)
}

// UDPPacketLen is UDPPacket with n bytes of payload: an IP packet of n+28
// bytes.
func UDPPacketLen(t testing.TB, bed *testbed.Bed, n int) []byte {
	t.Helper()
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: bed.WireAddr.Addr().AsSlice(), DstIP: bed.LabAddr.Addr().AsSlice()}
	udp := &layers.UDP{SrcPort: 9, DstPort: 9}
	udp.SetNetworkLayerForChecksum(ip)
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip, udp, gopacket.Payload(bytes.Repeat([]byte("vlan"), n/4+1)[:n])); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Tagged is an Ethernet frame from src to dst with an 802.1Q tag (TCI
// tci) in front of the IPv4 packet inner.
func Tagged(t testing.TB, src, dst net.HardwareAddr, tci uint16, inner []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: layers.EthernetTypeDot1Q}
	q := &layers.Dot1Q{Priority: uint8(tci >> 13), VLANIdentifier: tci & 0xfff, Type: layers.EthernetTypeIPv4}
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{}, eth, q, gopacket.Payload(inner)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// RecvTagged waits up to 3 s on fd (an OpenRaw socket) for the frame from
// src that carries inner and returns its VLAN TCI (from PACKET_AUXDATA,
// or from the frame if the tag was left in it); 0 means the tag was lost
// on the way.
func RecvTagged(t testing.TB, fd int, src net.HardwareAddr, inner []byte) uint16 {
	t.Helper()
	buf := make([]byte, 4096)
	oob := make([]byte, 256)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			continue
		}
		f := buf[:n]
		if n < 14 || !bytes.Equal(f[6:12], src) {
			continue
		}
		if f[12] == 0x81 && f[13] == 0x00 && n >= 18 {
			if bytes.Equal(f[18:], inner) {
				return uint16(f[14])<<8 | uint16(f[15])
			}
			continue
		}
		if !bytes.Equal(f[14:], inner) {
			continue // other traffic from src (ARP, IPv6 router solicitations)
		}
		_, tci, _ := AuxTag(oob[:oobn])
		return tci
	}
	t.Fatal("the frame did not arrive within 3 s")
	return 0
}
