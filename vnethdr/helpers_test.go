package vnethdr

import (
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// The test frames come from vnethdrtest (built by gopacket, not by this
// package); its Spec and Pattern, which nearly every test uses, go by
// short names here.

type spec = vnethdrtest.Spec

var pattern = vnethdrtest.Pattern

// build serializes s with lengths and full checksums computed by gopacket.
func build(tb testing.TB, s spec) []byte {
	tb.Helper()
	return s.Build(tb)
}

// superFrame is vnethdrtest.SuperFrame with this package's Hdr.
func superFrame(tb testing.TB, s spec, gsoSize int) (Hdr, []byte) {
	tb.Helper()
	h, f := vnethdrtest.SuperFrame(tb, s, gsoSize)
	return Hdr(h), f
}

// kernelRefusal is vnethdrtest.KernelRefusal for this package's Hdr.
func kernelRefusal(h Hdr, frameLen int) string {
	return vnethdrtest.KernelRefusal(vnethdrtest.Hdr(h), frameLen)
}
