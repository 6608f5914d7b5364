package vnethdr

import (
	"fmt"
	"testing"
)

func BenchmarkCompleteChecksum(b *testing.B) {
	for _, size := range []int{64, 1500, 65000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			s := spec{Payload: pattern(size-54, 1)}
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
	h, frame := superFrame(b, spec{V6: true, Ext: true, VLAN: true, Payload: pattern(60000, 1)}, 1400)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		hh := h
		if err := Fixup(&hh, frame); err != nil {
			b.Fatal(err)
		}
	}
}
