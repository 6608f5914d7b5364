package fabric

import "testing"

// BenchmarkInbox: a batch of 64 MTU-sized frames pushed, taken and
// released, the way a guest's worker and a TAP queue's worker share an
// inbox, from one sender or alternately from two; ns/op is per frame.
func BenchmarkInbox(b *testing.B) {
	for _, c := range []struct {
		name    string
		senders int
	}{{"one-sender", 1}, {"two-senders", 2}} {
		b.Run(c.name, func(b *testing.B) {
			in, err := NewInbox(256, 4<<20)
			if err != nil {
				b.Fatal(err)
			}
			defer in.Close()
			const batch = 64
			f := frame(mac0, far, 1500)
			out, tags := make([][]byte, batch), make([]Tag, batch)
			b.SetBytes(int64(len(f)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%batch == batch-1 {
					k, _ := in.Take(out, tags)
					in.Release(k)
				}
				in.Push(f, Tag{From: Guest, Guest: uint8(i % c.senders)})
			}
		})
	}
}
