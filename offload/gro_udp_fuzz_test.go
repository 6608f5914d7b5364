package offload

import (
	"encoding/binary"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// Actions of FuzzCoalesceUDP, one per generated frame; a datagram is the
// flow's next one (next IPv4 ID, the flow's size) unless the action says
// otherwise. The TCP flow takes only clean, short and PSH segments.
const (
	uactClean     = iota // 0..23
	uactShort     = 24   // 24..27: shorter, ends the run
	uactLarger    = 28   // larger than the flow's size
	uactEmpty     = 29
	uactIDSkip    = 30
	uactIDRepeat  = 31
	uactTOS       = 32 // this datagram only
	uactTTL       = 33
	uactDF        = 34 // DF flipped / flow label changed
	uactNoCsum    = 35 // check field 0: must not merge
	uactBadCsum   = 36 // corrupt, no flag: must not merge
	uactBadIPCsum = 37 // IPv4 header corrupt, FlagDataValid: must not merge
	uactULen      = 38 // UDP length short of the IP payload: must not merge
	uactCsumStart = 39 // FlagNeedsCsum pointing elsewhere
	uactGSO       = 40 // a USO frame of the flow
	uactNoRoom    = 41
	uactOptions   = 42 // IPv4 options / IPv6 extension headers
	uactPort      = 43 // another destination port: a flow of its own
	uactFragment  = 44 // IPv4 MF: no flow at all
	uactSize      = 45 // the flow changes its datagram size from here on
	uactEvil      = 46 // IPv4 reserved bit: must not merge
	uactPadded    = 47 // Ethernet padding after the IP packet: must not merge
	numUacts      = 48
)

// udpFuzzFlows is how many flows FuzzCoalesceUDP generates: four UDP ones
// (two with the same addresses and ports on different VLANs) and a TCP one
// on the first UDP flow's addresses and ports.
const udpFuzzFlows = 5

// FuzzCoalesceUDP builds a batch of up to 160 frames from four UDP flows and
// a TCP flow on the same addresses and ports as the first, with
// perturbations the fuzzer picks, and checks what Coalesce makes of it
// (fuzzBatch.check, with a size bound the fuzzer picks; expand checks that
// a USO super-frame holds at most UDP_GRO_CNT_MAX, 64, datagrams).
func FuzzCoalesceUDP(f *testing.F) {
	clean := []byte{0x00, 0, 0}
	for i := 0; i < 40; i++ {
		clean = append(clean, byte(i%udpFuzzFlows), 6*3, 0)
	}
	f.Add(clean)
	long := []byte{0x00, 0, 0}
	for i := 0; i < 150; i++ {
		long = append(long, 0, 6*3+1, 0) // 150 datagrams of one flow: the segment cap
	}
	f.Add(long)
	sized := []byte{0x00, 0, 0x13} // SetMaxSize(9000, 30000)
	for i := 0; i < 150; i++ {
		sized = append(sized, byte(i%udpFuzzFlows), 6*3+1, 0)
	}
	f.Add(sized)
	mixed := []byte{0x6b, 0x80, 0}
	for i := 0; i < numUacts; i++ {
		mixed = append(mixed, byte(i*udpFuzzFlows+i%udpFuzzFlows), byte(i*5), byte(i*37), 0, byte(i%3), 0)
	}
	f.Add(mixed)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzBytes(data)
		flows := [udpFuzzFlows]fuzzFlow{
			{base: groSeg{UDP: true}},
			{base: groSeg{UDP: true, V6: true, FlowLabel: 5}},
			{base: groSeg{UDP: true, VLAN: true}}, // flow 0's 5-tuple on a VLAN
			{base: groSeg{UDP: true, V6: true, QinQ: true, VLAN: true, SrcPort: 40001}},
			{base: groSeg{}}, // TCP on flow 0's addresses and ports
		}
		sizes := [...]int{18, 1, 64, 1472, 7, 100, 536, 1000}
		cfg := in.next()
		for k := range flows {
			flows[k].size = sizes[(int(cfg)>>k+k)&7]
			flows[k].id = 0xffe0 + uint16(k)
		}
		flows[4].seq = uint32(in.next()) << 24
		maxBatch := 160
		tbl := in.next()
		if tbl&0x80 != 0 {
			maxBatch = 2 // the table fills up
		}
		var batch fuzzBatch // flow 5+k: flow k's other port
		batch.sizes(tbl)
		for n := 0; n < 160 && len(in) > 0; n++ {
			op, arg, arg2 := in.next(), in.next(), in.next()
			k, act := int(op)%udpFuzzFlows, int(op)/udpFuzzFlows%numUacts
			fl := &flows[k]
			s := fl.next()
			size := fl.size
			mode := vnethdrtest.CsumMode(arg % 3)
			// Room for a head to grow: none, a datagram or two, a few
			// more, the most a super-frame can take; capped at 64 KiB,
			// since every frame of a batch this large makes fuzzing slow.
			room := min(65536, [...]int{0, fl.size / 2, fl.size, 2 * fl.size, 16 * fl.size, 44 * fl.size,
				udpMaxSegments * fl.size, (udpMaxSegments + 1) * fl.size}[(arg/3)&7])
			flow, isBad := k, false
			if k == 4 { // TCP
				switch {
				case act >= uactShort && act < uactLarger:
					size = 1 + int(arg2)%size
				case act == uactLarger:
					s.Flags = tcpACK | tcpPSH
				}
				s.Payload = pattern(size, byte(n))
				batch.add(segFrame(t, s, mode, room), flow, false)
				fl.seq += uint32(size)
				fl.id++
				continue
			}
			switch act {
			case uactShort, uactShort + 1, uactShort + 2, uactShort + 3:
				size = 1 + int(arg2)%size
			case uactLarger:
				size += 1 + int(arg2)%64
			case uactEmpty:
				size = 0
			case uactIDSkip:
				s.ID++
			case uactIDRepeat:
				s.ID--
			case uactTOS:
				s.TOS = arg2 | 1
			case uactTTL:
				s.TTL = arg2 | 1
			case uactDF:
				s.NoDF = true
				s.FlowLabel++
			case uactNoCsum:
				mode, s.NoCsum, isBad = vnethdrtest.CsumValid, true, true
			case uactBadCsum:
				mode, isBad = vnethdrtest.CsumFull, true
			case uactBadIPCsum:
				mode, isBad = vnethdrtest.CsumValid, !s.V6
			case uactULen:
				mode, isBad = vnethdrtest.CsumValid, true
			case uactCsumStart:
				mode = vnethdrtest.CsumPartial
			case uactGSO:
				size = 2 * fl.size
				mode = vnethdrtest.CsumPartial
			case uactNoRoom:
				room = 0
			case uactOptions:
				s.IPOpts, s.Ext = !s.V6, s.V6
			case uactPort:
				s.DstPort = 5202
				flow = udpFuzzFlows + k
			case uactFragment:
				if !s.V6 {
					s.MF, flow = true, -1
				}
			case uactSize:
				fl.size = sizes[arg2&7]
				size = fl.size
			case uactEvil:
				s.Evil, isBad = true, !s.V6
			case uactPadded:
				room, isBad = max(room, 8), true
			}
			s.Payload = pattern(size, byte(n))
			fr := segFrame(t, s, mode, room)
			l4 := fr.Start + s.L4()
			switch act {
			case uactBadCsum:
				// A payload byte or the check field; not the ports, which
				// would make it another flow's datagram.
				if at := int(arg2) % (size + 2); at < size {
					fr.Buf[fr.End-1-at] ^= 1 << (arg2 % 8)
				} else {
					fr.Buf[l4+udpCsumOff+at-size] ^= 1 << (arg2 % 8)
				}
			case uactBadIPCsum:
				if !s.V6 {
					fr.Buf[fr.Start+s.L3()+10] ^= 0x40
				}
			case uactULen:
				binary.BigEndian.PutUint16(fr.Buf[l4+4:], uint16(8+size-1-int(arg2)%max(size, 1)))
			case uactCsumStart:
				fr.Hdr.CsumStart = uint16(s.L3() + int(arg2)%20)
			case uactGSO:
				fr.Hdr.GSOType, fr.Hdr.GSOSize = vnethdr.GSOUDPL4, uint16(fl.size)
			case uactPadded:
				pad(&fr, 1+int(arg2)%8)
			}
			batch.add(fr, flow, isBad)
			// The sender moves on as a real one would.
			fl.id = s.ID + 1
			if act == uactGSO {
				fl.id++
			}
		}
		batch.check(t, maxBatch, func(k int) bool { return k%udpFuzzFlows != 4 })
	})
}
