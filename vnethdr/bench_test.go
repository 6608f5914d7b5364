package vnethdr

import (
	"fmt"
	"testing"
)

// BenchmarkSegmentTCPv4_64K splits the largest TSO frame a veth hands out
// (gso_size 1448, 45 segments) into MTU frames with all checksums.
func BenchmarkSegmentTCPv4_64K(b *testing.B) {
	// TCP timestamps on: 20 + 32 + 1448 = a 1500-byte IP packet.
	s := spec{tcpOpts: true, payload: pattern(1448*45, 1)}
	h, frame := superFrame(b, s, 1448)
	out, sizes := outBufs(64, 1514)
	n, err := Segment(h, frame, out, sizes)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Segment(h, frame, out, sizes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "pps")
}

func BenchmarkCompleteChecksum(b *testing.B) {
	for _, size := range []int{64, 1500, 65000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			s := spec{payload: pattern(size-54, 1)}
			h, frame := superFrame(b, s, 0)
			h.GSOType = GSONone
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				hh := h
				if err := CompleteChecksum(&hh, frame); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pps")
		})
	}
}

func BenchmarkFixup(b *testing.B) {
	h, frame := superFrame(b, spec{v6: true, ext: true, vlan: true, payload: pattern(60000, 1)}, 1400)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		hh := h
		if err := Fixup(&hh, frame); err != nil {
			b.Fatal(err)
		}
	}
}
