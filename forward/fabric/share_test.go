package fabric

import "testing"

// flood runs rounds of a bottleneck: each round a flooding guest offers
// flood frames of size big, a steady guest steady frames of 60 bytes (the
// flooder first, then the steady guest, then the flooder again: it takes
// whatever room came free), and the owner takes and releases up to take
// frames. It returns how many frames each guest got in.
func flood(t *testing.T, in *Inbox, rounds, flood, steady, take, big int) (flooder, calm int) {
	t.Helper()
	out, tags := make([][]byte, take), make([]Tag, take)
	fl, st := frame(mac0, far, big-14), frame(mac1, far, 60-14)
	for range rounds {
		for i := range flood {
			if i == flood/2 {
				for range steady {
					if in.Push(st, Tag{From: Guest, Guest: 1}) {
						calm++
					}
				}
			}
			if in.Push(fl, Tag{From: Guest, Guest: 0}) {
				flooder++
			}
		}
		k, _ := in.Take(out, tags)
		in.Release(k)
	}
	return flooder, calm
}

// TestInboxShare: a guest flooding an inbox faster than its owner empties
// it cannot take the room another guest needs: a guest sending a steady
// stream loses no frame, whether the flood fills the inbox's frame count
// (small frames) or its bytes (large ones), while the flooder loses what
// the owner cannot take. Two guests flooding alike each get in at least
// two fifths of what the owner takes, the first to find room no more. Before
// the inbox kept shares, the flood took every slot that came free and
// the steady guest lost almost all it sent.
func TestInboxShare(t *testing.T) {
	const rounds, take = 200, 16
	for _, c := range []struct {
		name string
		big  int
	}{{"frames", 60}, {"bytes", 60000}} {
		in, err := NewInbox(256, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		flooder, calm := flood(t, in, rounds, 32, 2, take, c.big)
		if calm != rounds*2 {
			t.Errorf("%s: the steady guest got %d of %d frames in", c.name, calm, rounds*2)
		}
		if flooder >= rounds*32 {
			t.Errorf("%s: the flooder got all %d in: no bottleneck", c.name, flooder)
		}
	}
	in, err := NewInbox(256, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	a, b := flood(t, in, rounds, 32, 32, take, 60)
	if a < rounds*take*2/5 || b < rounds*take*2/5 {
		t.Errorf("two guests flooding alike got %d and %d frames in (the owner took %d)", a, b, rounds*take)
	}
}

// TestSoleShare: one sender alone fills SoleShare of an inbox's frames,
// and of its bytes, and another sender then still finds room.
func TestSoleShare(t *testing.T) {
	for _, c := range []struct{ frames, bytes, size int }{{256, 4 << 20, 60}, {1024, 1 << 20, 1000}, {4, 1 << 20, 60}} {
		in, err := NewInbox(c.frames, c.bytes)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		f := frame(mac0, far, c.size-14)
		n := 0
		for in.Push(f, Tag{From: Wire}) {
			n++
		}
		if want := min(SoleShare(c.frames), (SoleShare(c.bytes)+c.size-1)/c.size); n != want {
			t.Errorf("%d frames, %d bytes: one sender of %d-byte frames got %d in, want %d", c.frames, c.bytes, c.size, n, want)
		}
		if !in.Push(f, Tag{From: Guest, Guest: 3}) {
			t.Errorf("%d frames, %d bytes: no room for another sender", c.frames, c.bytes)
		}
	}
}
