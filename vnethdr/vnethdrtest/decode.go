package vnethdrtest

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Decoded is a frame as gopacket sees it.
type Decoded struct {
	IP4     *layers.IPv4
	IP6     *layers.IPv6
	TCP     *layers.TCP
	UDP     *layers.UDP
	L4      []byte // L4 header and payload
	Payload []byte
}

// Decode parses frame with gopacket and checks that every checksum in
// it verifies: the IPv4 header's, and the TCP/UDP one with its pseudo-header
// (summed with RefSum, and for TCP also by gopacket's own code). It returns
// false, having reported why, when something does not hold.
func Decode(tb testing.TB, frame []byte) (Decoded, bool) {
	tb.Helper()
	var d Decoded
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		tb.Errorf("gopacket: %v", el.Error())
		return d, false
	}
	var nl gopacket.NetworkLayer
	var src, dst []byte
	if l, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		d.IP4, nl, src, dst = l, l, l.SrcIP, l.DstIP
		if s := RefSum(l.Contents); s != 0xffff {
			tb.Errorf("IPv4 header checksum %#04x does not verify (sum %#04x)", l.Checksum, s)
			return d, false
		}
	} else if l, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		d.IP6, nl, src, dst = l, l, l.SrcIP, l.DstIP
	} else {
		tb.Errorf("no IP layer in %x", frame)
		return d, false
	}
	var proto byte
	if l, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok {
		d.TCP, proto = l, 6
		d.L4 = append(append([]byte(nil), l.Contents...), l.Payload...)
		d.Payload = l.Payload
		if err := l.SetNetworkLayerForChecksum(nl); err != nil {
			tb.Fatal(err)
		}
		// gopacket sums the field too, so a right checksum gives 0.
		if c, err := l.ComputeChecksum(); err != nil || c != 0 {
			tb.Errorf("gopacket: TCP checksum %#04x does not verify (%#04x, %v)", l.Checksum, c, err)
			return d, false
		}
	} else if l, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok {
		d.UDP, proto = l, 17
		d.L4 = append(append([]byte(nil), l.Contents...), l.Payload...)
		d.Payload = l.Payload
		if l.Checksum == 0 {
			tb.Errorf("UDP checksum 0 (none) emitted")
			return d, false
		}
		if int(l.Length) != len(d.L4) {
			tb.Errorf("UDP length %d, want %d", l.Length, len(d.L4))
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
	if s := RefSum(Pseudo(src, dst, proto, len(d.L4)), d.L4); s != 0xffff {
		tb.Errorf("L4 checksum does not verify: sum %#04x", s)
		return d, false
	}
	return d, true
}

// CheckTCPSegments checks that segs are the segments the TCP super-frame
// super splits into at mss bytes of payload each, as GSO makes them: as
// many as its payload takes, each decoding with checksums that verify
// (Decode), sequence numbers mss apart from super's, PSH on the last
// alone when super has it, and payloads that make super's. Super's own
// checksums are not looked at (a GSO frame's hold partial sums).
func CheckTCPSegments(tb testing.TB, segs [][]byte, super []byte, mss int) {
	tb.Helper()
	p := gopacket.NewPacket(super, layers.LayerTypeEthernet, gopacket.Default)
	st, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok {
		tb.Fatalf("the super-frame has no TCP segment: %v", p)
	}
	if want := (len(st.Payload) + mss - 1) / mss; len(segs) != want {
		tb.Fatalf("%d segments, want %d (%d bytes of payload, %d a segment)", len(segs), want, len(st.Payload), mss)
	}
	var payload []byte
	for i, s := range segs {
		d, ok := Decode(tb, s)
		if !ok || d.TCP == nil {
			tb.Fatalf("segment %d is no TCP segment whose checksums verify", i)
		}
		seq, psh := st.Seq+uint32(i*mss), st.PSH && i == len(segs)-1
		if d.TCP.Seq != seq || d.TCP.PSH != psh {
			tb.Errorf("segment %d: seq %d, PSH %v; want seq %d, PSH %v", i, d.TCP.Seq, d.TCP.PSH, seq, psh)
		}
		payload = append(payload, d.Payload...)
	}
	if !bytes.Equal(payload, st.Payload) {
		tb.Error("the segments' payloads do not make the super-frame's")
	}
}
