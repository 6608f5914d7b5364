package offload

import "testing"

// BenchmarkSegmentTCPv4_64K splits the largest TSO frame a veth hands out
// (gso_size 1448, 45 segments) into MTU frames with all checksums.
func BenchmarkSegmentTCPv4_64K(b *testing.B) {
	// TCP timestamps on: 20 + 32 + 1448 = a 1500-byte IP packet.
	s := spec{TCPOpts: true, Payload: pattern(1448*45, 1)}
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
