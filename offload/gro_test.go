package offload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// run makes n in-order segments (or datagrams) of base with size bytes of
// payload each (the last one last bytes if not 0), numbered from base.seq
// and base.id.
func run(base groSeg, n, size, last int, seed byte) []groSeg {
	segs := make([]groSeg, n)
	seq, id := base.Seq, base.ID
	for i := range segs {
		s := base
		sz := size
		if i == n-1 && last != 0 {
			sz = last
		}
		s.Seq, s.ID = seq, id
		s.Payload = pattern(sz, seed+byte(i))
		seq += uint32(sz)
		id++
		segs[i] = s
	}
	return segs
}

// groups is frames 0..n-1 in runs of per, the last one shorter if need be.
func groups(n, per int) [][]int {
	var want [][]int
	for i := 0; i < n; i += per {
		var g []int
		for j := i; j < min(i+per, n); j++ {
			g = append(g, j)
		}
		want = append(want, g)
	}
	return want
}

// checkGroups checks a coalesced batch against the input it came from:
// want[j] lists the input frames that output frame want[j][0] must hold, in
// order; frames not listed anywhere must be unchanged and not Merged.
func checkGroups(t *testing.T, got, in []Frame, n int, want [][]int) {
	t.Helper()
	merged := 0
	listed := make(map[int]bool)
	for _, g := range want {
		for k, i := range g {
			listed[i] = true
			if got[i].Merged != (k > 0) {
				t.Errorf("frame %d: Merged %v", i, got[i].Merged)
			}
		}
		merged += len(g) - 1
		head := got[g[0]]
		if len(g) == 1 {
			if !unchanged(head, in[g[0]]) {
				t.Errorf("frame %d: changed, but nothing merged into it", g[0])
			}
			continue
		}
		if !bytes.Equal(head.Buf[:head.Start], in[g[0]].Buf[:head.Start]) {
			t.Errorf("frame %d: written before Start", g[0])
		}
		segs := expand(t, head)
		if len(segs) != len(g) {
			t.Fatalf("frame %d: super-frame has %d segments, want %d", g[0], len(segs), len(g))
		}
		var payload []byte
		for k, i := range g {
			want := canonical(in[i])
			if !bytes.Equal(segs[k], want) {
				t.Errorf("frame %d: segment %d differs from input %d:\n got %x\nwant %x", g[0], k, i, segs[k], want)
			}
			d, ok := vnethdrtest.Decode(t, segs[k])
			if !ok {
				t.Fatalf("frame %d: segment %d does not decode", g[0], k)
			}
			payload = append(payload, d.Payload...)
		}
		// The super-frame itself, as gopacket sees it once finished.
		fc := append([]byte(nil), head.Buf[head.Start:head.End]...)
		h := head.Hdr
		if err := vnethdr.CompleteChecksum(&h, fc); err != nil {
			t.Fatal(err)
		}
		d, ok := vnethdrtest.Decode(t, fc)
		if !ok || !bytes.Equal(d.Payload, payload) {
			t.Errorf("frame %d: super-frame payload does not match its segments", g[0])
		}
	}
	for i := range got {
		if !listed[i] && (got[i].Merged || !unchanged(got[i], in[i])) {
			t.Errorf("frame %d: changed or Merged (%v), but not in any group", i, got[i].Merged)
		}
	}
	if n != merged {
		t.Errorf("Coalesce returned %d, want %d", n, merged)
	}
}

func coalesce(t *testing.T, frames []Frame) (in []Frame, n int) {
	t.Helper()
	in = cloneFrames(frames)
	for i := range frames {
		frames[i].Merged = true // Coalesce must clear it
	}
	return in, NewGRO(len(frames)).Coalesce(frames)
}

func frames(t *testing.T, segs []groSeg, mode func(i int) vnethdrtest.CsumMode, room int) []Frame {
	t.Helper()
	fs := make([]Frame, len(segs))
	for i, s := range segs {
		fs[i] = segFrame(t, s, mode(i), room)
	}
	return fs
}

// coalesceSegs frames segs in the checksum states mode gives, coalesces
// them and checks that they merge into the groups want.
func coalesceSegs(t *testing.T, segs []groSeg, mode func(int) vnethdrtest.CsumMode, want [][]int) []Frame {
	t.Helper()
	fs := frames(t, segs, mode, bigRoom)
	in, n := coalesce(t, fs)
	checkGroups(t, fs, in, n, want)
	return fs
}

// checkHead checks the header, lengths, check field and (TCP) PSH flag of
// the super-frame f that segs merged into.
func checkHead(t *testing.T, f Frame, segs []groSeg) {
	t.Helper()
	s := segs[0]
	want := vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, GSOType: s.GSOType(), HdrLen: uint16(s.HdrLen()), GSOSize: uint16(len(s.Payload)),
		CsumStart: uint16(s.L4()), CsumOffset: uint16(s.CsumOff())}
	if f.Hdr != want {
		t.Errorf("header %+v, want %+v", f.Hdr, want)
	}
	b := f.Buf[f.Start:f.End]
	if s.V6 {
		if got := int(binary.BigEndian.Uint16(b[s.L3()+4:])); got != len(b)-s.L3()-40 {
			t.Errorf("IPv6 payload length %d, frame has %d", got, len(b)-s.L3()-40)
		}
	} else {
		if got := int(binary.BigEndian.Uint16(b[s.L3()+2:])); got != len(b)-s.L3() {
			t.Errorf("IPv4 total length %d, frame has %d", got, len(b)-s.L3())
		}
		if vnethdrtest.RefSum(b[s.L3():s.L3()+20]) != 0xffff {
			t.Error("IPv4 header checksum does not verify")
		}
	}
	l4Len := len(b) - s.L4()
	if got, want := binary.BigEndian.Uint16(b[s.L4()+s.CsumOff():]), vnethdrtest.RefSum(s.Pseudo(l4Len)); got != want {
		t.Errorf("check field %#04x, want the pseudo-header sum %#04x", got, want)
	}
	if s.UDP {
		if got := int(binary.BigEndian.Uint16(b[s.L4()+4:])); got != l4Len {
			t.Errorf("UDP length %d, want the whole %d (udp_send_skb)", got, l4Len)
		}
	} else if psh, want := b[s.L4()+13]&tcpPSH != 0, segs[len(segs)-1].Flags&tcpPSH != 0; psh != want {
		t.Errorf("PSH %v, want %v", psh, want)
	}
}

// coalesceCase is n in-order segments of base with size bytes of payload
// each (the last one last bytes if not 0), which must merge into one
// super-frame in every checksum state.
type coalesceCase struct {
	name          string
	base          groSeg
	n, size, last int
	lastPSH       bool // TCP: PSH on the last segment
}

func testCoalesceRuns(t *testing.T, udp bool, tests []coalesceCase) {
	for _, tt := range tests {
		tt.base.UDP = udp
		for m := vnethdrtest.CsumMode(0); m < vnethdrtest.NumCsumModes; m++ {
			t.Run(fmt.Sprintf("%s/%v", tt.name, m), func(t *testing.T) {
				segs := run(tt.base, tt.n, tt.size, tt.last, 1)
				if tt.lastPSH {
					segs[len(segs)-1].Flags = tcpACK | tcpPSH
				}
				fs := coalesceSegs(t, segs, vnethdrtest.AllModes(m), groups(tt.n, tt.n))
				checkHead(t, fs[0], segs)
			})
		}
	}
}

// refuseCase is a pair that must not merge: two segments (datagrams) in
// order, then next changes them and frame their frames. The pair without
// the changes must merge.
type refuseCase struct {
	name  string
	base  groSeg
	next  func(a, b *groSeg)
	frame func(a, b *Frame)
	mode  vnethdrtest.CsumMode
}

// testRefuses runs the rules TCP and UDP share, then tests.
func testRefuses(t *testing.T, udp bool, tests []refuseCase) {
	csum := tcpCsumOff
	if udp {
		csum = udpCsumOff
	}
	common := []refuseCase{
		{name: "ipv4 id skip", next: func(a, b *groSeg) { b.ID++ }},
		{name: "ipv4 id backwards", next: func(a, b *groSeg) { b.ID -= 2 }},
		{name: "tos", next: func(a, b *groSeg) { b.TOS = 1 }},
		{name: "tos ecn ce", next: func(a, b *groSeg) { b.TOS = 3 }},
		{name: "ttl", next: func(a, b *groSeg) { b.TTL = 63 }},
		{name: "df", next: func(a, b *groSeg) { b.NoDF = true }},
		{name: "ipv4 options", next: func(a, b *groSeg) { a.IPOpts, b.IPOpts = true, true }},
		{name: "ipv4 options on one", next: func(a, b *groSeg) { b.IPOpts = true }},
		{name: "ipv4 fragment", next: func(a, b *groSeg) { b.MF = true }},
		// net/ipv4/af_inet.c: inet_gro_receive flushes a packet with any
		// frag_off bit but DF, the reserved one included, even when both
		// have it.
		{name: "ipv4 reserved bit on both", next: func(a, b *groSeg) { a.Evil, b.Evil = true, true }},
		{name: "ipv4 reserved bit on the first", next: func(a, b *groSeg) { a.Evil = true }},
		{name: "ipv4 reserved bit on the second", next: func(a, b *groSeg) { b.Evil = true }},
		// Ethernet padding after the IP packet: inet_gro_receive and
		// ipv6_gro_receive flush a packet whose IP length is not the
		// frame's.
		{name: "padding on both", frame: func(a, b *Frame) { pad(a, 2); pad(b, 2) }},
		{name: "padding on the first", frame: func(a, b *Frame) { pad(a, 1) }},
		{name: "padding on the second", frame: func(a, b *Frame) { pad(b, 6) }},
		{name: "ipv6 padding on the second", base: groSeg{V6: true}, frame: func(a, b *Frame) { pad(b, 4) }},
		{name: "ipv6 traffic class", base: groSeg{V6: true}, next: func(a, b *groSeg) { b.TOS = 4 }},
		{name: "ipv6 flow label", base: groSeg{V6: true}, next: func(a, b *groSeg) { b.FlowLabel = 7 }},
		{name: "ipv6 hop limit", base: groSeg{V6: true}, next: func(a, b *groSeg) { b.TTL = 1 }},
		{name: "ipv6 extension headers", base: groSeg{V6: true}, next: func(a, b *groSeg) { a.Ext, b.Ext = true, true }},
		{name: "ipv6 extension headers on one", base: groSeg{V6: true}, next: func(a, b *groSeg) { b.Ext = true }},
		{name: "larger than the first", next: func(a, b *groSeg) { b.Payload = pattern(1001, 9) }},
		{name: "other source port", next: func(a, b *groSeg) { b.SrcPort = 40001 }},
		{name: "other destination port", next: func(a, b *groSeg) { b.DstPort = 5202 }},
		{name: "other source mac", next: func(a, b *groSeg) { b.SrcMAC = 9 }},
		{name: "other vlan", base: groSeg{VLAN: true}, next: func(a, b *groSeg) { b.VID = 101 }},
		{name: "tagged and untagged", next: func(a, b *groSeg) { b.VLAN = true }},
		{name: "ipv4 and ipv6", next: func(a, b *groSeg) { b.V6 = true }},
		{name: "bad checksum on the second", frame: func(a, b *Frame) { b.Buf[b.End-1]++ }},
		{name: "bad checksum on the first", frame: func(a, b *Frame) { a.Buf[a.End-1]++ }},
		{name: "bad checksum in the check field", frame: func(a, b *Frame) { b.Buf[b.Start+34+csum]++ }},
		{name: "bad ipv4 header checksum, data valid", mode: vnethdrtest.CsumValid, frame: func(a, b *Frame) { b.Buf[b.Start+14+10]++ }},
		{name: "bad ipv4 header checksum on the first, partial", mode: vnethdrtest.CsumPartial, frame: func(a, b *Frame) { a.Buf[a.Start+14+10]++ }},
		{name: "partial checksum elsewhere", mode: vnethdrtest.CsumPartial, frame: func(a, b *Frame) { b.Hdr.CsumStart = 14 }},
		{name: "capacity one byte short", frame: func(a, b *Frame) { a.Buf = a.Buf[: len(a.Buf) : a.End+999] }},
		{name: "no capacity", frame: func(a, b *Frame) { a.Buf = a.Buf[:len(a.Buf):a.End] }},
		{name: "bad frame bounds", frame: func(a, b *Frame) { b.End = cap(b.Buf) + 1 }},
		{name: "second not IP", frame: func(a, b *Frame) { b.Buf[b.Start+12], b.Buf[b.Start+13] = 0x08, 0x06 }},
	}
	for _, tt := range append(common, tests...) {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.base
			a.UDP, a.Seq, a.ID, a.Payload = udp, 1000, 10, pattern(1000, 1)
			b := a
			b.Seq, b.ID, b.Payload = a.Seq+1000, a.ID+1, pattern(1000, 2)
			a0, b0 := a, b
			if tt.next != nil {
				tt.next(&a, &b)
			}
			fs := []Frame{segFrame(t, a, tt.mode, bigRoom), segFrame(t, b, tt.mode, bigRoom)}
			if tt.frame != nil {
				tt.frame(&fs[0], &fs[1])
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
			// The control: the pair without the changes merges.
			fs = []Frame{segFrame(t, a0, tt.mode, 1000), segFrame(t, b0, tt.mode, bigRoom)}
			in, n = coalesce(t, fs)
			checkGroups(t, fs, in, n, [][]int{{0, 1}})
		})
	}
}

// pad appends n zero bytes of Ethernet padding to f.
func pad(f *Frame, n int) {
	clear(f.Buf[f.End : f.End+n])
	f.End += n
	f.Buf = f.Buf[:max(len(f.Buf), f.End)]
}

// batchCase is a batch with more than one run and the groups Coalesce must
// make of it.
type batchCase struct {
	name  string
	batch []Frame
	want  [][]int
}

func testBatches(t *testing.T, tests []batchCase) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, n := coalesce(t, tt.batch)
			checkGroups(t, tt.batch, in, n, tt.want)
		})
	}
}

func TestCoalesce(t *testing.T) {
	testCoalesceRuns(t, false, []coalesceCase{
		{name: "tcp4 two", base: groSeg{}, n: 2, size: 1460},
		{name: "tcp4 eight timestamps", base: groSeg{TS: true, TSVal: 99}, n: 8, size: 1448},
		{name: "tcp4 short last", base: groSeg{TS: true}, n: 5, size: 1448, last: 100},
		{name: "tcp4 psh last", base: groSeg{}, n: 4, size: 1460, lastPSH: true},
		{name: "tcp4 short psh last", base: groSeg{TS: true}, n: 4, size: 1448, last: 7, lastPSH: true},
		{name: "tcp4 no DF", base: groSeg{NoDF: true, ID: 0x1234}, n: 3, size: 1000},
		{name: "tcp4 seq and id wrap", base: groSeg{Seq: 0xffffffff - 2000, ID: 0xfffe}, n: 6, size: 1000},
		{name: "tcp4 tos ttl ack window", base: groSeg{TOS: 0xb8, TTL: 3, Ack: 0xdeadbeef, Win: 65535}, n: 3, size: 1460},
		{name: "tcp4 full 64k", base: groSeg{TS: true}, n: 45, size: 1448},
		{name: "tcp4 TCP_MIN_MSS segments", base: groSeg{}, n: 10, size: vnethdr.TCPMinMSS},
		{name: "tcp4 odd mss", base: groSeg{}, n: 7, size: 1001, last: 3},
		{name: "tcp4 vlan", base: groSeg{VLAN: true}, n: 6, size: 1456},
		{name: "tcp4 qinq timestamps", base: groSeg{QinQ: true, VLAN: true, TS: true}, n: 6, size: 1440},
		{name: "tcp6", base: groSeg{V6: true, FlowLabel: 0x12345}, n: 10, size: 1440},
		{name: "tcp6 timestamps", base: groSeg{V6: true, TS: true, TOS: 0x28}, n: 10, size: 1428},
		{name: "tcp6 vlan short last", base: groSeg{V6: true, VLAN: true, TS: true}, n: 3, size: 1428, last: 1},
		{name: "tcp6 full 64k", base: groSeg{V6: true}, n: 65495 / 1440, size: 1440},
	})
}

// Segments of one run may arrive with different checksum states.
func TestCoalesceMixedChecksums(t *testing.T) {
	coalesceSegs(t, run(groSeg{TS: true}, 9, 1448, 0, 3), vnethdrtest.MixedModes, [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8}})
}

// Segments smaller than TCP_MIN_MSS are left alone: a super-frame of them
// would have a gso_size Fixup refuses (issue 13, item 5).
func TestCoalesceTinySegments(t *testing.T) {
	for _, size := range []int{1, 2, vnethdr.TCPMinMSS - 1} {
		segs := run(groSeg{}, 10, size, 0, 5)
		fs := frames(t, segs, vnethdrtest.AllModes(vnethdrtest.CsumFull), bigRoom)
		in, n := coalesce(t, fs)
		checkGroups(t, fs, in, n, nil)
	}
}

// Segments with Ethernet padding after the IP packet are not merged: the
// kernel's GRO flushes a packet whose IP length is not the frame's
// (net/ipv4/af_inet.c: inet_gro_receive, net/ipv6/ip6_offload.c:
// ipv6_gro_receive). Before issue 13 the padding was cut and they merged.
func TestCoalescePadded(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		segs := run(groSeg{V6: v6}, 4, vnethdr.TCPMinMSS, 0, 5)
		fs := frames(t, segs, vnethdrtest.AllModes(vnethdrtest.CsumFull), bigRoom)
		for i := range fs {
			fs[i].End += 4 // zero padding from make
			fs[i].Buf = fs[i].Buf[:fs[i].End]
		}
		in, n := coalesce(t, fs)
		checkGroups(t, fs, in, n, nil)
	}
}

// Every rule that keeps two segments apart: the second is the first's
// successor with one thing changed, and nothing is merged.
func TestCoalesceRefuses(t *testing.T) {
	testRefuses(t, false, []refuseCase{
		{name: "seq gap", next: func(a, b *groSeg) { b.Seq++ }},
		{name: "seq retransmit", next: func(a, b *groSeg) { b.Seq -= 1000 }},
		{name: "seq before", next: func(a, b *groSeg) { b.Seq -= 2000 }},
		{name: "ipv4 id fixed with DF", next: func(a, b *groSeg) { b.ID-- }},
		{name: "ack number", next: func(a, b *groSeg) { b.Ack++ }},
		{name: "window", next: func(a, b *groSeg) { b.Win = 1000 }},
		{name: "urgent pointer", next: func(a, b *groSeg) { b.Urg = 1 }},
		{name: "timestamp value", base: groSeg{TS: true}, next: func(a, b *groSeg) { b.TSVal++ }},
		{name: "timestamps on one", next: func(a, b *groSeg) { b.TS = true }},
		{name: "timestamps off on one", base: groSeg{TS: true}, next: func(a, b *groSeg) { b.TS = false }},
		{name: "syn", next: func(a, b *groSeg) { b.Flags = tcpACK | 0x02 }},
		{name: "fin", next: func(a, b *groSeg) { b.Flags = tcpACK | tcpFIN }},
		{name: "rst", next: func(a, b *groSeg) { b.Flags = tcpACK | 0x04 }},
		{name: "urg", next: func(a, b *groSeg) { b.Flags = tcpACK | 0x20 }},
		{name: "ece", next: func(a, b *groSeg) { b.Flags = tcpACK | 0x40 }},
		{name: "cwr", next: func(a, b *groSeg) { b.Flags = tcpACK | tcpCWR }},
		{name: "no ack", next: func(a, b *groSeg) { b.Flags = tcpPSH }},
		{name: "pure ack", next: func(a, b *groSeg) { b.Payload = nil }},
		{name: "psh on the first", next: func(a, b *groSeg) { a.Flags = tcpACK | tcpPSH }},
		{name: "payload under TCP_MIN_MSS", next: func(a, b *groSeg) {
			a.Payload, b.Payload, b.Seq = pattern(vnethdr.TCPMinMSS-1, 1), pattern(vnethdr.TCPMinMSS-1, 2), a.Seq+vnethdr.TCPMinMSS-1
		}},
		{name: "first under TCP_MIN_MSS", next: func(a, b *groSeg) {
			a.Payload, b.Payload, b.Seq = pattern(vnethdr.TCPMinMSS-1, 1), pattern(1, 2), a.Seq+vnethdr.TCPMinMSS-1
		}},
		{name: "partial checksum offset", mode: vnethdrtest.CsumPartial, frame: func(a, b *Frame) { b.Hdr.CsumOffset = udpCsumOff }},
		{name: "gso second", mode: vnethdrtest.CsumPartial, frame: func(a, b *Frame) { b.Hdr.GSOType, b.Hdr.GSOSize = vnethdr.GSOTCPv4, 500 }},
		{name: "gso first", mode: vnethdrtest.CsumPartial, frame: func(a, b *Frame) { a.Hdr.GSOType, a.Hdr.GSOSize = vnethdr.GSOTCPv4, 500 }},
		{name: "ecn bit alone", mode: vnethdrtest.CsumPartial, frame: func(a, b *Frame) { b.Hdr.GSOType = vnethdr.GSOECN }},
	})
}

// Batches with more than one run: which frames end up together.
func TestCoalesceBatches(t *testing.T) {
	a := run(groSeg{TS: true}, 8, 1448, 0, 1)
	b := run(groSeg{SrcPort: 40001, Seq: 77, TS: true}, 8, 1448, 0, 2)
	c := run(groSeg{V6: true, VLAN: true}, 8, 1440, 0, 3)
	d := run(groSeg{SrcPort: 40001, VLAN: true, VID: 7}, 8, 1460, 0, 4)
	reverse := groSeg{SrcPort: 40000, Ack: 12345, Flags: tcpACK}
	reverse.SrcMAC = 2
	f := func(s groSeg) Frame { return segFrame(t, s, vnethdrtest.CsumFull, bigRoom) }
	u := spec{UDP: true, Payload: pattern(200, 7)}.Seg() // IPv4 ID 0: never merges
	udp := func() Frame { return segFrame(t, u, vnethdrtest.CsumPartial, bigRoom) }
	psh := func(s groSeg) groSeg { s.Flags = tcpACK | tcpPSH; return s }
	short := func(s groSeg) groSeg { s.Payload = s.Payload[:100]; return s }
	bad := func(s groSeg) Frame { fr := f(s); fr.Buf[fr.End-1]++; return fr }
	testBatches(t, []batchCase{
		{"psh in the middle ends the run", []Frame{f(a[0]), f(a[1]), f(psh(a[2])), f(a[3]), f(a[4])},
			[][]int{{0, 1, 2}, {3, 4}}},
		{"short in the middle ends the run", []Frame{f(a[0]), f(a[1]), f(short(a[2])), f(a[3]), f(a[4])},
			[][]int{{0, 1, 2}, {3, 4}}}, // a[3] starts the next run
		{"nothing follows a short one", []Frame{f(a[0]), f(short(a[1])), f(groSeg{TS: true, Seq: a[1].Seq + 100, ID: 2, Payload: pattern(100, 9)})},
			[][]int{{0, 1}, {2}}},
		{"out of order", []Frame{f(a[0]), f(a[2]), f(a[1]), f(a[3]), f(a[4])},
			[][]int{{0}, {1}, {2}, {3, 4}}},
		{"swapped pair in a run", []Frame{f(a[0]), f(a[1]), f(a[3]), f(a[2]), f(a[4]), f(a[5])},
			[][]int{{0, 1}, {2}, {3}, {4, 5}}},
		{"two flows interleaved", []Frame{f(a[0]), f(b[0]), f(a[1]), f(b[1]), f(a[2]), f(b[2])},
			[][]int{{0, 2, 4}, {1, 3, 5}}},
		{"four flows, udp and another flow's acks between", []Frame{
			f(a[0]), f(b[0]), f(c[0]), f(d[0]), udp(), f(a[1]), f(reverse), f(b[1]), f(c[1]), f(d[1]),
			f(a[2]), udp(), f(b[2]), f(c[2]), f(reverse), f(d[2]), f(d[3])},
			[][]int{{0, 5, 10}, {1, 7, 12}, {2, 8, 13}, {3, 9, 15, 16}}},
		{"pure ack of the flow ends the run", []Frame{f(a[0]), f(a[1]), f(groSeg{TS: true, Seq: a[2].Seq}), f(a[2]), f(a[3])},
			[][]int{{0, 1}, {3, 4}}},
		{"bad checksum in the middle", []Frame{f(a[0]), f(a[1]), bad(a[2]), f(a[3]), f(a[4])},
			[][]int{{0, 1}, {3, 4}}},
		{"retransmit after a bad one", []Frame{f(a[0]), bad(a[1]), f(a[1]), f(a[2])},
			[][]int{{2, 3}}},
		{"bad head", []Frame{bad(a[0]), f(a[1]), f(a[2])},
			[][]int{{1, 2}}},
		{"capacity ends the run", []Frame{segFrame(t, a[0], vnethdrtest.CsumValid, 2*1448), f(a[1]), f(a[2]), f(a[3]), f(a[4])},
			[][]int{{0, 1, 2}, {3, 4}}},
	})
}

// A 64 KiB IP packet caps a run; the next segment starts the next one
// (expand checks the size).
func TestCoalesceSizeCap(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		base := groSeg{V6: v6, TS: true}
		// 20 (or 40) + 32 + 45 * 1448 <= 65535 < ... + 46 * 1448
		per := (65535 - (base.HdrLen() - base.L3())) / 1448
		coalesceSegs(t, run(base, 64, 1448, 0, 1), vnethdrtest.AllModes(vnethdrtest.CsumValid), groups(64, per))
	}
}

// SetMaxSize bounds a super-frame like the TAP's gro_ipv4_max_size and
// gro_max_size bound the kernel's GRO (net/core/gro.c: skb_gro_receive
// refuses to reach the size, counted from the end of the Ethernet header);
// tagged frames take the smaller of the two; sizes past GRO_LEGACY_MAX_SIZE
// are 65536, sizes of 0 or less merge nothing.
func TestCoalesceSetMaxSize(t *testing.T) {
	for _, tt := range []struct {
		name       string
		base       groSeg
		ipv4, IPv6 int
		size       int // the bound that applies; 0: nothing merges
	}{
		{"default v4", groSeg{TS: true}, 0, 0, 65536},
		{"default v6 vlan", groSeg{V6: true, VLAN: true}, 0, 0, 65536},
		{"v4 16k", groSeg{TS: true}, 16384, 65536, 16384},
		{"v6 16k", groSeg{V6: true}, 65536, 16384, 16384},
		{"v6 ignores the v4 size", groSeg{V6: true}, 1000, 20000, 20000},
		{"v4 ignores the v6 size", groSeg{}, 30000, 1000, 30000},
		{"v4 vlan takes the smaller", groSeg{VLAN: true}, 30000, 10000, 10000},
		{"v6 qinq takes the smaller", groSeg{V6: true, QinQ: true, VLAN: true}, 12000, 40000, 12000},
		{"big tcp clamped", groSeg{}, 185000, 185000, 65536},
		{"exactly two segments fit", groSeg{}, 20 + 20 + 2*1448 + 1, 0, 20 + 20 + 2*1448 + 1},
		{"two segments do not fit", groSeg{}, 20 + 20 + 2*1448, 0, 20 + 20 + 2*1448},
		{"zero", groSeg{}, 0, -1, 0},
		{"negative", groSeg{V6: true}, 65536, -5, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const n = 64
			segs := run(tt.base, n, 1448, 0, 1)
			fs := frames(t, segs, vnethdrtest.AllModes(vnethdrtest.CsumValid), bigRoom)
			in := cloneFrames(fs)
			g := NewGRO(n)
			if tt.ipv4 != 0 || tt.IPv6 != 0 {
				g.SetMaxSize(tt.ipv4, tt.IPv6)
			}
			got := g.Coalesce(fs)
			// Per super-frame: as many segments as keep the length
			// after the Ethernet header below the size.
			per := 1
			if hdrs := tt.base.HdrLen() - 14; tt.size > hdrs {
				per = max(1, (tt.size-1-hdrs)/1448)
			}
			checkGroups(t, fs, in, got, groups(n, per))
			for _, f := range fs {
				if !f.Merged && f.End-f.Start-14 >= max(tt.size, 1515) {
					t.Errorf("a frame of %d bytes after the Ethernet header, bound %d", f.End-f.Start-14, tt.size)
				}
			}
		})
	}
}

// The flow table is reused across batches, survives its generation counter
// wrapping, and leaves flows it has no room for alone.
func TestGROReuse(t *testing.T) {
	g := NewGRO(4)
	for round := 0; round < 3; round++ {
		if round == 2 {
			g.gen = ^uint32(0)
		}
		segs := run(groSeg{Seq: uint32(round) * 99999}, 4, 1000, 0, byte(round))
		fs := frames(t, segs, vnethdrtest.AllModes(vnethdrtest.CsumValid), bigRoom)
		in := cloneFrames(fs)
		n := g.Coalesce(fs)
		checkGroups(t, fs, in, n, [][]int{{0, 1, 2, 3}})
	}
	// Six flows, two segments each, in a table for two: the first two
	// flows merge, the others are left alone.
	g = NewGRO(2)
	var fs []Frame
	for k := 0; k < 2; k++ {
		for p := 0; p < 6; p++ {
			s := groSeg{SrcPort: uint16(1000 + p), Seq: uint32(k * 500), ID: uint16(k), Payload: pattern(500, byte(p))}
			fs = append(fs, segFrame(t, s, vnethdrtest.CsumValid, bigRoom))
		}
	}
	in := cloneFrames(fs)
	n := g.Coalesce(fs)
	checkGroups(t, fs, in, n, [][]int{{0, 6}, {1, 7}})
}

// batchState restores a batch to its input between runs of Coalesce, with
// no allocation: Coalesce writes only the headers and the tail of heads.
type batchState struct {
	frames, orig []Frame
	hdrs         [][]byte
}

func newBatchState(fs []Frame) *batchState {
	b := &batchState{frames: fs, orig: append([]Frame(nil), fs...)}
	for _, f := range fs {
		b.hdrs = append(b.hdrs, append([]byte(nil), f.Buf[f.Start:f.End]...))
	}
	return b
}

func (b *batchState) reset() {
	copy(b.frames, b.orig)
	for i, f := range b.frames {
		copy(f.Buf[f.Start:], b.hdrs[i][:min(len(b.hdrs[i]), 128)])
	}
}

// benchBatch is 64 segments of base with size bytes of payload each, of
// flows flows, interleaved.
func benchBatch(tb testing.TB, base groSeg, flows, size int, mode vnethdrtest.CsumMode) []Frame {
	fs := make([]Frame, 64)
	for k := 0; k < flows; k++ {
		b := base
		b.SrcPort, b.Seq, b.ID = uint16(40000+k), uint32(k)<<20, uint16(k)<<12
		for i, s := range run(b, 64/flows, size, 0, byte(k)) {
			fs[i*flows+k] = segFrame(tb, s, mode, bigRoom)
		}
	}
	return fs
}

// testZeroAllocs checks that Coalesce allocates nothing on batches of base,
// of which it merges merged[flows].
func testZeroAllocs(t *testing.T, base groSeg, size int, merged map[int]int) {
	for _, flows := range []int{1, 4} {
		for m := vnethdrtest.CsumMode(0); m < vnethdrtest.NumCsumModes; m++ {
			fs := benchBatch(t, base, flows, size, m)
			b := newBatchState(fs)
			g := NewGRO(64)
			want := g.Coalesce(fs)
			if want != merged[flows] {
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

func TestCoalesceZeroAllocs(t *testing.T) {
	testZeroAllocs(t, groSeg{TS: true}, 1448, map[int]int{1: 62, 4: 60})
}

// benchCoalesce merges batches of base: one flow or four interleaved, with
// each checksum state. Each iteration restores the batch first;
// "reset" measures that alone.
func benchCoalesce(b *testing.B, base groSeg, size int) {
	for _, flows := range []int{1, 4} {
		for m := vnethdrtest.CsumMode(0); m < vnethdrtest.NumCsumModes; m++ {
			b.Run(fmt.Sprintf("flows=%d/%v", flows, m), func(b *testing.B) {
				benchRun(b, benchBatch(b, base, flows, size, m), true)
			})
		}
	}
	b.Run("reset", func(b *testing.B) {
		st := newBatchState(benchBatch(b, base, 1, size, vnethdrtest.CsumValid))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			st.reset()
		}
	})
}

// benchRun coalesces fs b.N times with SetUDP(merge), which must merge
// something only if merge is set.
func benchRun(b *testing.B, fs []Frame, merge bool) {
	st := newBatchState(fs)
	g := NewGRO(len(fs))
	g.SetUDP(merge)
	var size int64
	for _, f := range fs {
		size += int64(f.End - f.Start)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st.reset()
		if n := g.Coalesce(fs); (n == 0) == merge {
			b.Fatalf("merged %d", n)
		}
	}
	b.ReportMetric(float64(len(fs))*float64(b.N)/b.Elapsed().Seconds(), "pps")
}

// BenchmarkCoalesce merges a batch of 64 MTU segments: one flow (two
// super-frames: 45 + 19 segments) or four interleaved flows (four of 16),
// with each checksum state. Each iteration restores the batch's headers
// first (64 copies of 66 bytes); BenchmarkCoalesce/reset measures that
// alone.
func BenchmarkCoalesce(b *testing.B) {
	benchCoalesce(b, groSeg{TS: true}, 1448)
}

// TestGROOpen: a segment GRO could extend leaves its flow open; PSH, no
// payload, a GSO frame, UDP with UDP off and a non-IP frame do not.
func TestGROOpen(t *testing.T) {
	seg := groSeg{Payload: pattern(1000, 1)}
	g := NewGRO(4)
	for _, tc := range []struct {
		name string
		s    groSeg
		hdr  func(h *vnethdr.Hdr)
		noUD bool
		want bool
	}{
		{name: "tcp segment", s: seg, want: true},
		{name: "tcp over ipv6", s: groSeg{V6: true, Payload: seg.Payload}, want: true},
		{name: "psh", s: groSeg{Flags: tcpACK | tcpPSH, Payload: seg.Payload}},
		{name: "pure ack", s: groSeg{}},
		{name: "fin", s: groSeg{Flags: tcpACK | tcpFIN, Payload: seg.Payload}},
		{name: "gso frame", s: seg, hdr: func(h *vnethdr.Hdr) { h.GSOType, h.GSOSize = vnethdr.GSOTCPv4, 500 }},
		{name: "udp", s: groSeg{UDP: true, Payload: seg.Payload}, want: true},
		{name: "udp off", s: groSeg{UDP: true, Payload: seg.Payload}, noUD: true},
	} {
		f := segFrame(t, tc.s, vnethdrtest.CsumPartial, bigRoom)
		if tc.hdr != nil {
			tc.hdr(&f.Hdr)
		}
		g.SetUDP(!tc.noUD)
		if got := g.Open(&f.Hdr, f.Buf[f.Start:f.End]); got != tc.want {
			t.Errorf("%s: Open = %v, want %v", tc.name, got, tc.want)
		}
	}
	arp := make([]byte, 60)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	if g.Open(&vnethdr.Hdr{}, arp) {
		t.Error("Open on an ARP frame")
	}
}
