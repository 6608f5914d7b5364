package fabric

import "encoding/binary"

// FlowHash hashes frame's flow (an Ethernet frame, 802.1Q/802.1ad tags
// skipped): its IPv4 or IPv6 addresses and, for TCP, UDP and SCTP that is
// no fragment, its ports; 0 for frames of no IP flow. Every frame of a
// flow hashes alike, so a flow keeps to one queue pair, in order.
func FlowHash(frame []byte) uint32 {
	off := 12
	for off+4 <= len(frame) {
		if t := binary.BigEndian.Uint16(frame[off:]); t != 0x8100 && t != 0x88a8 {
			break
		}
		off += 4
	}
	if off+2 > len(frame) {
		return 0
	}
	typ, l3 := binary.BigEndian.Uint16(frame[off:]), frame[off+2:]
	var h uint64
	var proto byte
	var l4 []byte
	switch {
	case typ == 0x0800 && len(l3) >= 20 && l3[0]>>4 == 4:
		ihl := int(l3[0]&0xf) * 4
		h = binary.BigEndian.Uint64(l3[12:20])
		if binary.BigEndian.Uint16(l3[6:8])&0x3fff == 0 && ihl >= 20 && len(l3) >= ihl+4 {
			proto, l4 = l3[9], l3[ihl:]
		}
	case typ == 0x86dd && len(l3) >= 40 && l3[0]>>4 == 6:
		h = binary.BigEndian.Uint64(l3[8:]) ^ binary.BigEndian.Uint64(l3[16:])*0x9e3779b97f4a7c15 ^
			binary.BigEndian.Uint64(l3[24:])*0xc2b2ae3d27d4eb4f ^ binary.BigEndian.Uint64(l3[32:])*0x165667b19e3779f9
		if len(l3) >= 44 {
			proto, l4 = l3[6], l3[40:]
		}
	default:
		return 0
	}
	if proto == 6 || proto == 17 || proto == 132 {
		h ^= uint64(binary.BigEndian.Uint32(l4)) * 0xff51afd7ed558ccd
	}
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 29
	return uint32(h >> 32)
}
