package vnethdr

import (
	"encoding/binary"
	"math/bits"
)

// Sum adds b to acc as a one's complement sum of big-endian 16-bit words
// (RFC 1071) and returns the new accumulator, not yet folded. acc may be any
// earlier result of Sum, or a small start value (a protocol, a length).
//
// Eight bytes are added at a time as one big-endian 64-bit word: since
// 2^16 = 1 (mod 0xffff), a 64-bit word is congruent to the sum of its four
// 16-bit words and a carry out of bit 63 is worth 1, so adding the carry back
// (end-around) keeps the sum exact; Fold reduces it at the end. b must start
// at an even offset of the checksummed data, as every caller's slice does.
func Sum(b []byte, acc uint64) uint64 {
	var c uint64
	for len(b) >= 32 {
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b[0:8]), c)
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b[8:16]), c)
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b[16:24]), c)
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b[24:32]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b), c)
		b = b[8:]
	}
	if len(b) >= 4 {
		acc, c = bits.Add64(acc, uint64(binary.BigEndian.Uint32(b)), c)
		b = b[4:]
	}
	if len(b) >= 2 {
		acc, c = bits.Add64(acc, uint64(binary.BigEndian.Uint16(b)), c)
		b = b[2:]
	}
	if len(b) == 1 {
		// An odd last byte is padded with a zero byte on the right.
		acc, c = bits.Add64(acc, uint64(b[0])<<8, c)
	}
	// End-around carry. If acc wrapped, it is now small, so adding 1 cannot
	// carry again.
	acc, c = bits.Add64(acc, 0, c)
	return acc + c
}

// Fold reduces a Sum accumulator to 16 bits with end-around carries. The
// result is 0 only if every word summed was 0.
func Fold(acc uint64) uint16 {
	acc = (acc >> 32) + (acc & 0xffffffff)
	for acc > 0xffff {
		acc = (acc >> 16) + (acc & 0xffff)
	}
	return uint16(acc)
}

// Checksum turns an accumulated Sum into the value for a checksum field:
// the complement of its Fold. A result of 0 is written as 0xffff, like
// net/core/dev.c: skb_checksum_help (CSUM_MANGLED_0): for UDP 0 means "no
// checksum" (RFC 768, and is illegal over IPv6, RFC 8200 section 8.1); for
// TCP both are the same number in one's complement, so it is always safe.
func Checksum(acc uint64) uint16 {
	c := ^Fold(acc)
	if c == 0 {
		c = 0xffff
	}
	return c
}

// CompleteChecksum finishes a FlagNeedsCsum frame the way the kernel does in
// net/core/dev.c: skb_checksum_help: the sender left the folded pseudo-header
// sum in the field at CsumStart+CsumOffset (tcp_v4_send_check, udp4_hwcsum),
// so the one's complement sum of frame[CsumStart:] including that field is the
// checksum. It then clears FlagNeedsCsum. It is a no-op without the flag.
//
// The sum ends where the IP packet ends when the frame is IPv4 or IPv6 with
// a sane length, so Ethernet padding after a short packet is left out; for
// other frames it ends at len(frame). It returns ErrCsumBounds if the field
// lies outside that range.
func CompleteChecksum(h *Hdr, frame []byte) error {
	if h.Flags&FlagNeedsCsum == 0 {
		return nil
	}
	start, field := int(h.CsumStart), int(h.CsumStart)+int(h.CsumOffset)
	end := ipEnd(frame)
	if field+2 > end {
		return ErrCsumBounds
	}
	c := Checksum(Sum(frame[start:end], 0))
	binary.BigEndian.PutUint16(frame[field:], c)
	h.Flags &^= FlagNeedsCsum
	return nil
}
