package vnethdr

import (
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr/vnethdrtest"
)

// The test frames come from vnethdrtest (built by gopacket, not by this
// package); these are its helpers under the short names the tests use.

type spec = vnethdrtest.Spec

var (
	pattern     = vnethdrtest.Pattern
	refSum      = vnethdrtest.RefSum
	pseudo      = vnethdrtest.Pseudo
	fuzzSpec    = vnethdrtest.FuzzedSpec
	decodeFrame = vnethdrtest.Decode
	addHdr      = vnethdrtest.AddHdr[Hdr]
	fuzzHdr     = vnethdrtest.FuzzHdr[Hdr]
)

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
