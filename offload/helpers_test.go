package offload

import (
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// The test frames come from vnethdrtest (built by gopacket, not by vnethdr
// or this package); its frame types and Pattern, which nearly every test
// uses, go by short names here.

type (
	spec   = vnethdrtest.Spec
	groSeg = vnethdrtest.Seg
)

var pattern = vnethdrtest.Pattern

// Values the tests read frames by (RFC 793, IEEE 802.3,
// include/linux/udp.h).
const (
	tcpCsumOff     = 16 // offsetof(struct tcphdr, check)
	etherTypeIPv4  = 0x0800
	udpMaxSegments = 128 // UDP_MAX_SEGMENTS: the most a USO write may carry
)

// ipEnd is where the IP packet in frame ends (Ethernet padding left out),
// or len(frame) when it does not parse.
func ipEnd(frame []byte) int {
	if l, err := vnethdr.Parse(frame); err == nil {
		return l.End
	}
	return len(frame)
}

// build serializes s with lengths and full checksums computed by gopacket.
func build(tb testing.TB, s spec) []byte {
	tb.Helper()
	return s.Build(tb)
}

// superFrame is vnethdrtest.SuperFrame with vnethdr's Hdr.
func superFrame(tb testing.TB, s spec, gsoSize int) (vnethdr.Hdr, []byte) {
	tb.Helper()
	h, f := vnethdrtest.SuperFrame(tb, s, gsoSize)
	return vnethdr.Hdr(h), f
}

// kernelRefusal is vnethdrtest.KernelRefusal for vnethdr's Hdr.
func kernelRefusal(h vnethdr.Hdr, frameLen int) string {
	return vnethdrtest.KernelRefusal(vnethdrtest.Hdr(h), frameLen)
}

// outBufs is n output buffers of size bytes for Segment, and their sizes.
func outBufs(n, size int) ([][]byte, []int) {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
	}
	return out, make([]int, n)
}
