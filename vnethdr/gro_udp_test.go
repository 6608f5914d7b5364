package vnethdr

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// udpRun makes n datagrams of size bytes (the last one last bytes if not 0)
// with consecutive IPv4 IDs from base.id.
func udpRun(base groSeg, n, size, last int, seed byte) []groSeg {
	segs := make([]groSeg, n)
	for i := range segs {
		s := base
		s.udp = true
		s.id = base.id + uint16(i)
		sz := size
		if i == n-1 && last != 0 {
			sz = last
		}
		s.payload = pattern(sz, seed+byte(i))
		segs[i] = s
	}
	return segs
}

// checkUSOHead checks the header, lengths and check field of a UDP
// super-frame of gsoSize-byte datagrams built from s.
func checkUSOHead(t *testing.T, f Frame, s groSeg, gsoSize int) {
	t.Helper()
	want := Hdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: uint16(s.hdrLen()), GSOSize: uint16(gsoSize),
		CsumStart: uint16(s.l4()), CsumOffset: udpCsumOff}
	if f.Hdr != want {
		t.Errorf("header %+v, want %+v", f.Hdr, want)
	}
	b := f.Buf[f.Start:f.End]
	if s.v6 {
		if got := int(binary.BigEndian.Uint16(b[s.l3()+4:])); got != len(b)-s.l3()-40 {
			t.Errorf("IPv6 payload length %d, frame has %d", got, len(b)-s.l3()-40)
		}
	} else {
		if got := int(binary.BigEndian.Uint16(b[s.l3()+2:])); got != len(b)-s.l3() {
			t.Errorf("IPv4 total length %d, frame has %d", got, len(b)-s.l3())
		}
		if refSum(b[s.l3():s.l3()+20]) != 0xffff {
			t.Error("IPv4 header checksum does not verify")
		}
	}
	l4Len := len(b) - s.l4()
	if got := int(binary.BigEndian.Uint16(b[s.l4()+4:])); got != l4Len {
		t.Errorf("UDP length %d, want the whole %d (udp_send_skb)", got, l4Len)
	}
	src, dst := s.addrs()
	if got, want := binary.BigEndian.Uint16(b[s.l4()+6:]), refSum(pseudo(src, dst, protoUDP, l4Len)); got != want {
		t.Errorf("UDP check field %#04x, want the pseudo-header sum %#04x", got, want)
	}
}

func TestCoalesceUDP(t *testing.T) {
	tests := []struct {
		name          string
		base          groSeg
		n, size, last int
	}{
		{name: "udp4 two", n: 2, size: 1472},
		{name: "udp4 64 x 64 bytes", n: 64, size: 64},
		{name: "udp4 minimum frames", base: groSeg{id: 7}, n: 30, size: 18},
		{name: "udp4 short last", n: 5, size: 1000, last: 999},
		{name: "udp4 one-byte last", n: 5, size: 1000, last: 1},
		{name: "udp4 one-byte datagrams", n: 10, size: 1},
		{name: "udp4 odd size", n: 7, size: 1001, last: 3},
		{name: "udp4 no DF", base: groSeg{noDF: true, id: 0x1234}, n: 3, size: 1000},
		{name: "udp4 id wrap", base: groSeg{id: 0xfffd}, n: 6, size: 500},
		{name: "udp4 tos ttl ports", base: groSeg{tos: 0xb8, ttl: 3, srcPort: 1234, dstPort: 9999}, n: 3, size: 512},
		{name: "udp4 vlan", base: groSeg{vlan: true}, n: 6, size: 1468},
		{name: "udp4 qinq", base: groSeg{qinq: true, vlan: true}, n: 6, size: 1464},
		{name: "udp4 full 64k", n: 44, size: 1472},
		{name: "udp4 128 segments", n: udpMaxSegments, size: 18},
		{name: "udp6", base: groSeg{v6: true, flowLabel: 0x12345}, n: 10, size: 1452},
		{name: "udp6 traffic class small", base: groSeg{v6: true, tos: 0x28}, n: 64, size: 64, last: 10},
		{name: "udp6 vlan short last", base: groSeg{v6: true, vlan: true}, n: 3, size: 1448, last: 1},
		{name: "udp6 full 64k", base: groSeg{v6: true}, n: (65535 - 48) / 1452, size: 1452},
		{name: "udp6 128 segments", base: groSeg{v6: true}, n: udpMaxSegments, size: 2, last: 1},
	}
	for _, tt := range tests {
		for m := csumMode(0); m < numCsumModes; m++ {
			t.Run(fmt.Sprintf("%s/%v", tt.name, m), func(t *testing.T) {
				segs := udpRun(tt.base, tt.n, tt.size, tt.last, 1)
				fs := frames(t, segs, allModes(m), bigRoom)
				in, n := coalesce(t, fs)
				g := make([]int, tt.n)
				for i := range g {
					g[i] = i
				}
				checkGroups(t, fs, in, n, [][]int{g})
				checkUSOHead(t, fs[0], segs[0], tt.size)
			})
		}
	}
}

// Datagrams of one run may arrive with different checksum states, and
// tiny ones padded to 60 bytes.
func TestCoalesceUDPMixedAndPadded(t *testing.T) {
	segs := udpRun(groSeg{}, 9, 4, 0, 3)
	fs := frames(t, segs, func(i int) csumMode { return csumMode(i % 3) }, bigRoom)
	for i := range fs {
		fs[i].End += 14 // 46 -> 60 bytes, zero padding from make
		fs[i].Buf = fs[i].Buf[:fs[i].End]
	}
	in, n := coalesce(t, fs)
	checkGroups(t, fs, in, n, [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8}})
	if got := fs[0].End - fs[0].Start; got != 42+9*4 {
		t.Errorf("super-frame %d bytes, want %d", got, 42+9*4)
	}
}

// Every rule that keeps two datagrams apart: the second is the first's
// successor with one thing changed, and nothing is merged.
func TestCoalesceUDPRefuses(t *testing.T) {
	type tc struct {
		name string
		base groSeg
		// next changes the datagrams; frame their frames afterwards.
		next  func(a, b *groSeg)
		frame func(t *testing.T, a, b *Frame)
		mode  csumMode
	}
	none := func(a, b *groSeg) {}
	l4 := 14 + 20
	tests := []tc{
		{name: "ipv4 id skip", next: func(a, b *groSeg) { b.id++ }},
		{name: "ipv4 id repeated", next: func(a, b *groSeg) { b.id-- }},
		{name: "ipv4 id fixed at 0 (unconnected socket, DF)", next: func(a, b *groSeg) { a.id, b.id = 0, 0 }},
		{name: "ipv4 id backwards", next: func(a, b *groSeg) { b.id -= 2 }},
		{name: "tos", next: func(a, b *groSeg) { b.tos = 1 }},
		{name: "tos ecn ce", next: func(a, b *groSeg) { b.tos = 3 }},
		{name: "ttl", next: func(a, b *groSeg) { b.ttl = 63 }},
		{name: "df", next: func(a, b *groSeg) { b.noDF = true }},
		{name: "ipv4 options", next: func(a, b *groSeg) { a.ipOpts, b.ipOpts = true, true }},
		{name: "ipv4 options on one", next: func(a, b *groSeg) { b.ipOpts = true }},
		{name: "ipv4 fragment", next: func(a, b *groSeg) { b.mf = true }},
		{name: "ipv6 traffic class", base: groSeg{v6: true}, next: func(a, b *groSeg) { b.tos = 4 }},
		{name: "ipv6 flow label", base: groSeg{v6: true}, next: func(a, b *groSeg) { b.flowLabel = 7 }},
		{name: "ipv6 hop limit", base: groSeg{v6: true}, next: func(a, b *groSeg) { b.ttl = 1 }},
		{name: "ipv6 extension headers", base: groSeg{v6: true}, next: func(a, b *groSeg) { a.ext, b.ext = true, true }},
		{name: "ipv6 extension headers on one", base: groSeg{v6: true}, next: func(a, b *groSeg) { b.ext = true }},
		{name: "larger than the first", next: func(a, b *groSeg) { b.payload = pattern(1001, 9) }},
		{name: "empty second", next: func(a, b *groSeg) { b.payload = nil }},
		{name: "empty first", next: func(a, b *groSeg) { a.payload = nil }},
		{name: "no checksum on the second", mode: csumFull, next: func(a, b *groSeg) { b.noCsum = true }},
		{name: "no checksum on the second, data valid", mode: csumValid, next: func(a, b *groSeg) { b.noCsum = true }},
		{name: "no checksum on the first", mode: csumValid, next: func(a, b *groSeg) { a.noCsum = true }},
		{name: "no checksum on both", mode: csumValid, next: func(a, b *groSeg) { a.noCsum, b.noCsum = true, true }},
		{name: "ipv6 zero checksum", base: groSeg{v6: true}, mode: csumValid, next: func(a, b *groSeg) { b.noCsum = true }},
		{name: "other source port", next: func(a, b *groSeg) { b.srcPort = 40001 }},
		{name: "other destination port", next: func(a, b *groSeg) { b.dstPort = 5202 }},
		{name: "other source mac", next: func(a, b *groSeg) { b.srcMAC = 9 }},
		{name: "other vlan", base: groSeg{vlan: true}, next: func(a, b *groSeg) { b.vid = 101 }},
		{name: "tagged and untagged", next: func(a, b *groSeg) { b.vlan = true }},
		{name: "ipv4 and ipv6", next: func(a, b *groSeg) { b.v6 = true }},
		{name: "udp then tcp on the same ports", next: func(a, b *groSeg) { b.udp = false }},
		{name: "udp length short of the ip payload", mode: csumValid, next: none, frame: func(t *testing.T, a, b *Frame) {
			binary.BigEndian.PutUint16(b.Buf[b.Start+l4+4:], 1000+8-1)
		}},
		{name: "udp length beyond the ip payload on the first", mode: csumValid, next: none, frame: func(t *testing.T, a, b *Frame) {
			binary.BigEndian.PutUint16(a.Buf[a.Start+l4+4:], 1000+8+1)
		}},
		{name: "bad checksum on the second", next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Buf[b.End-1]++
		}},
		{name: "bad checksum on the first", next: none, frame: func(t *testing.T, a, b *Frame) {
			a.Buf[a.End-1]++
		}},
		{name: "bad checksum in the check field", next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Buf[b.Start+l4+6]++
		}},
		{name: "bad checksum in the length field", next: none, frame: func(t *testing.T, a, b *Frame) {
			// The IP length still says 1008: caught by the length rule,
			// and by the checksum.
			b.Buf[b.Start+l4+5]--
		}},
		{name: "bad ipv4 header checksum, data valid", mode: csumValid, next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Buf[b.Start+14+10]++
		}},
		{name: "bad ipv4 header checksum on the first, partial", mode: csumPartial, next: none, frame: func(t *testing.T, a, b *Frame) {
			a.Buf[a.Start+14+10]++
		}},
		{name: "partial checksum elsewhere", mode: csumPartial, next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Hdr.CsumStart = 14
		}},
		{name: "partial checksum at the tcp offset", mode: csumPartial, next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Hdr.CsumOffset = tcpCsumOff
		}},
		{name: "uso second", mode: csumPartial, next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Hdr.GSOType, b.Hdr.GSOSize = GSOUDPL4, 500
		}},
		{name: "uso first", mode: csumPartial, next: none, frame: func(t *testing.T, a, b *Frame) {
			a.Hdr.GSOType, a.Hdr.GSOSize = GSOUDPL4, 500
		}},
		{name: "capacity one byte short", next: none, frame: func(t *testing.T, a, b *Frame) {
			a.Buf = a.Buf[: len(a.Buf) : a.End+999]
		}},
		{name: "no capacity", next: none, frame: func(t *testing.T, a, b *Frame) {
			a.Buf = a.Buf[:len(a.Buf):a.End]
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.base
			a.udp, a.id, a.payload = true, 10, pattern(1000, 1)
			b := a
			b.id, b.payload = a.id+1, pattern(1000, 2)
			a0, b0 := a, b
			tt.next(&a, &b)
			fs := []Frame{segFrame(t, a, tt.mode, bigRoom), segFrame(t, b, tt.mode, bigRoom)}
			if tt.frame != nil {
				tt.frame(t, &fs[0], &fs[1])
			}
			in, n := coalesce(t, fs)
			for i := range fs {
				if fs[i].Merged || !unchanged(fs[i], in[i]) {
					t.Errorf("frame %d changed or merged (Merged %v)", i, fs[i].Merged)
				}
			}
			if n != 0 {
				t.Errorf("Coalesce returned %d", n)
			}
			// The control: the pair without the change merges.
			fs = []Frame{segFrame(t, a0, tt.mode, 1000), segFrame(t, b0, tt.mode, bigRoom)}
			in, n = coalesce(t, fs)
			checkGroups(t, fs, in, n, [][]int{{0, 1}})
		})
	}
}

// Batches with more than one run, and TCP and UDP together: which frames
// end up together.
func TestCoalesceUDPBatches(t *testing.T) {
	u := udpRun(groSeg{}, 8, 200, 0, 1)
	w := udpRun(groSeg{srcPort: 40001, id: 500}, 8, 200, 0, 2)
	v := udpRun(groSeg{v6: true, vlan: true}, 8, 120, 0, 3)
	x := udpRun(groSeg{dstPort: 5202, id: 9000}, 8, 64, 0, 4)
	a := run(groSeg{ts: true}, 8, 1448, 0, 5) // TCP on u's addresses and ports
	short := func(s groSeg) groSeg { s.payload = s.payload[:100]; return s }
	larger := func(s groSeg) groSeg { s.payload = pattern(300, 9); return s }
	noCsum := func(s groSeg) groSeg { s.noCsum = true; return s }
	f := func(s groSeg) func(*testing.T) Frame {
		return func(t *testing.T) Frame { return segFrame(t, s, csumFull, bigRoom) }
	}
	type tc struct {
		name  string
		batch []func(*testing.T) Frame
		want  [][]int
	}
	tests := []tc{
		{"two flows interleaved", []func(*testing.T) Frame{f(u[0]), f(w[0]), f(u[1]), f(w[1]), f(u[2]), f(w[2])},
			[][]int{{0, 2, 4}, {1, 3, 5}}},
		{"tcp and udp on the same ports are two flows", []func(*testing.T) Frame{f(a[0]), f(u[0]), f(a[1]), f(u[1]), f(a[2]), f(u[2])},
			[][]int{{0, 2, 4}, {1, 3, 5}}},
		{"short in the middle ends the run", []func(*testing.T) Frame{f(u[0]), f(u[1]), f(short(u[2])), f(u[3]), f(u[4])},
			[][]int{{0, 1, 2}, {3, 4}}},
		{"larger one starts the next run", []func(*testing.T) Frame{f(u[0]), f(larger(u[1])), f(u[2]), f(u[3])},
			[][]int{{0}, {1, 2}, {3}}}, // u[2] is shorter than 300: it ends the run
		{"lost datagram", []func(*testing.T) Frame{f(u[0]), f(u[1]), f(u[3]), f(u[4])},
			[][]int{{0, 1}, {2, 3}}},
		{"reordered", []func(*testing.T) Frame{f(u[0]), f(u[2]), f(u[1]), f(u[3]), f(u[4])},
			[][]int{{0}, {1}, {2}, {3, 4}}},
		{"zero checksum in the middle", []func(*testing.T) Frame{f(u[0]), f(u[1]), f(noCsum(u[2])), f(u[3]), f(u[4])},
			[][]int{{0, 1}, {3, 4}}},
		{"four udp flows and a tcp one, other frames between", []func(*testing.T) Frame{
			f(u[0]), f(a[0]), f(w[0]), f(v[0]), f(x[0]), f(u[1]), f(a[1]), f(w[1]), f(v[1]), f(x[1]),
			f(u[2]), f(noCsum(x[2])), f(w[2]), f(v[2]), f(a[2]), f(x[3]), f(x[4]), f(u[3])},
			[][]int{{0, 5, 10, 17}, {1, 6, 14}, {2, 7, 12}, {3, 8, 13}, {4, 9}, {15, 16}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := make([]Frame, len(tt.batch))
			for i, mk := range tt.batch {
				fs[i] = mk(t)
			}
			in, n := coalesce(t, fs)
			checkGroups(t, fs, in, n, tt.want)
		})
	}
}

// A super-frame holds at most UDP_MAX_SEGMENTS datagrams and 64 KiB of IP
// packet; the next datagram starts the next one.
func TestCoalesceUDPCaps(t *testing.T) {
	for _, tt := range []struct {
		name    string
		base    groSeg
		n, size int
		per     int
	}{
		{"segments", groSeg{}, 300, 18, udpMaxSegments},
		{"segments v6 vlan", groSeg{v6: true, vlan: true}, 200, 1, udpMaxSegments},
		{"size", groSeg{}, 64, 1472, (65535 - 28) / 1472},
		{"size v6", groSeg{v6: true}, 64, 1452, (65535 - 48) / 1452},
		{"size and segments", groSeg{}, 300, 600, (65535 - 28) / 600},
	} {
		t.Run(tt.name, func(t *testing.T) {
			segs := udpRun(tt.base, tt.n, tt.size, 0, 1)
			fs := frames(t, segs, allModes(csumValid), bigRoom)
			in, n := coalesce(t, fs)
			var want [][]int
			for i := 0; i < tt.n; i += tt.per {
				var g []int
				for j := i; j < min(i+tt.per, tt.n); j++ {
					g = append(g, j)
				}
				want = append(want, g)
			}
			checkGroups(t, fs, in, n, want)
			for _, g := range want {
				if l := fs[g[0]].End - fs[g[0]].Start - tt.base.l3(); l > 65535 {
					t.Errorf("IP packet of %d bytes", l)
				}
			}
		})
	}
}

// SetUDP(false) leaves every UDP frame alone and TCP as it was.
func TestCoalesceSetUDP(t *testing.T) {
	u := udpRun(groSeg{}, 4, 200, 0, 1)
	a := run(groSeg{}, 4, 1000, 0, 2)
	var fs []Frame
	for i := range u {
		fs = append(fs, segFrame(t, u[i], csumValid, bigRoom), segFrame(t, a[i], csumValid, bigRoom))
	}
	g := NewGRO(len(fs))
	g.SetUDP(false)
	in := cloneFrames(fs)
	n := g.Coalesce(fs)
	checkGroups(t, fs, in, n, [][]int{{1, 3, 5, 7}})
	g.SetUDP(true)
	fs = cloneFrames(in)
	n = g.Coalesce(fs)
	checkGroups(t, fs, in, n, [][]int{{0, 2, 4, 6}, {1, 3, 5, 7}})
}

// udpBatch is n datagrams of size bytes of payload each, of flows flows,
// interleaved.
func udpBatch(tb testing.TB, n, flows, size int, mode csumMode) []Frame {
	fs := make([]Frame, n)
	per := n / flows
	for k := 0; k < flows; k++ {
		segs := udpRun(groSeg{srcPort: uint16(40000 + k), id: uint16(k) << 12}, per, size, 0, byte(k))
		for i, s := range segs {
			fs[i*flows+k] = segFrame(tb, s, mode, bigRoom)
		}
	}
	return fs
}

func TestCoalesceUDPZeroAllocs(t *testing.T) {
	for _, flows := range []int{1, 4} {
		for m := csumMode(0); m < numCsumModes; m++ {
			fs := udpBatch(t, 64, flows, 64, m)
			b := newBatchState(fs)
			g := NewGRO(64)
			want := g.Coalesce(fs)
			if want != 64-flows {
				t.Fatalf("%d flows, %v: merged %d", flows, m, want)
			}
			allocs := testing.AllocsPerRun(100, func() {
				b.reset()
				if n := g.Coalesce(fs); n != want {
					t.Fatalf("merged %d, then %d", want, n)
				}
			})
			if allocs != 0 {
				t.Errorf("%d flows, %v: %v allocations per Coalesce", flows, m, allocs)
			}
		}
	}
}

// BenchmarkCoalesceUDP merges a batch of 64 datagrams with 64 bytes of
// payload each (106-byte frames, iperf3 -u -l 64): one flow (one USO frame
// of 64) or four interleaved flows (four of 16), with each checksum state;
// "unmerged" is the same one-flow batch with SetUDP(false), the cost of
// looking at frames Coalesce leaves alone. Each iteration restores the
// batch first; BenchmarkCoalesceUDP/reset measures that alone.
func BenchmarkCoalesceUDP(b *testing.B) {
	bench := func(b *testing.B, flows int, m csumMode, udp bool) {
		fs := udpBatch(b, 64, flows, 64, m)
		st := newBatchState(fs)
		g := NewGRO(64)
		g.SetUDP(udp)
		var size int64
		for _, f := range fs {
			size += int64(f.End - f.Start)
		}
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			st.reset()
			if n := g.Coalesce(fs); (n == 0) == udp {
				b.Fatalf("merged %d", n)
			}
		}
		b.ReportMetric(float64(len(fs))*float64(b.N)/b.Elapsed().Seconds(), "pps")
	}
	for _, flows := range []int{1, 4} {
		for m := csumMode(0); m < numCsumModes; m++ {
			b.Run(fmt.Sprintf("flows=%d/%v", flows, m), func(b *testing.B) { bench(b, flows, m, true) })
		}
	}
	b.Run("unmerged", func(b *testing.B) { bench(b, 1, csumValid, false) })
	b.Run("reset", func(b *testing.B) {
		st := newBatchState(udpBatch(b, 64, 1, 64, csumValid))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			st.reset()
		}
	})
}
