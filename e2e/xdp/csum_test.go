package xdp

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
)

// TestWrongChecksumFromTheWire: a UDP datagram from the wire whose check
// field holds the bare pseudo-header sum (a wrong checksum: what a stack
// leaves for the device to complete) is dropped by the lab's stack (Udp
// InCsumErrors +1, nothing delivered) with either backend, and a right
// one behind it is delivered. The NIC is a macvlan in passthru mode on
// the bed's veth: a device whose frames come off a wire. The AF_XDP
// backend used to mark such a frame NEEDS_CSUM, so the lab completed the
// checksum and took the datagram; it takes partial checksums on a veth
// only, whose peer's stack sends them (XDP keeps no ip_summed), and the
// log says which.
func TestWrongChecksumFromTheWire(t *testing.T) {
	for _, backend := range []string{"packet", "xdp"} {
		t.Run(backend, func(t *testing.T) {
			bed := testkit.ForwarderBed(t)
			testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "add", "link", bed.NIC, "name", "mv0", "type", "macvlan", "mode", "passthru")
			testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "set", "mv0", "up")
			fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), "--nic", "mv0", "--nic-backend", backend)
			if backend == "xdp" && !bytes.Contains([]byte(fw.Output()), []byte("partial_checksums=false")) {
				t.Errorf("the log does not say partial checksums are not taken on a macvlan:\n%s", fw.Output())
			}
			lab := listenUDP(t, bed, 9)
			wire := traffic.WireSocket(t, bed, false)
			eth := append(append(kernel.LinkMAC(t, bed.LabNS, bed.LabIf), kernel.LinkMAC(t, bed.WireNS, bed.WireIf)...), 0x08, 0x00)
			bad := append(append([]byte(nil), eth...), traffic.UDPPacketLen(t, bed, 64)...)
			ps := pseudoSum(bad[14:])
			if ps == 0 || ps == binary.BigEndian.Uint16(bad[14+26:]) {
				t.Fatalf("pseudo-header sum %#x: the frame would not be wrong", ps)
			}
			binary.BigEndian.PutUint16(bad[14+26:], ps)
			good := append(append([]byte(nil), eth...), traffic.UDPPacketLen(t, bed, 65)...)
			before := kernel.SNMP(t, bed, bed.LabNS)
			for _, f := range [][]byte{bad, good} {
				if _, err := unix.Write(wire, f); err != nil {
					t.Fatal(err)
				}
			}
			buf := make([]byte, 2048)
			lab.SetReadDeadline(time.Now().Add(3 * time.Second))
			n, err := lab.Read(buf)
			if err != nil || n != 65 {
				t.Fatalf("the lab's first datagram: %d bytes, %v; want the right one, 65 bytes", n, err)
			}
			after := kernel.SNMP(t, bed, bed.LabNS)
			if after["Udp.InCsumErrors"]-before["Udp.InCsumErrors"] != 1 || after["Udp.InDatagrams"]-before["Udp.InDatagrams"] != 1 {
				t.Errorf("lab counters: %s; want Udp InCsumErrors +1, InDatagrams +1", kernel.SNMPDelta(before, after))
			}
		})
	}
}

// listenUDP binds a UDP socket to port in the lab; it is closed when t ends.
func listenUDP(t *testing.T, bed *testbed.Bed, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := bed.Do(bed.LabNS, func() error {
		var err error
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: bed.LabAddr.Addr().AsSlice(), Port: port})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pseudoSum is the folded IPv4 pseudo-header sum of the UDP datagram in
// packet p (no options): what a stack leaves in the check field for the
// device to complete.
func pseudoSum(p []byte) uint16 {
	s := uint32(17) + uint32(binary.BigEndian.Uint16(p[24:]))
	for i := 12; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
