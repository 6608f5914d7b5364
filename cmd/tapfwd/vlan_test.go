package main

import (
	"bytes"
	"net"
	"testing"
	"time"
	"unsafe"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/testbed"
)

// This kernel has no 8021q module, so VLAN devices cannot be made; a raw
// packet socket sends tagged frames instead. The receiving stack (veth or
// TAP) strips the tag into the skb (net/core/dev.c: skb_vlan_untag), so
// each side's packet socket sees it in PACKET_AUXDATA, not in the frame:
// tapfwd must put it back for the tag to survive.
func TestVLAN(t *testing.T) {
	if err := testbed.Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	for _, vnet := range []string{"on", "off"} {
		t.Run("vnet-"+vnet, func(t *testing.T) {
			bed, fw := startForwarder(t, "--vnet-hdr", vnet)
			tapHW, _ := net.ParseMAC(tapMAC(t, bed))
			var wireHW net.HardwareAddr
			bed.Do(bed.WireNS, func() error {
				ifi, err := net.InterfaceByName(bed.WireIf)
				if err == nil {
					wireHW = ifi.HardwareAddr
				}
				return err
			})
			wire := openRaw(t, bed, bed.WireNS, bed.WireIf)
			lab := openRaw(t, bed, bed.LabNS, bed.LabIf)

			for _, tc := range []struct {
				name     string
				from, to int
				src, dst net.HardwareAddr
				tci      uint16
			}{
				{"wire->lab", wire, lab, wireHW, tapHW, 100},
				{"lab->wire", lab, wire, tapHW, wireHW, 0x2000 | 200}, // priority 1, VLAN 200
			} {
				inner := udpPayload(t, bed)
				frame := tagged(t, tc.src, tc.dst, tc.tci, inner)
				if _, err := unix.Write(tc.from, frame); err != nil {
					t.Fatalf("%s: send: %v", tc.name, err)
				}
				if tci := recvTagged(t, tc.to, tc.src, inner); tci != tc.tci {
					t.Errorf("%s: VLAN TCI %#x, want %#x", tc.name, tci, tc.tci)
				}
			}
			if err := fw.Stop(); err != nil {
				t.Fatalf("tapfwd exit: %v\n%s", err, fw.Output())
			}
		})
	}
}

// openRaw opens a packet socket on dev in ns with PACKET_AUXDATA.
func openRaw(t *testing.T, bed *testbed.Bed, ns, dev string) int {
	t.Helper()
	fd := -1
	err := bed.Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return err
		}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 0, Usec: 200000})
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatalf("packet socket on %s in %s: %v", dev, ns, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// udpPayload is an IPv4/UDP packet with valid checksums between the bed's
// addresses.
func udpPayload(t *testing.T, bed *testbed.Bed) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: bed.WireAddr.Addr().AsSlice(), DstIP: bed.LabAddr.Addr().AsSlice()}
	udp := &layers.UDP{SrcPort: 9, DstPort: 9}
	udp.SetNetworkLayerForChecksum(ip)
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip, udp, gopacket.Payload(bytes.Repeat([]byte("vlan"), 100))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func tagged(t *testing.T, src, dst net.HardwareAddr, tci uint16, inner []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: layers.EthernetTypeDot1Q}
	q := &layers.Dot1Q{Priority: uint8(tci >> 13), VLANIdentifier: tci & 0xfff, Type: layers.EthernetTypeIPv4}
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{}, eth, q, gopacket.Payload(inner)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// recvTagged waits for the frame from src that carries inner and returns
// its VLAN TCI (from PACKET_AUXDATA, or from the frame if the tag was left
// in it); 0 means the tag was lost on the way.
func recvTagged(t *testing.T, fd int, src net.HardwareAddr, inner []byte) uint16 {
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
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= int(unsafe.Sizeof(unix.TpacketAuxdata{})) {
				a := (*unix.TpacketAuxdata)(unsafe.Pointer(&m.Data[0]))
				if a.Status&unix.TP_STATUS_VLAN_VALID != 0 {
					return a.Vlan_tci
				}
			}
		}
		return 0
	}
	t.Fatal("the frame did not arrive within 3 s")
	return 0
}
