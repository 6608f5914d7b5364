package offload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// tunSpec describes a tunnel GSO frame as a packet socket hands it out
// after the kernel's GRO merged segments inside a tunnel.
type tunSpec struct {
	kind      string // "vxlan", "ipip" (IP-in-IP), "gre" (GRE, Ethernet inside), "gre-csum"
	outer6    bool   // IPv6 outer header
	inner     spec   // the inner packet (its Ethernet header is dropped for ipip)
	mss       int
	udpCsum0  bool // the outer UDP checksum is 0
	dataValid bool // FlagDataValid (CHECKSUM_UNNECESSARY) instead of NEEDS_CSUM
}

var (
	outerSrc4 = net.IPv4(198, 19, 0, 1).To4()
	outerDst4 = net.IPv4(198, 19, 0, 2).To4()
	outerSrc6 = net.ParseIP("2001:db8:1::1")
	outerDst6 = net.ParseIP("2001:db8:1::2")
)

// build returns the header and tunnel frame, the inner super-frame with
// its own header (as Segment takes it), and where the inner frame's bytes
// start in the tunnel frame and in the inner frame (ipip drops the inner
// Ethernet header).
func (ts tunSpec) build(tb testing.TB) (h vnethdr.Hdr, frame []byte, ih vnethdr.Hdr, inner []byte, at, skip int) {
	tb.Helper()
	ih, inner = superFrame(tb, ts.inner, ts.mss)
	body := inner
	var proto byte
	var tun []byte
	switch ts.kind {
	case "vxlan":
		proto = protoUDP
		tun = []byte{0xc3, 0x50, 0x12, 0xb5, 0, 0, 0, 0, // UDP 50000 -> 4789; length and check below
			0x08, 0, 0, 0, 0, 0, 42, 0} // VXLAN, VNI 42
	case "ipip":
		proto, body, skip = protoIPIP, inner[ethHdrLen:], ethHdrLen
		if ts.inner.V6 {
			proto = protoIPv6
		}
	case "gre":
		proto, tun = protoGRE, []byte{0, 0, 0x65, 0x58} // transparent Ethernet bridging
	case "gre-csum":
		proto, tun = protoGRE, []byte{0x80, 0, 0x65, 0x58, 0, 0, 0, 0}
	}
	eth := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
	var ip []byte
	n := len(tun) + len(body)
	if ts.outer6 {
		eth[12], eth[13] = 0x86, 0xdd
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(n))
		ip[6], ip[7] = proto, 64
		copy(ip[8:], outerSrc6)
		copy(ip[24:], outerDst6)
	} else {
		ip = make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+n))
		binary.BigEndian.PutUint16(ip[4:], 0x1234)
		ip[8], ip[9] = 64, proto
		copy(ip[12:], outerSrc4)
		copy(ip[16:], outerDst4)
		binary.BigEndian.PutUint16(ip[10:], ^vnethdrtest.RefSum(ip))
	}
	if ts.kind == "vxlan" {
		binary.BigEndian.PutUint16(tun[4:], uint16(n))
		if !ts.udpCsum0 {
			binary.BigEndian.PutUint16(tun[6:], 0xbeef) // anything: GRO leaves a partial sum
		}
	}
	frame = append(append(append(append([]byte(nil), eth...), ip...), tun...), body...)
	at = len(frame) - len(body)
	h = ih
	h.CsumStart = uint16(int(ih.CsumStart) + at - skip)
	h.HdrLen = 1464 // what af_packet left in it once; nothing reads it
	if ts.dataValid {
		h.Flags, h.CsumStart, h.CsumOffset = vnethdr.FlagDataValid, 0, 0
	}
	return h, frame, ih, inner, at, skip
}

// checkTunnelSegments segments ts's frame with SegmentTunnel and checks
// every segment: the inner part byte for byte what Segment makes of the
// inner super-frame, the outer IP and UDP headers' lengths and checksums,
// and the bytes between them unchanged.
func checkTunnelSegments(t *testing.T, ts tunSpec) {
	t.Helper()
	h, frame, ih, inner, at, skip := ts.build(t)
	if err := vnethdr.Fixup(&vnethdr.Hdr{Flags: h.Flags, GSOType: h.GSOType, GSOSize: h.GSOSize, CsumStart: h.CsumStart, CsumOffset: h.CsumOffset},
		append([]byte(nil), frame...)); err == nil {
		t.Error("Fixup took a tunnel GSO frame as a plain one")
	}
	want, wantSizes := outBufs(64, 2000)
	wn, err := Segment(ih, inner, want, wantSizes)
	if err != nil {
		t.Fatalf("Segment of the inner frame: %v", err)
	}
	orig := append([]byte(nil), frame...)
	out, sizes := outBufs(64, 2000)
	n, err := SegmentTunnel(h, frame, out, sizes)
	if err != nil || n != wn {
		t.Fatalf("SegmentTunnel = %d, %v; want %d segments", n, err, wn)
	}
	if !bytes.Equal(frame, orig) {
		t.Fatal("SegmentTunnel wrote to its input")
	}
	for i := 0; i < n; i++ {
		o, w := out[i][:sizes[i]], want[i][skip:wantSizes[i]]
		if !bytes.Equal(o[at:], w) {
			t.Fatalf("segment %d: inner part differs from Segment's at byte %d (of %d, want %d)", i, firstDiff(o[at:], w), len(o)-at, len(w))
		}
		checkOuter(t, ts, o, frame, at, i)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// checkOuter checks the outer headers of segment i (o) of frame.
func checkOuter(t *testing.T, ts tunSpec, o, frame []byte, at, i int) {
	t.Helper()
	var src, dst net.IP
	l4 := 14 + 20
	if ts.outer6 {
		l4 = 14 + 40
		if got := int(binary.BigEndian.Uint16(o[14+4:])); got != len(o)-l4 {
			t.Errorf("segment %d: outer payload length %d, want %d", i, got, len(o)-l4)
		}
		src, dst = outerSrc6, outerDst6
	} else {
		if s := vnethdrtest.RefSum(o[14:34]); s != 0xffff || int(binary.BigEndian.Uint16(o[16:])) != len(o)-14 ||
			binary.BigEndian.Uint16(o[18:]) != 0x1234+uint16(i) {
			t.Errorf("segment %d: outer IPv4 header %x (checksum sum %#x)", i, o[14:34], s)
		}
		src, dst = outerSrc4, outerDst4
	}
	if ts.kind == "vxlan" {
		u := o[l4:]
		if int(binary.BigEndian.Uint16(u[4:])) != len(u) {
			t.Errorf("segment %d: outer UDP length %d, want %d", i, binary.BigEndian.Uint16(u[4:]), len(u))
		}
		c := binary.BigEndian.Uint16(u[6:])
		if ts.udpCsum0 && c != 0 {
			t.Errorf("segment %d: outer UDP checksum %#x, want 0 as the input had", i, c)
		}
		if s := vnethdrtest.RefSum(vnethdrtest.Pseudo(src, dst, protoUDP, len(u)), u); !ts.udpCsum0 && s != 0xffff {
			t.Errorf("segment %d: outer UDP checksum does not verify (%#x)", i, s)
		}
		l4 += 8
	}
	if !bytes.Equal(o[l4:at], frame[l4:at]) {
		t.Errorf("segment %d: tunnel header changed: %x, was %x", i, o[l4:at], frame[l4:at])
	}
}

func TestSegmentTunnel(t *testing.T) {
	tcp := spec{TCPOpts: true, ID: 100, Seq: 7000, Payload: pattern(5000, 1)}
	for name, ts := range map[string]tunSpec{
		"vxlan":                {kind: "vxlan", inner: tcp, mss: 1348},
		"vxlan-udp-csum-0":     {kind: "vxlan", inner: tcp, mss: 1348, udpCsum0: true},
		"vxlan-data-valid":     {kind: "vxlan", inner: tcp, mss: 1348, dataValid: true},
		"vxlan-fin-cwr":        {kind: "vxlan", inner: spec{Flags: 0x80 | 0x10 | 0x08 | 0x01, Payload: pattern(3000, 2)}, mss: 1000},
		"vxlan6-in-6":          {kind: "vxlan", outer6: true, inner: spec{V6: true, Payload: pattern(4000, 3)}, mss: 1328},
		"vxlan6-in-4":          {kind: "vxlan", inner: spec{V6: true, VLAN: true, Payload: pattern(4000, 4)}, mss: 1328},
		"vxlan-uso":            {kind: "vxlan", inner: spec{UDP: true, Payload: pattern(4000, 5)}, mss: 1200},
		"vxlan6-data-valid":    {kind: "vxlan", outer6: true, inner: tcp, mss: 1348, dataValid: true},
		"ipip":                 {kind: "ipip", inner: tcp, mss: 1400},
		"ip6ip6":               {kind: "ipip", outer6: true, inner: spec{V6: true, Payload: pattern(4000, 6)}, mss: 1380},
		"ipip-data-valid":      {kind: "ipip", inner: tcp, mss: 1400, dataValid: true},
		"gre":                  {kind: "gre", inner: tcp, mss: 1400},
		"gre-one-segment":      {kind: "gre", inner: spec{Payload: pattern(1000, 7)}, mss: 1400},
		"vxlan-ipv4-options":   {kind: "vxlan", inner: spec{IPOpts: true, Payload: pattern(3000, 8)}, mss: 1300},
		"vxlan6-inner-ext-hdr": {kind: "vxlan", inner: spec{V6: true, Ext: true, Payload: pattern(3000, 9)}, mss: 1300},
	} {
		t.Run(name, func(t *testing.T) { checkTunnelSegments(t, ts) })
	}
}

func TestSegmentTunnelRefuses(t *testing.T) {
	tcp := spec{Payload: pattern(5000, 1)}
	good := tunSpec{kind: "vxlan", inner: tcp, mss: 1348}
	out, sizes := outBufs(64, 2000)
	for _, tc := range []struct {
		name string
		ts   tunSpec
		edit func(h *vnethdr.Hdr, frame []byte) []byte
		want error
	}{
		{"gre-with-checksum", tunSpec{kind: "gre-csum", inner: tcp, mss: 1400}, nil, ErrNotTunnel},
		{"not-gso", good, func(h *vnethdr.Hdr, f []byte) []byte { h.GSOType = vnethdr.GSONone; return f }, ErrNotTunnel},
		{"ufo", good, func(h *vnethdr.Hdr, f []byte) []byte { h.GSOType = vnethdr.GSOUDP; return f }, ErrNotTunnel},
		{"v6-type-v4-inner", good, func(h *vnethdr.Hdr, f []byte) []byte { h.GSOType = vnethdr.GSOTCPv6; return f }, ErrNotTunnel},
		{"udp-type-tcp-inner", good, func(h *vnethdr.Hdr, f []byte) []byte { h.GSOType = vnethdr.GSOUDPL4; return f }, ErrNotTunnel},
		{"csum-start-elsewhere", good, func(h *vnethdr.Hdr, f []byte) []byte { h.CsumStart -= 4; return f }, ErrNotTunnel},
		{"csum-offset", good, func(h *vnethdr.Hdr, f []byte) []byte { h.CsumOffset = 6; return f }, vnethdr.ErrCsumBounds},
		{"gso-size-0", good, func(h *vnethdr.Hdr, f []byte) []byte { h.GSOSize = 0; return f }, vnethdr.ErrGSOSize},
		{"gso-size-below-tcp-min-mss", good, func(h *vnethdr.Hdr, f []byte) []byte { h.GSOSize = 87; return f }, vnethdr.ErrGSOSize},
		{"outer-udp-length", good, func(h *vnethdr.Hdr, f []byte) []byte { f[14+20+5]--; return f }, ErrNotTunnel},
		{"inner-ip-length", good, func(h *vnethdr.Hdr, f []byte) []byte { f[64+3]--; return f }, ErrNotTunnel},
		{"inner-ip-checksum", good, func(h *vnethdr.Hdr, f []byte) []byte { f[64+10]++; return f }, ErrNotTunnel},
		{"padded", good, func(h *vnethdr.Hdr, f []byte) []byte { return append(f, 0, 0) }, ErrNotTunnel},
		{"truncated", good, func(h *vnethdr.Hdr, f []byte) []byte { return f[:len(f)-1] }, ErrNotTunnel},
		{"outer-fragment", good, func(h *vnethdr.Hdr, f []byte) []byte {
			f[14+6] = 0x20 // MF
			binary.BigEndian.PutUint16(f[14+10:], 0)
			binary.BigEndian.PutUint16(f[14+10:], ^vnethdrtest.RefSum(f[14:34]))
			return f
		}, ErrNotTunnel},
		{"outer-tcp", good, func(h *vnethdr.Hdr, f []byte) []byte {
			f[14+9] = protoTCP
			binary.BigEndian.PutUint16(f[14+10:], 0)
			binary.BigEndian.PutUint16(f[14+10:], ^vnethdrtest.RefSum(f[14:34]))
			return f
		}, ErrNotTunnel},
	} {
		h, f, _, _, _, _ := tc.ts.build(t)
		if tc.edit != nil {
			f = tc.edit(&h, f)
		}
		if n, err := SegmentTunnel(h, f, out, sizes); !errors.Is(err, tc.want) {
			t.Errorf("%s: SegmentTunnel = %d, %v; want %v", tc.name, n, err, tc.want)
		}
	}
	// A plain super-frame is Segment's, not SegmentTunnel's.
	h, f := superFrame(t, tcp, 1400)
	if _, err := SegmentTunnel(h, f, out, sizes); !errors.Is(err, ErrNotTunnel) {
		t.Errorf("plain super-frame: %v, want ErrNotTunnel", err)
	}
	h, f, _, _, _, _ = good.build(t)
	if _, err := SegmentTunnel(h, f, out[:3], sizes); !errors.Is(err, ErrTooManySegments) {
		t.Errorf("3 buffers for 4 segments: %v", err)
	}
	small, smallSizes := outBufs(64, 1000)
	if _, err := SegmentTunnel(h, f, small, smallSizes); !errors.Is(err, ErrSegmentTooBig) {
		t.Errorf("1000-byte buffers: %v", err)
	}
}

func TestSegmentTunnelZeroAllocs(t *testing.T) {
	h, f, _, _, _, _ := tunSpec{kind: "vxlan", inner: spec{Payload: pattern(30000, 1)}, mss: 1348}.build(t)
	out, sizes := outBufs(64, 2000)
	if a := testing.AllocsPerRun(100, func() {
		if _, err := SegmentTunnel(h, f, out, sizes); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("SegmentTunnel allocates %v times per call", a)
	}
}

func FuzzSegmentTunnel(f *testing.F) {
	for _, ts := range []tunSpec{
		{kind: "vxlan", inner: spec{Payload: pattern(300, 1)}, mss: 100},
		{kind: "vxlan", outer6: true, inner: spec{V6: true, UDP: true, Payload: pattern(200, 2)}, mss: 64},
		{kind: "ipip", inner: spec{Payload: pattern(300, 3)}, mss: 100, dataValid: true},
		{kind: "gre", inner: spec{VLAN: true, Payload: pattern(300, 4)}, mss: 90},
	} {
		h, fr, _, _, _, _ := ts.build(f)
		vnethdrtest.AddHdr(f, h, fr)
	}
	vnethdrtest.FuzzHdr(f, func(t *testing.T, h vnethdr.Hdr, frame []byte) {
		orig := append([]byte(nil), frame...)
		out, sizes := outBufs(16, 600)
		n, err := SegmentTunnel(h, frame, out, sizes)
		if !bytes.Equal(frame, orig) {
			t.Fatal("SegmentTunnel wrote to its input")
		}
		if err != nil {
			if n != 0 {
				t.Fatalf("%d segments with error %v", n, err)
			}
			return
		}
		if n < 1 || n > len(out) {
			t.Fatalf("%d segments", n)
		}
		for i := 0; i < n; i++ {
			if sizes[i] < 14 || sizes[i] > len(out[i]) {
				t.Fatalf("segment %d: size %d", i, sizes[i])
			}
		}
	})
}
