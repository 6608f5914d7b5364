package afxdp

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// l2Frames are the L2 transparency frames, addressed from src to dst:
// UDP and TCP at 1514 bytes, the 60-byte minimum, 802.1Q, QinQ, an odd
// EtherType and an IPv4 fragment.
func l2Frames(t testing.TB, src, dst net.HardwareAddr, mtu int) [][]byte {
	var out [][]byte
	for _, s := range []frameSpec{
		{payload: mtu - 28},
		{tcp: true, payload: mtu - 40},
		{payload: 18},
		{tags: []uint16{0x2064}, payload: mtu - 32},
		{tags: []uint16{300, 0x6007}, payload: 400},
	} {
		f := buildFrame(t, s)
		copy(f[0:6], dst)
		copy(f[6:12], src)
		out = append(out, f)
	}
	odd := make([]byte, 200)
	copy(odd[0:6], dst)
	copy(odd[6:12], src)
	odd[12], odd[13] = 0x88, 0xb5 // IEEE 802 local experimental
	frag := buildFrame(t, frameSpec{payload: 500})
	copy(frag[0:6], dst)
	copy(frag[6:12], src)
	frag[14+6] |= 0x20 // More Fragments: no L4 header to look at
	return append(out, odd, frag)
}

// TestVethRXTX: with the program attached in each mode, frames sent on the
// wire end of a veth reach the socket byte for byte behind a zero vnet
// header, and frames written to the socket reach the wire end intact; GSO
// super-frames leave as their segments and partial checksums leave
// completed.
func TestVethRXTX(t *testing.T) {
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) {
			b := newBed(t, 1500)
			n := b.open(Config{Ifname: b.NIC, Mode: mode})
			if n.Mode() != mode || n.Sockets()[0].ZeroCopy() {
				t.Fatalf("attached %v, zero-copy %v; want %v in copy mode", n.Mode(), n.Sockets()[0].ZeroCopy(), mode)
			}
			s := n.Sockets()[0]
			w0, w1 := b.mac(b.WireNS, b.WireIf), b.mac(b.FwdNS, b.NIC)
			in, got := b.fromWire(s, w0, w1, 1500)
			if len(got) != len(in) {
				t.Fatalf("socket got %d of %d frames", len(got), len(in))
			}
			for i := range in {
				if !bytes.Equal(got[i].data, in[i]) || got[i].hdr != (vnethdr.Hdr{}) {
					t.Errorf("frame %d (%d bytes) arrived as %d bytes, header %+v", i, len(in[i]), len(got[i].data), got[i].hdr)
				}
			}

			raw := traffic.OpenRaw(t, b.Bed, b.WireNS, b.WireIf)
			out := l2Frames(t, w1, w0, 1500)
			var bufs [][]byte
			for _, f := range out {
				bufs = append(bufs, withHdr(vnethdr.Hdr{}, f))
			}
			writeAll(t, s, bufs)
			sent := wireFrames(t, raw, w1, len(out), 3*time.Second)
			if len(sent) != len(out) {
				t.Fatalf("wire got %d of %d frames", len(sent), len(out))
			}
			for i := range out {
				if !bytes.Equal(sent[i], out[i]) {
					t.Errorf("frame %d (%d bytes) left as %d bytes, changed", i, len(out[i]), len(sent[i]))
				}
			}

			super := gsoFrame(t, 20000, 1448)
			copy(super[vnethdr.Len:], w0)
			copy(super[vnethdr.Len+6:], w1)
			part := buildFrame(t, frameSpec{tcp: true, payload: 100})
			copy(part, w0)
			copy(part[6:], w1)
			ps := partialSum(part, 14, 34, 6)
			part[50], part[51] = byte(ps>>8), byte(ps)
			writeAll(t, s, [][]byte{super, withHdr(vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, CsumStart: 34, CsumOffset: 16}, part)})
			segs := wireFrames(t, raw, w1, 15, 3*time.Second)
			if len(segs) != 15 {
				t.Fatalf("wire got %d frames, want 14 segments and the completed frame", len(segs))
			}
			checkSegments(t, segs[:14], 20000, 1448)
			if !csumOK(segs[14]) {
				t.Error("the partial checksum was not completed")
			}
		})
	}
}
