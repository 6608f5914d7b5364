package offload

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

func TestCoalesceUDP(t *testing.T) {
	testCoalesceRuns(t, true, []coalesceCase{
		{name: "udp4 two", n: 2, size: 1472},
		{name: "udp4 64 x 64 bytes", n: 64, size: 64},
		{name: "udp4 minimum frames", base: groSeg{ID: 7}, n: 30, size: 18},
		{name: "udp4 short last", n: 5, size: 1000, last: 999},
		{name: "udp4 one-byte last", n: 5, size: 1000, last: 1},
		{name: "udp4 one-byte datagrams", n: 10, size: 1},
		{name: "udp4 odd size", n: 7, size: 1001, last: 3},
		{name: "udp4 no DF", base: groSeg{NoDF: true, ID: 0x1234}, n: 3, size: 1000},
		{name: "udp4 id wrap", base: groSeg{ID: 0xfffd}, n: 6, size: 500},
		{name: "udp4 tos ttl ports", base: groSeg{TOS: 0xb8, TTL: 3, SrcPort: 1234, DstPort: 9999}, n: 3, size: 512},
		{name: "udp4 vlan", base: groSeg{VLAN: true}, n: 6, size: 1468},
		{name: "udp4 qinq", base: groSeg{QinQ: true, VLAN: true}, n: 6, size: 1464},
		{name: "udp4 full 64k", n: 44, size: 1472},
		{name: "udp4 64 segments", n: udpGROMaxSegments, size: 18},
		{name: "udp6", base: groSeg{V6: true, FlowLabel: 0x12345}, n: 10, size: 1452},
		{name: "udp6 traffic class small", base: groSeg{V6: true, TOS: 0x28}, n: 64, size: 64, last: 10},
		{name: "udp6 vlan short last", base: groSeg{V6: true, VLAN: true}, n: 3, size: 1448, last: 1},
		{name: "udp6 full 64k", base: groSeg{V6: true}, n: (65535 - 48) / 1452, size: 1452},
		{name: "udp6 64 segments", base: groSeg{V6: true}, n: udpGROMaxSegments, size: 2, last: 1},
	})
}

// The runs tap's TestUSOIntoTAP (tap/gro_kernel_test.go) coalesces and
// writes into a real TAP, checked here like every case above; the kernel
// test checks only what the kernel makes of them.
func TestCoalesceUSOKernelRuns(t *testing.T) {
	wire4, lab4 := net.IPv4(198, 18, 1, 1).To4(), net.IPv4(198, 18, 1, 2).To4()
	tapMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
	for _, dst := range []struct{ V6, bcast bool }{{V6: false}, {V6: true}, {bcast: true}} {
		for _, sz := range []struct{ n, size, last int }{{40, 100, 37}, {udpGROMaxSegments, 18, 0}, {3, 1472, 0}} {
			t.Run(fmt.Sprintf("v6=%v/broadcast=%v/%dx%d+%d", dst.V6, dst.bcast, sz.n, sz.size, sz.last), func(t *testing.T) {
				base := groSeg{UDP: true, V6: dst.V6, DstPort: 7001, DstMAC: tapMAC, ID: 0xfff0, SrcIP: wire4, DstIP: lab4}
				switch {
				case dst.V6:
					base.SrcIP, base.DstIP = net.ParseIP("2001:2::1"), net.ParseIP("2001:2::2")
				case dst.bcast:
					base.DstPort += 2
					base.DstIP, base.DstMAC = net.IPv4(198, 18, 1, 255).To4(), net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
				}
				segs := run(base, sz.n, sz.size, sz.last, byte(sz.size))
				coalesceSegs(t, segs, vnethdrtest.MixedModes, groups(sz.n, sz.n))
			})
		}
	}
}

// Datagrams of one run may arrive with different checksum states; tiny
// ones padded to 60 bytes are left alone, as the kernel's GRO leaves them
// (net/ipv4/af_inet.c: inet_gro_receive flushes a packet whose IP length is
// not the frame's). Before issue 13 the padding was cut and they merged.
func TestCoalesceUDPMixedAndPadded(t *testing.T) {
	segs := run(groSeg{UDP: true}, 9, 4, 0, 3)
	fs := frames(t, segs, vnethdrtest.MixedModes, bigRoom)
	in, n := coalesce(t, fs)
	checkGroups(t, fs, in, n, [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8}})

	fs = frames(t, segs, vnethdrtest.MixedModes, bigRoom)
	for i := range fs {
		pad(&fs[i], 14) // 46 -> 60 bytes
	}
	in, n = coalesce(t, fs)
	checkGroups(t, fs, in, n, nil)
}

// Every rule that keeps two datagrams apart: the second is the first's
// successor with one thing changed, and nothing is merged.
func TestCoalesceUDPRefuses(t *testing.T) {
	l4 := 14 + 20
	testRefuses(t, true, []refuseCase{
		{name: "ipv4 id repeated", next: func(a, b *groSeg) { b.ID-- }},
		{name: "ipv4 id fixed at 0 (unconnected socket, DF)", next: func(a, b *groSeg) { a.ID, b.ID = 0, 0 }},
		{name: "empty second", next: func(a, b *groSeg) { b.Payload = nil }},
		{name: "empty first", next: func(a, b *groSeg) { a.Payload = nil }},
		{name: "no checksum on the second", mode: vnethdrtest.CsumFull, next: func(a, b *groSeg) { b.NoCsum = true }},
		{name: "no checksum on the second, data valid", mode: vnethdrtest.CsumValid, next: func(a, b *groSeg) { b.NoCsum = true }},
		{name: "no checksum on the first", mode: vnethdrtest.CsumValid, next: func(a, b *groSeg) { a.NoCsum = true }},
		{name: "no checksum on both", mode: vnethdrtest.CsumValid, next: func(a, b *groSeg) { a.NoCsum, b.NoCsum = true, true }},
		{name: "ipv6 zero checksum", base: groSeg{V6: true}, mode: vnethdrtest.CsumValid, next: func(a, b *groSeg) { b.NoCsum = true }},
		{name: "udp then tcp on the same ports", next: func(a, b *groSeg) { b.UDP = false }},
		{name: "udp length short of the ip payload", mode: vnethdrtest.CsumValid, frame: func(a, b *Frame) {
			binary.BigEndian.PutUint16(b.Buf[b.Start+l4+4:], 1000+8-1)
		}},
		{name: "udp length beyond the ip payload on the first", mode: vnethdrtest.CsumValid, frame: func(a, b *Frame) {
			binary.BigEndian.PutUint16(a.Buf[a.Start+l4+4:], 1000+8+1)
		}},
		// The IP length still says 1008: caught by the length rule, and by
		// the checksum.
		{name: "bad checksum in the length field", frame: func(a, b *Frame) { b.Buf[b.Start+l4+5]-- }},
		{name: "partial checksum at the tcp offset", mode: vnethdrtest.CsumPartial, frame: func(a, b *Frame) { b.Hdr.CsumOffset = tcpCsumOff }},
		{name: "uso second", mode: vnethdrtest.CsumPartial, frame: func(a, b *Frame) { b.Hdr.GSOType, b.Hdr.GSOSize = vnethdr.GSOUDPL4, 500 }},
		{name: "uso first", mode: vnethdrtest.CsumPartial, frame: func(a, b *Frame) { a.Hdr.GSOType, a.Hdr.GSOSize = vnethdr.GSOUDPL4, 500 }},
	})
}

// Batches with more than one run, and TCP and UDP together: which frames
// end up together.
func TestCoalesceUDPBatches(t *testing.T) {
	u := run(groSeg{UDP: true}, 8, 200, 0, 1)
	w := run(groSeg{UDP: true, SrcPort: 40001, ID: 500}, 8, 200, 0, 2)
	v := run(groSeg{UDP: true, V6: true, VLAN: true}, 8, 120, 0, 3)
	x := run(groSeg{UDP: true, DstPort: 5202, ID: 9000}, 8, 64, 0, 4)
	a := run(groSeg{TS: true}, 8, 1448, 0, 5) // TCP on u's addresses and ports
	f := func(s groSeg) Frame { return segFrame(t, s, vnethdrtest.CsumFull, bigRoom) }
	short := func(s groSeg) groSeg { s.Payload = s.Payload[:100]; return s }
	larger := func(s groSeg) groSeg { s.Payload = pattern(300, 9); return s }
	noCsum := func(s groSeg) groSeg { s.NoCsum = true; return s }
	testBatches(t, []batchCase{
		{"two flows interleaved", []Frame{f(u[0]), f(w[0]), f(u[1]), f(w[1]), f(u[2]), f(w[2])},
			[][]int{{0, 2, 4}, {1, 3, 5}}},
		{"tcp and udp on the same ports are two flows", []Frame{f(a[0]), f(u[0]), f(a[1]), f(u[1]), f(a[2]), f(u[2])},
			[][]int{{0, 2, 4}, {1, 3, 5}}},
		{"short in the middle ends the run", []Frame{f(u[0]), f(u[1]), f(short(u[2])), f(u[3]), f(u[4])},
			[][]int{{0, 1, 2}, {3, 4}}},
		{"larger one starts the next run", []Frame{f(u[0]), f(larger(u[1])), f(u[2]), f(u[3])},
			[][]int{{0}, {1, 2}, {3}}}, // u[2] is shorter than 300: it ends the run
		{"lost datagram", []Frame{f(u[0]), f(u[1]), f(u[3]), f(u[4])},
			[][]int{{0, 1}, {2, 3}}},
		{"reordered", []Frame{f(u[0]), f(u[2]), f(u[1]), f(u[3]), f(u[4])},
			[][]int{{0}, {1}, {2}, {3, 4}}},
		{"zero checksum in the middle", []Frame{f(u[0]), f(u[1]), f(noCsum(u[2])), f(u[3]), f(u[4])},
			[][]int{{0, 1}, {3, 4}}},
		{"four udp flows and a tcp one, other frames between", []Frame{
			f(u[0]), f(a[0]), f(w[0]), f(v[0]), f(x[0]), f(u[1]), f(a[1]), f(w[1]), f(v[1]), f(x[1]),
			f(u[2]), f(noCsum(x[2])), f(w[2]), f(v[2]), f(a[2]), f(x[3]), f(x[4]), f(u[3])},
			[][]int{{0, 5, 10, 17}, {1, 6, 14}, {2, 7, 12}, {3, 8, 13}, {4, 9}, {15, 16}}},
	})
}

// A super-frame holds at most UDP_GRO_CNT_MAX (64) datagrams, as the
// kernel's GRO (net/ipv4/udp_offload.c: udp_gro_receive_segment; before
// issue 13 it was UDP_MAX_SEGMENTS, 128, what a write may carry), and 64 KiB
// of IP packet (expand checks both); the next datagram starts the next one.
func TestCoalesceUDPCaps(t *testing.T) {
	for _, tt := range []struct {
		name    string
		base    groSeg
		n, size int
		per     int
	}{
		{"segments", groSeg{}, 300, 18, udpGROMaxSegments},
		{"segments v6 vlan", groSeg{V6: true, VLAN: true}, 200, 1, udpGROMaxSegments},
		{"size", groSeg{}, 64, 1472, (65535 - 28) / 1472},
		{"size v6", groSeg{V6: true}, 64, 1452, (65535 - 48) / 1452},
		{"segments before size", groSeg{}, 300, 600, udpGROMaxSegments}, // 64 x 600 < 64 KiB
		{"size before segments", groSeg{}, 300, 1100, (65535 - 28) / 1100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.base.UDP = true
			coalesceSegs(t, run(tt.base, tt.n, tt.size, 0, 1), vnethdrtest.AllModes(vnethdrtest.CsumValid), groups(tt.n, tt.per))
		})
	}
}

// SetUDP(false) leaves every UDP frame alone and TCP as it was.
func TestCoalesceSetUDP(t *testing.T) {
	u := run(groSeg{UDP: true}, 4, 200, 0, 1)
	a := run(groSeg{}, 4, 1000, 0, 2)
	var fs []Frame
	for i := range u {
		fs = append(fs, segFrame(t, u[i], vnethdrtest.CsumValid, bigRoom), segFrame(t, a[i], vnethdrtest.CsumValid, bigRoom))
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

func TestCoalesceUDPZeroAllocs(t *testing.T) {
	testZeroAllocs(t, groSeg{UDP: true}, 64, map[int]int{1: 63, 4: 60})
}

// BenchmarkCoalesceUDP merges a batch of 64 datagrams with 64 bytes of
// payload each (106-byte frames, iperf3 -u -l 64): one flow (one USO frame
// of 64) or four interleaved flows (four of 16), with each checksum state;
// "unmerged" is the same one-flow batch with SetUDP(false), the cost of
// looking at frames Coalesce leaves alone. Each iteration restores the
// batch first; BenchmarkCoalesceUDP/reset measures that alone.
func BenchmarkCoalesceUDP(b *testing.B) {
	benchCoalesce(b, groSeg{UDP: true}, 64)
	b.Run("unmerged", func(b *testing.B) { benchRun(b, benchBatch(b, groSeg{UDP: true}, 1, 64, vnethdrtest.CsumValid), false) })
}
