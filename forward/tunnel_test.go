package forward

import (
	"bytes"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// tunnelFrame builds what a packet socket on a VXLAN device hands out when
// the device's GRO merged TCP segments of a flow inside a lab's own VXLAN
// tunnel: outer Ethernet/IPv4/UDP 4789/VXLAN, inner Ethernet/IPv4/TCP with
// n bytes of payload starting at sequence number seq, and a header that
// says only TCPv4 GSO with csum_start at the inner TCP header (84).
func tunnelFrame(t testing.TB, n, mss int, seq uint32) (vnethdr.Hdr, []byte) {
	t.Helper()
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i*7 + int(seq))
	}
	oeth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeIPv4}
	oip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{198, 18, 9, 1}, DstIP: net.IP{198, 18, 9, 2}, Id: 5}
	udp := &layers.UDP{SrcPort: 50000, DstPort: 4789}
	udp.SetNetworkLayerForChecksum(oip)
	vx := &layers.VXLAN{ValidIDFlag: true, VNI: 77}
	ieth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 9, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 9, 2}, EthernetType: layers.EthernetTypeIPv4}
	iip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: ipA, DstIP: ipB, Id: 100, Flags: layers.IPv4DontFragment}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: seq, Ack: 1, ACK: true, PSH: true, Window: 512}
	tcp.SetNetworkLayerForChecksum(iip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		oeth, oip, udp, vx, ieth, iip, tcp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	const l4 = 14 + 20 + 8 + 8 + 14 + 20
	return vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, GSOType: vnethdr.GSOTCPv4, GSOSize: uint16(mss), CsumStart: l4, CsumOffset: 16}, buf.Bytes()
}

// innerTCP decodes a segment written to the TAP (after hdr bytes of vnet
// header) down to its inner TCP layer.
func innerTCP(t *testing.T, b []byte, hdr int) *layers.TCP {
	t.Helper()
	if hdr > 0 {
		var h vnethdr.Hdr
		h.Decode(b)
		if h != (vnethdr.Hdr{}) {
			t.Errorf("segment's vnet header %+v, want zero (checksums are complete)", h)
		}
	}
	pkt := gopacket.NewPacket(b[hdr:], layers.LayerTypeEthernet, gopacket.Default)
	if pkt.Layer(layers.LayerTypeVXLAN) == nil {
		t.Fatalf("segment is no VXLAN packet: %v", pkt)
	}
	tcp, _ := pkt.Layers()[len(pkt.Layers())-2].(*layers.TCP)
	if tcp == nil {
		t.Fatalf("no inner TCP in %v", pkt)
	}
	return tcp
}

// TestNICToTAPTunnel: a GSO frame from inside a tunnel, between two plain
// frames, reaches the TAP as the packets it was made of, in order, with
// and without a vnet header on the TAP; none of it is dropped.
func TestNICToTAPTunnel(t *testing.T) {
	for _, vnet := range []bool{true, false} {
		p := newFakePair(t, vnet)
		hdr := 0
		if vnet {
			hdr = vnethdr.Len
		}
		h, f := tunnelFrame(t, 5000, 1348, 1000)
		plain := withHdr(vnethdr.Hdr{}, tcpFrame(t, 100))
		p.nic.Push(forwardtest.Frame{Data: plain}, forwardtest.Frame{Data: withHdr(h, f)}, forwardtest.Frame{Data: plain})
		if n, err := p.q.nicToTAP(); n != 3 || err != nil {
			t.Fatalf("vnet %v: nicToTAP = %d, %v", vnet, n, err)
		}
		out := p.tap.Written()
		if len(out) != 6 {
			t.Fatalf("vnet %v: TAP got %d frames, want 6 (plain, 4 segments, plain)", vnet, len(out))
		}
		if !bytes.Equal(out[0][hdr:], plain[vnethdr.Len:]) || !bytes.Equal(out[5][hdr:], plain[vnethdr.Len:]) {
			t.Errorf("vnet %v: the plain frames around the tunnel frame moved", vnet)
		}
		var payload []byte
		for i, b := range out[1:5] {
			tcp := innerTCP(t, b, hdr)
			if tcp.Seq != 1000+uint32(i*1348) || tcp.PSH != (i == 3) {
				t.Errorf("vnet %v: segment %d: seq %d PSH %v", vnet, i, tcp.Seq, tcp.PSH)
			}
			payload = append(payload, tcp.Payload...)
		}
		if !bytes.Equal(payload, f[len(f)-5000:]) {
			t.Errorf("vnet %v: segments do not reassemble to the payload", vnet)
		}
		d := &p.q.Counters.NICToTAP
		if d.Rx.Packets.Load() != 3 || d.GSO.Load() != 1 || d.Tx.Packets.Load() != 6 || p.q.Counters.Segments.Load() != 4 {
			t.Errorf("vnet %v: rx %d gso %d tx %d segments %d; want 3, 1, 6, 4", vnet,
				d.Rx.Packets.Load(), d.GSO.Load(), d.Tx.Packets.Load(), p.q.Counters.Segments.Load())
		}
		for r := range d.Drops {
			if v := d.Drops[r].Load(); v != 0 {
				t.Errorf("vnet %v: %d drops %v", vnet, v, DropReason(r))
			}
		}
	}
}

// TestNICToTAPTunnelFlushes: a batch whose tunnel frames make more
// segments than the queue has buffers for is written in parts, in order,
// with nothing dropped.
func TestNICToTAPTunnelFlushes(t *testing.T) {
	p := newFakePair(t, true) // batches of 8
	const frames, n, mss = 8, 60000, 500
	segs := (n + mss - 1) / mss // 120: the batch needs 960 buffers
	var in []forwardtest.Frame
	for i := 0; i < frames; i++ {
		h, f := tunnelFrame(t, n, mss, uint32(i*n))
		in = append(in, forwardtest.Frame{Data: withHdr(h, f)})
	}
	p.nic.Push(in...)
	if k, err := p.q.nicToTAP(); k != frames || err != nil {
		t.Fatalf("nicToTAP = %d, %v", k, err)
	}
	out := p.tap.Written()
	if want := frames * segs; len(out) != want || want <= maxSegments {
		t.Fatalf("TAP got %d frames, want %d (more than %d buffers)", len(out), want, maxSegments)
	}
	for i, b := range out {
		frame, seg := i/segs, i%segs
		if tcp := innerTCP(t, b, vnethdr.Len); tcp.Seq != uint32(frame*n+seg*mss) {
			t.Fatalf("frame %d: seq %d, want %d", i, tcp.Seq, frame*n+seg*mss)
		}
	}
	if d := p.q.Counters.NICToTAP.Drops[DropSegment].Load(); d != 0 {
		t.Errorf("%d segmentation drops", d)
	}
}

// TestNICToTAPTunnelRefused: a GSO frame that is neither plain nor a
// tunnel SegmentTunnel takes is dropped as bad_vnet_hdr, as before.
func TestNICToTAPTunnelRefused(t *testing.T) {
	p := newFakePair(t, true)
	h, f := tunnelFrame(t, 5000, 1348, 0)
	h.CsumStart = 80 // not the inner TCP header
	p.nic.Push(forwardtest.Frame{Data: withHdr(h, f)})
	p.q.nicToTAP()
	if len(p.tap.Written()) != 0 || p.q.Counters.NICToTAP.Drops[DropBadHdr].Load() != 1 {
		t.Errorf("TAP got %d frames, bad_vnet_hdr %d; want 0 and 1", len(p.tap.Written()), p.q.Counters.NICToTAP.Drops[DropBadHdr].Load())
	}
}

func TestZeroAllocsTunnel(t *testing.T) {
	for _, vnet := range []bool{true, false} {
		p := newPair(t, vnet, 16)
		h, f := tunnelFrame(t, 20000, 1348, 0)
		allocs := nicToTAPAllocs(t, p, withHdr(h, f))
		if allocs != 0 {
			t.Errorf("vnet %v: %v allocations per tunnel frame, want 0", vnet, allocs)
		}
		if p.q.Counters.Segments.Load() == 0 {
			t.Errorf("vnet %v: nothing was segmented", vnet)
		}
	}
}
