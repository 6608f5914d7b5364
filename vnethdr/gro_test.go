package vnethdr

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// run makes n in-order segments of base with mss bytes of payload each (the
// last one last bytes if not 0), numbered from base.seq and base.id.
func run(base groSeg, n, mss, last int, seed byte) []groSeg {
	segs := make([]groSeg, n)
	seq, id := base.seq, base.id
	for i := range segs {
		s := base
		size := mss
		if i == n-1 && last != 0 {
			size = last
		}
		s.seq, s.id = seq, id
		s.payload = pattern(size, seed+byte(i))
		seq += uint32(size)
		id++
		segs[i] = s
	}
	return segs
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
			d, ok := decodeFrame(t, segs[k])
			if !ok {
				t.Fatalf("frame %d: segment %d does not decode", g[0], k)
			}
			payload = append(payload, d.payload...)
		}
		// The super-frame itself, as gopacket sees it once finished.
		fc := append([]byte(nil), head.Buf[head.Start:head.End]...)
		h := head.Hdr
		if err := CompleteChecksum(&h, fc); err != nil {
			t.Fatal(err)
		}
		d, ok := decodeFrame(t, fc)
		if !ok || !bytes.Equal(d.payload, payload) {
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

func frames(t *testing.T, segs []groSeg, mode func(i int) csumMode, room int) []Frame {
	t.Helper()
	fs := make([]Frame, len(segs))
	for i, s := range segs {
		fs[i] = segFrame(t, s, mode(i), room)
	}
	return fs
}

func allModes(m csumMode) func(int) csumMode { return func(int) csumMode { return m } }

func TestCoalesce(t *testing.T) {
	type tc struct {
		name         string
		base         groSeg
		n, mss, last int
		lastPSH      bool
	}
	tests := []tc{
		{name: "tcp4 two", base: groSeg{}, n: 2, mss: 1460},
		{name: "tcp4 eight timestamps", base: groSeg{ts: true, tsval: 99}, n: 8, mss: 1448},
		{name: "tcp4 short last", base: groSeg{ts: true}, n: 5, mss: 1448, last: 100},
		{name: "tcp4 psh last", base: groSeg{}, n: 4, mss: 1460, lastPSH: true},
		{name: "tcp4 short psh last", base: groSeg{ts: true}, n: 4, mss: 1448, last: 7, lastPSH: true},
		{name: "tcp4 no DF", base: groSeg{noDF: true, id: 0x1234}, n: 3, mss: 1000},
		{name: "tcp4 seq and id wrap", base: groSeg{seq: 0xffffffff - 2000, id: 0xfffe}, n: 6, mss: 1000},
		{name: "tcp4 tos ttl ack window", base: groSeg{tos: 0xb8, ttl: 3, ack: 0xdeadbeef, win: 65535}, n: 3, mss: 1460},
		{name: "tcp4 full 64k", base: groSeg{ts: true}, n: 45, mss: 1448},
		{name: "tcp4 one-byte segments", base: groSeg{}, n: 10, mss: 1},
		{name: "tcp4 odd mss", base: groSeg{}, n: 7, mss: 1001, last: 3},
		{name: "tcp4 vlan", base: groSeg{vlan: true}, n: 6, mss: 1456},
		{name: "tcp4 qinq timestamps", base: groSeg{qinq: true, vlan: true, ts: true}, n: 6, mss: 1440},
		{name: "tcp6", base: groSeg{v6: true, flowLabel: 0x12345}, n: 10, mss: 1440},
		{name: "tcp6 timestamps", base: groSeg{v6: true, ts: true, tos: 0x28}, n: 10, mss: 1428},
		{name: "tcp6 vlan short last", base: groSeg{v6: true, vlan: true, ts: true}, n: 3, mss: 1428, last: 1},
		{name: "tcp6 full 64k", base: groSeg{v6: true}, n: 65495 / 1440, mss: 1440},
	}
	for _, tt := range tests {
		for m := csumMode(0); m < numCsumModes; m++ {
			t.Run(fmt.Sprintf("%s/%v", tt.name, m), func(t *testing.T) {
				segs := run(tt.base, tt.n, tt.mss, tt.last, 1)
				if tt.lastPSH {
					segs[len(segs)-1].flags = tcpACK | tcpPSH
				}
				fs := frames(t, segs, allModes(m), bigRoom)
				in, n := coalesce(t, fs)
				g := make([]int, tt.n)
				for i := range g {
					g[i] = i
				}
				checkGroups(t, fs, in, n, [][]int{g})
				h, s := fs[0].Hdr, segs[0]
				want := Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, HdrLen: uint16(s.hdrLen()), GSOSize: uint16(tt.mss),
					CsumStart: uint16(s.l4()), CsumOffset: 16}
				if s.v6 {
					want.GSOType = GSOTCPv6
				}
				if h != want {
					t.Errorf("header %+v, want %+v", h, want)
				}
				f := fs[0].Buf[fs[0].Start:fs[0].End]
				if s.v6 {
					if got := int(binary.BigEndian.Uint16(f[s.l3()+4:])); got != len(f)-s.l3()-40 {
						t.Errorf("IPv6 payload length %d, frame has %d", got, len(f)-s.l3()-40)
					}
				} else {
					if got := int(binary.BigEndian.Uint16(f[s.l3()+2:])); got != len(f)-s.l3() {
						t.Errorf("IPv4 total length %d, frame has %d", got, len(f)-s.l3())
					}
					if refSum(f[s.l3():s.l3()+20]) != 0xffff {
						t.Error("IPv4 header checksum does not verify")
					}
				}
				src, dst := s.addrs()
				if got, want := binary.BigEndian.Uint16(f[s.l4()+16:]), refSum(pseudo(src, dst, 6, len(f)-s.l4())); got != want {
					t.Errorf("TCP check field %#04x, want the pseudo-header sum %#04x", got, want)
				}
				if psh := f[s.l4()+13]&tcpPSH != 0; psh != tt.lastPSH {
					t.Errorf("PSH %v, want %v", psh, tt.lastPSH)
				}
			})
		}
	}
}

// Segments of one run may arrive with different checksum states.
func TestCoalesceMixedChecksums(t *testing.T) {
	segs := run(groSeg{ts: true}, 9, 1448, 0, 3)
	fs := frames(t, segs, func(i int) csumMode { return csumMode(i % 3) }, bigRoom)
	in, n := coalesce(t, fs)
	checkGroups(t, fs, in, n, [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8}})
}

// Tiny segments come padded to 60 bytes from a real wire; the super-frame
// is not padded.
func TestCoalescePadded(t *testing.T) {
	segs := run(groSeg{}, 4, 2, 0, 5)
	fs := frames(t, segs, allModes(csumFull), bigRoom)
	for i := range fs {
		fs[i].End += 4 // 56 -> 60 bytes, zero padding from make
		fs[i].Buf = fs[i].Buf[:fs[i].End]
	}
	in, n := coalesce(t, fs)
	checkGroups(t, fs, in, n, [][]int{{0, 1, 2, 3}})
	if got := fs[0].End - fs[0].Start; got != 54+8 {
		t.Errorf("super-frame %d bytes, want 62", got)
	}
}

// Every rule that keeps two segments apart: the second is the first's
// successor with one thing changed, and nothing is merged.
func TestCoalesceRefuses(t *testing.T) {
	type tc struct {
		name string
		base groSeg
		// next changes the second segment; frame its frame afterwards.
		next  func(*groSeg)
		frame func(t *testing.T, a, b *Frame)
		mode  csumMode
		// baseRefused: base itself never merges; otherwise the pair
		// without the change is checked to merge.
		baseRefused bool
	}
	none := func(*groSeg) {}
	tests := []tc{
		{name: "seq gap", next: func(s *groSeg) { s.seq++ }},
		{name: "seq retransmit", next: func(s *groSeg) { s.seq -= 1000 }},
		{name: "seq before", next: func(s *groSeg) { s.seq -= 2000 }},
		{name: "ipv4 id skip", next: func(s *groSeg) { s.id++ }},
		{name: "ipv4 id fixed with DF", next: func(s *groSeg) { s.id-- }},
		{name: "ipv4 id backwards", next: func(s *groSeg) { s.id -= 2 }},
		{name: "tos", next: func(s *groSeg) { s.tos = 1 }},
		{name: "tos ecn ce", next: func(s *groSeg) { s.tos = 3 }},
		{name: "ttl", next: func(s *groSeg) { s.ttl = 63 }},
		{name: "df", next: func(s *groSeg) { s.noDF = true }},
		{name: "ipv4 options", base: groSeg{ipOpts: true}, next: none, baseRefused: true},
		{name: "ipv4 options on one", next: func(s *groSeg) { s.ipOpts = true }},
		{name: "ipv4 fragment", next: func(s *groSeg) { s.mf = true }},
		{name: "ipv6 traffic class", base: groSeg{v6: true}, next: func(s *groSeg) { s.tos = 4 }},
		{name: "ipv6 flow label", base: groSeg{v6: true}, next: func(s *groSeg) { s.flowLabel = 7 }},
		{name: "ipv6 hop limit", base: groSeg{v6: true}, next: func(s *groSeg) { s.ttl = 1 }},
		{name: "ipv6 extension headers", base: groSeg{v6: true, ext: true}, next: none, baseRefused: true},
		{name: "ack number", next: func(s *groSeg) { s.ack++ }},
		{name: "window", next: func(s *groSeg) { s.win = 1000 }},
		{name: "urgent pointer", next: func(s *groSeg) { s.urg = 1 }},
		{name: "timestamp value", base: groSeg{ts: true}, next: func(s *groSeg) { s.tsval++ }},
		{name: "timestamps on one", next: func(s *groSeg) { s.ts = true }},
		{name: "timestamps off on one", base: groSeg{ts: true}, next: func(s *groSeg) { s.ts = false }},
		{name: "syn", next: func(s *groSeg) { s.flags = tcpACK | 0x02 }},
		{name: "fin", next: func(s *groSeg) { s.flags = tcpACK | tcpFIN }},
		{name: "rst", next: func(s *groSeg) { s.flags = tcpACK | 0x04 }},
		{name: "urg", next: func(s *groSeg) { s.flags = tcpACK | 0x20 }},
		{name: "ece", next: func(s *groSeg) { s.flags = tcpACK | 0x40 }},
		{name: "cwr", next: func(s *groSeg) { s.flags = tcpACK | tcpCWR }},
		{name: "no ack", next: func(s *groSeg) { s.flags = tcpPSH }},
		{name: "pure ack", next: func(s *groSeg) { s.payload = nil }},
		{name: "larger than the first", next: func(s *groSeg) { s.payload = pattern(1001, 9) }},
		{name: "psh on the first", base: groSeg{flags: tcpACK | tcpPSH}, next: func(s *groSeg) { s.flags = tcpACK }, baseRefused: true},
		{name: "other source port", next: func(s *groSeg) { s.srcPort = 40001 }},
		{name: "other source mac", next: func(s *groSeg) { s.srcMAC = 9 }},
		{name: "other vlan", base: groSeg{vlan: true}, next: func(s *groSeg) { s.vid = 101 }},
		{name: "tagged and untagged", next: func(s *groSeg) { s.vlan = true }},
		{name: "ipv4 and ipv6", next: func(s *groSeg) { s.v6 = true }},
		{name: "bad checksum on the second", next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Buf[b.End-1]++
		}},
		{name: "bad checksum on the first", next: none, frame: func(t *testing.T, a, b *Frame) {
			a.Buf[a.End-1]++
		}},
		{name: "bad checksum in the check field", next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Buf[b.Start+34+16]++
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
		{name: "partial checksum offset", mode: csumPartial, next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Hdr.CsumOffset = 6
		}},
		{name: "gso second", mode: csumPartial, next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Hdr.GSOType, b.Hdr.GSOSize = GSOTCPv4, 500
		}},
		{name: "gso first", mode: csumPartial, next: none, frame: func(t *testing.T, a, b *Frame) {
			a.Hdr.GSOType, a.Hdr.GSOSize = GSOTCPv4, 500
		}},
		{name: "ecn bit alone", mode: csumPartial, next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Hdr.GSOType = GSOECN
		}},
		{name: "capacity one byte short", next: none, frame: func(t *testing.T, a, b *Frame) {
			a.Buf = a.Buf[: len(a.Buf) : a.End+999]
		}},
		{name: "no capacity", next: none, frame: func(t *testing.T, a, b *Frame) {
			a.Buf = a.Buf[:len(a.Buf):a.End]
		}},
		{name: "bad frame bounds", next: none, frame: func(t *testing.T, a, b *Frame) {
			b.End = cap(b.Buf) + 1
		}},
		{name: "second not IP", next: none, frame: func(t *testing.T, a, b *Frame) {
			b.Buf[b.Start+12] = 0x08
			b.Buf[b.Start+13] = 0x06
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.base
			a.seq, a.id, a.payload = 1000, 10, pattern(1000, 1)
			b := a
			b.seq, b.id, b.payload = a.seq+1000, a.id+1, pattern(1000, 2)
			b0 := b
			tt.next(&b)
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
			if tt.baseRefused {
				return
			}
			// The control: the pair without the change merges.
			fs = []Frame{segFrame(t, a, tt.mode, 1000), segFrame(t, b0, tt.mode, bigRoom)}
			in, n = coalesce(t, fs)
			checkGroups(t, fs, in, n, [][]int{{0, 1}})
		})
	}
}

// Batches with more than one run: which frames end up together.
func TestCoalesceBatches(t *testing.T) {
	a := run(groSeg{ts: true}, 8, 1448, 0, 1)
	b := run(groSeg{srcPort: 40001, seq: 77, ts: true}, 8, 1448, 0, 2)
	c := run(groSeg{v6: true, vlan: true}, 8, 1440, 0, 3)
	d := run(groSeg{srcPort: 40001, vlan: true, vid: 7}, 8, 1460, 0, 4)
	reverse := groSeg{srcPort: 40000, ack: 12345, flags: tcpACK}
	reverse.srcMAC = 2
	udp := func(t *testing.T) Frame {
		h, f := superFrame(t, spec{udp: true, payload: pattern(200, 7)}, 0)
		h.GSOType = GSONone
		buf := make([]byte, groHeadroom+len(f), groHeadroom+len(f)+bigRoom)
		copy(buf[groHeadroom:], f)
		return Frame{Buf: buf, Start: groHeadroom, End: len(buf), Hdr: h}
	}
	psh := func(s groSeg) groSeg { s.flags = tcpACK | tcpPSH; return s }
	short := func(s groSeg) groSeg { s.payload = s.payload[:100]; return s }
	bad := func(f Frame) Frame { f.Buf[f.End-1]++; return f }
	f := func(s groSeg) func(*testing.T) Frame {
		return func(t *testing.T) Frame { return segFrame(t, s, csumFull, bigRoom) }
	}
	type tc struct {
		name  string
		batch []func(*testing.T) Frame
		want  [][]int
	}
	tests := []tc{
		{"psh in the middle ends the run", []func(*testing.T) Frame{f(a[0]), f(a[1]), f(psh(a[2])), f(a[3]), f(a[4])},
			[][]int{{0, 1, 2}, {3, 4}}},
		{"short in the middle ends the run", []func(*testing.T) Frame{f(a[0]), f(a[1]), f(short(a[2])), f(a[3]), f(a[4])},
			[][]int{{0, 1, 2}, {3, 4}}}, // a[3] starts the next run
		{"nothing follows a short one", []func(*testing.T) Frame{f(a[0]), f(short(a[1])), f(groSeg{ts: true, seq: a[1].seq + 100, id: 2, payload: pattern(100, 9)})},
			[][]int{{0, 1}, {2}}},
		{"out of order", []func(*testing.T) Frame{f(a[0]), f(a[2]), f(a[1]), f(a[3]), f(a[4])},
			[][]int{{0}, {1}, {2}, {3, 4}}},
		{"swapped pair in a run", []func(*testing.T) Frame{f(a[0]), f(a[1]), f(a[3]), f(a[2]), f(a[4]), f(a[5])},
			[][]int{{0, 1}, {2}, {3}, {4, 5}}},
		{"two flows interleaved", []func(*testing.T) Frame{f(a[0]), f(b[0]), f(a[1]), f(b[1]), f(a[2]), f(b[2])},
			[][]int{{0, 2, 4}, {1, 3, 5}}},
		{"four flows, udp and another flow's acks between", []func(*testing.T) Frame{
			f(a[0]), f(b[0]), f(c[0]), f(d[0]), udp, f(a[1]), f(reverse), f(b[1]), f(c[1]), f(d[1]),
			f(a[2]), udp, f(b[2]), f(c[2]), f(reverse), f(d[2]), f(d[3])},
			[][]int{{0, 5, 10}, {1, 7, 12}, {2, 8, 13}, {3, 9, 15, 16}}},
		{"pure ack of the flow ends the run", []func(*testing.T) Frame{f(a[0]), f(a[1]), f(groSeg{ts: true, seq: a[2].seq}), f(a[2]), f(a[3])},
			[][]int{{0, 1}, {3, 4}}},
		{"bad checksum in the middle", []func(*testing.T) Frame{f(a[0]), f(a[1]),
			func(t *testing.T) Frame { return bad(segFrame(t, a[2], csumFull, bigRoom)) }, f(a[3]), f(a[4])},
			[][]int{{0, 1}, {3, 4}}},
		{"retransmit after a bad one", []func(*testing.T) Frame{f(a[0]),
			func(t *testing.T) Frame { return bad(segFrame(t, a[1], csumFull, bigRoom)) }, f(a[1]), f(a[2])},
			[][]int{{2, 3}}},
		{"bad head", []func(*testing.T) Frame{func(t *testing.T) Frame { return bad(segFrame(t, a[0], csumFull, bigRoom)) },
			f(a[1]), f(a[2])},
			[][]int{{1, 2}}},
		{"capacity ends the run", []func(*testing.T) Frame{
			func(t *testing.T) Frame { return segFrame(t, a[0], csumValid, 2*1448) }, f(a[1]), f(a[2]), f(a[3]), f(a[4])},
			[][]int{{0, 1, 2}, {3, 4}}},
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

// A 64 KiB IP packet caps a run; the next segment starts the next one.
func TestCoalesceSizeCap(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		base := groSeg{v6: v6, ts: true}
		segs := run(base, 64, 1448, 0, 1)
		fs := frames(t, segs, allModes(csumValid), bigRoom)
		in, n := coalesce(t, fs)
		// 20 (or 40) + 32 + 45 * 1448 <= 65535 < ... + 46 * 1448
		per := (65535 - (base.hdrLen() - base.l3())) / 1448
		var want [][]int
		for i := 0; i < 64; i += per {
			var g []int
			for j := i; j < min(i+per, 64); j++ {
				g = append(g, j)
			}
			want = append(want, g)
		}
		checkGroups(t, fs, in, n, want)
		for _, g := range want {
			if l := fs[g[0]].End - fs[g[0]].Start - base.l3(); l > 65535 {
				t.Errorf("v6 %v: IP packet of %d bytes", v6, l)
			}
		}
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
		segs := run(groSeg{seq: uint32(round) * 99999}, 4, 1000, 0, byte(round))
		fs := frames(t, segs, allModes(csumValid), bigRoom)
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
			s := groSeg{srcPort: uint16(1000 + p), seq: uint32(k * 500), id: uint16(k), payload: pattern(500, byte(p))}
			fs = append(fs, segFrame(t, s, csumValid, bigRoom))
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

// benchBatch is n MTU segments (timestamps on, 1448 bytes of payload each,
// 1514-byte frames) of flows flows, interleaved.
func benchBatch(tb testing.TB, n, flows int, mode csumMode) []Frame {
	fs := make([]Frame, n)
	per := n / flows
	for k := 0; k < flows; k++ {
		segs := run(groSeg{ts: true, srcPort: uint16(40000 + k), seq: uint32(k) << 20}, per, 1448, 0, byte(k))
		for i, s := range segs {
			fs[i*flows+k] = segFrame(tb, s, mode, bigRoom)
		}
	}
	return fs
}

func TestCoalesceZeroAllocs(t *testing.T) {
	for _, flows := range []int{1, 4} {
		for m := csumMode(0); m < numCsumModes; m++ {
			fs := benchBatch(t, 64, flows, m)
			b := newBatchState(fs)
			g := NewGRO(64)
			want := g.Coalesce(fs)
			if want != map[int]int{1: 62, 4: 60}[flows] {
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

// BenchmarkCoalesce merges a batch of 64 MTU segments: one flow (two
// super-frames: 45 + 19 segments) or four interleaved flows (four of 16),
// with each checksum state. Each iteration restores the batch's headers
// first (64 copies of 66 bytes); BenchmarkCoalesce/reset measures that
// alone.
func BenchmarkCoalesce(b *testing.B) {
	for _, flows := range []int{1, 4} {
		for m := csumMode(0); m < numCsumModes; m++ {
			b.Run(fmt.Sprintf("flows=%d/%v", flows, m), func(b *testing.B) {
				fs := benchBatch(b, 64, flows, m)
				st := newBatchState(fs)
				g := NewGRO(64)
				var size int64
				for _, f := range fs {
					size += int64(f.End - f.Start)
				}
				b.SetBytes(size)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					st.reset()
					if g.Coalesce(fs) == 0 {
						b.Fatal("nothing merged")
					}
				}
				b.ReportMetric(float64(len(fs))*float64(b.N)/b.Elapsed().Seconds(), "pps")
			})
		}
	}
	b.Run("reset", func(b *testing.B) {
		st := newBatchState(benchBatch(b, 64, 1, csumValid))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			st.reset()
		}
	})
}
