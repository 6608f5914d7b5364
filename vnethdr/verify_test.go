package vnethdr

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// decoded is a frame as gopacket sees it.
type decoded struct {
	ip4     *layers.IPv4
	ip6     *layers.IPv6
	tcp     *layers.TCP
	udp     *layers.UDP
	l4      []byte // L4 header and payload
	payload []byte
}

// decodeFrame parses frame with gopacket and checks that every checksum in
// it verifies: the IPv4 header's, and the TCP/UDP one with its pseudo-header
// (summed with refSum, and for TCP also by gopacket's own code). It returns
// false, having reported why, when something does not hold.
func decodeFrame(tb testing.TB, frame []byte) (decoded, bool) {
	tb.Helper()
	var d decoded
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		tb.Errorf("gopacket: %v", el.Error())
		return d, false
	}
	var nl gopacket.NetworkLayer
	var src, dst []byte
	if l, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		d.ip4, nl, src, dst = l, l, l.SrcIP, l.DstIP
		if s := refSum(l.Contents); s != 0xffff {
			tb.Errorf("IPv4 header checksum %#04x does not verify (sum %#04x)", l.Checksum, s)
			return d, false
		}
	} else if l, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		d.ip6, nl, src, dst = l, l, l.SrcIP, l.DstIP
	} else {
		tb.Errorf("no IP layer in %x", frame)
		return d, false
	}
	var proto byte
	if l, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok {
		d.tcp, proto = l, 6
		d.l4 = append(append([]byte(nil), l.Contents...), l.Payload...)
		d.payload = l.Payload
		if err := l.SetNetworkLayerForChecksum(nl); err != nil {
			tb.Fatal(err)
		}
		// gopacket sums the field too, so a right checksum gives 0.
		if c, err := l.ComputeChecksum(); err != nil || c != 0 {
			tb.Errorf("gopacket: TCP checksum %#04x does not verify (%#04x, %v)", l.Checksum, c, err)
			return d, false
		}
	} else if l, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok {
		d.udp, proto = l, 17
		d.l4 = append(append([]byte(nil), l.Contents...), l.Payload...)
		d.payload = l.Payload
		if l.Checksum == 0 {
			tb.Errorf("UDP checksum 0 (none) emitted")
			return d, false
		}
		if int(l.Length) != len(d.l4) {
			tb.Errorf("UDP length %d, want %d", l.Length, len(d.l4))
			return d, false
		}
		// Recompute with gopacket's serializer and compare.
		u := *l
		if err := u.SetNetworkLayerForChecksum(nl); err != nil {
			tb.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, &u, gopacket.Payload(l.Payload)); err != nil {
			tb.Fatal(err)
		}
		want := binary.BigEndian.Uint16(buf.Bytes()[6:])
		if want == 0 {
			want = 0xffff // gopacket does not do RFC 768's 0 -> 0xffff
		}
		if l.Checksum != want {
			tb.Errorf("UDP checksum %#04x, gopacket computes %#04x", l.Checksum, want)
			return d, false
		}
	} else {
		tb.Errorf("no TCP/UDP layer in %x", frame)
		return d, false
	}
	if s := refSum(pseudo(src, dst, proto, len(d.l4)), d.l4); s != 0xffff {
		tb.Errorf("L4 checksum does not verify: sum %#04x", s)
		return d, false
	}
	return d, true
}

// verifySegments checks Segment's output for the super-frame in (built from
// s) against everything the kernel's GSO guarantees.
func verifySegments(t testing.TB, s spec, h Hdr, in []byte, out [][]byte, sizes []int, n int) {
	t.Helper()
	mss := int(h.GSOSize)
	want := (len(s.payload) + mss - 1) / mss
	if want == 0 {
		want = 1
	}
	if n != want {
		t.Fatalf("%d segments, want %d", n, want)
	}
	var got []byte
	for i := 0; i < n; i++ {
		f := out[i][:sizes[i]]
		d, ok := decodeFrame(t, f)
		if !ok {
			t.Fatalf("segment %d of %d (%d bytes)", i, n, len(f))
		}
		if !bytes.Equal(f[:s.l3()], in[:s.l3()]) {
			t.Errorf("segment %d: L2 header changed", i)
		}
		segLen := min(mss, len(s.payload)-i*mss)
		if len(d.payload) != segLen {
			t.Errorf("segment %d: payload %d bytes, want %d", i, len(d.payload), segLen)
		}
		if sizes[i] != s.hdrLen()+segLen {
			t.Errorf("segment %d: size %d, want %d", i, sizes[i], s.hdrLen()+segLen)
		}
		got = append(got, d.payload...)
		if d.ip4 != nil {
			if int(d.ip4.Length) != len(f)-s.l3() {
				t.Errorf("segment %d: IPv4 length %d, frame has %d", i, d.ip4.Length, len(f)-s.l3())
			}
			if d.ip4.Id != s.id+uint16(i) {
				t.Errorf("segment %d: IPv4 ID %d, want %d", i, d.ip4.Id, s.id+uint16(i))
			}
		} else if int(d.ip6.Length) != len(f)-s.l3()-40 {
			t.Errorf("segment %d: IPv6 payload length %d, frame has %d", i, d.ip6.Length, len(f)-s.l3()-40)
		}
		if tc := d.tcp; tc != nil {
			if want := s.seq + uint32(i*mss); tc.Seq != want {
				t.Errorf("segment %d: seq %d, want %d", i, tc.Seq, want)
			}
			f := s.flags
			if f == 0 {
				f = 0x18
			}
			first, last := i == 0, i == n-1
			if tc.CWR != (first && f&0x80 != 0) {
				t.Errorf("segment %d: CWR %v", i, tc.CWR)
			}
			if tc.FIN != (last && f&0x01 != 0) || tc.PSH != (last && f&0x08 != 0) {
				t.Errorf("segment %d: FIN %v PSH %v", i, tc.FIN, tc.PSH)
			}
			if tc.ACK != (f&0x10 != 0) || tc.ECE != (f&0x40 != 0) || tc.Ack != 0x01020304 {
				t.Errorf("segment %d: ACK/ECE/ack number changed", i)
			}
		}
	}
	if !bytes.Equal(got, s.payload) {
		t.Errorf("reassembled payload (%d bytes) differs from the input (%d bytes)", len(got), len(s.payload))
	}
}
