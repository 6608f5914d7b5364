package vnethdr_test

import (
	"encoding/binary"
	"fmt"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// Fixup checks a virtio-net header from an untrusted writer (a guest,
// another kernel) against its frame and rewrites it into what the kernel
// takes: here a TCPv4 GSO frame of 2,000 payload bytes in segments of
// 1,000, whose writer set a flag bit no one knows and a wrong header
// length. A gso_size below TCP's minimum MSS, or a checksum offset that is
// not the TCP check field, gets the frame refused.
func ExampleFixup() {
	frame := exampleTCPFrame(2000)
	wire := []byte{
		vnethdr.FlagNeedsCsum | 0x40, vnethdr.GSOTCPv4,
		0, 0, // hdr_len 0: wrong, the headers end at 54
		0xe8, 0x03, // gso_size 1000
		34, 0, // csum_start: the TCP header
		16, 0, // csum_offset: TCP's check field
	}
	var h vnethdr.Hdr
	if err := h.Decode(wire); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("fixed up:", vnethdr.Fixup(&h, frame))
	fmt.Printf("flags %d, gso type %d, gso size %d, hdr_len %d, checksum at %d+%d\n",
		h.Flags, h.GSOType, h.GSOSize, h.HdrLen, h.CsumStart, h.CsumOffset)

	tiny := h
	tiny.GSOSize = 1
	fmt.Println("gso_size 1:", vnethdr.Fixup(&tiny, frame))

	elsewhere := h
	elsewhere.CsumOffset = 6
	fmt.Println("checksum at 34+6:", vnethdr.Fixup(&elsewhere, frame))
	// Output:
	// fixed up: <nil>
	// flags 1, gso type 1, gso size 1000, hdr_len 54, checksum at 34+16
	// gso_size 1: vnet header: bad gso size
	// checksum at 34+6: vnet header: checksum start/offset out of bounds
}

// exampleTCPFrame is an Ethernet/IPv4/TCP frame from 198.18.0.1 to 198.18.0.2
// with n bytes of payload.
func exampleTCPFrame(n int) []byte {
	f := make([]byte, 14+20+20+n)
	copy(f, []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00})
	ip := f[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+20+n))
	ip[8], ip[9] = 64, 6 // TTL, TCP
	copy(ip[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5201)
	tcp[12] = 5 << 4 // data offset: 20 bytes
	tcp[13] = 0x18   // PSH, ACK
	return f
}
