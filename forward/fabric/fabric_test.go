package fabric

import (
	"errors"
	"net"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// Two guests' addresses, a host's on the wire, and the broadcast address.
var mac0, mac1, far, all = net.HardwareAddr{2, 0, 0, 0, 0x10, 0}, net.HardwareAddr{2, 0, 0, 0, 0x10, 1},
	net.HardwareAddr{2, 0, 0, 0, 0x20, 1}, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// frame is a vnet header and an Ethernet header from src to dst, then n
// bytes of payload.
func frame(src, dst net.HardwareAddr, n int) []byte {
	b := make([]byte, vnethdr.Len+14+n)
	copy(b[vnethdr.Len:], dst)
	copy(b[vnethdr.Len+6:], src)
	return b
}

func newSwitch(t *testing.T, slots int, macs ...net.HardwareAddr) *Switch {
	t.Helper()
	s, err := New(ports(macs...), slots, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// ports are guests of one queue pair with the addresses macs.
func ports(macs ...net.HardwareAddr) []Port {
	var out []Port
	for _, m := range macs {
		out = append(out, Port{MAC: m})
	}
	return out
}

// TestInbox: frames come out in order across the ring's wrap, a full inbox
// drops what comes and says so in Arrivals (once), and frames taken but
// not released come again. Each frame comes from a guest of its own, so
// that no sender's share stops it before the inbox is full.
func TestInbox(t *testing.T) {
	in := newSwitch(t, 4, mac0).Inbox(0, 0)
	out, tags := make([][]byte, 8), make([]Tag, 8)
	for round := 0; round < 3; round++ {
		for i := 0; i < 6; i++ {
			in.Push(frame(far, mac0, round*10+i), Tag{From: Guest, Guest: uint8(i)})
		}
		k, a := in.Take(out, tags)
		if k != 4 || a != (Arrivals{Frames: 6, Bytes: uint64(6*14 + round*60 + 15), Full: 2}) {
			t.Fatalf("round %d: took %d, arrivals %+v", round, k, a)
		}
		for i := 0; i < k; i++ {
			if len(out[i]) != vnethdr.Len+14+round*10+i || tags[i].Guest != uint8(i) {
				t.Fatalf("round %d: frame %d is %d bytes, tag %+v", round, i, len(out[i]), tags[i])
			}
		}
		if !in.Release(2) {
			t.Fatalf("round %d: nothing left after releasing 2 of 4", round)
		}
		k, a = in.Take(out, tags)
		if k != 2 || a != (Arrivals{}) || len(out[0]) != vnethdr.Len+14+round*10+2 {
			t.Fatalf("round %d: the rest: took %d, arrivals %+v", round, k, a)
		}
		if in.Release(2) {
			t.Fatalf("round %d: frames left after releasing all", round)
		}
	}
}

// TestDeliver: unicast to a guest reaches it alone and never goes back to
// the guest that sent it; a group address reaches every other guest;
// other unicast reaches none.
func TestDeliver(t *testing.T) {
	s := newSwitch(t, 8, mac0, mac1)
	out, tags := make([][]byte, 8), make([]Tag, 8)
	taken := func(i int) int {
		k, _ := s.Inbox(i, 0).Take(out, tags)
		s.Inbox(i, 0).Release(k)
		return k
	}
	for _, c := range []struct {
		name   string
		b      []byte
		tag    Tag
		alone  bool
		dirty  uint64
		g0, g1 int
	}{
		{"wire to guest 1", frame(far, mac1, 0), Tag{From: Wire}, true, 2, 0, 1},
		{"guest 0 to guest 1", frame(mac0, mac1, 0), Tag{From: Guest, Guest: 0}, true, 2, 0, 1},
		{"guest 0 to itself", frame(mac0, mac0, 0), Tag{From: Guest, Guest: 0}, false, 0, 0, 0},
		{"guest 0 broadcast", frame(mac0, all, 0), Tag{From: Guest, Guest: 0}, false, 2, 0, 1},
		{"TAP broadcast", frame(far, all, 0), Tag{From: TAP}, false, 3, 1, 1},
		{"TAP to the wire", frame(mac0, far, 0), Tag{From: TAP}, false, 0, 0, 0},
	} {
		var dirty uint64
		if alone := s.Deliver(c.b, c.tag, &dirty); alone != c.alone || dirty != c.dirty {
			t.Errorf("%s: alone %v dirty %b; want %v, %b", c.name, alone, dirty, c.alone, c.dirty)
		}
		if g0, g1 := taken(0), taken(1); g0 != c.g0 || g1 != c.g1 {
			t.Errorf("%s: guest 0 got %d, guest 1 %d; want %d, %d", c.name, g0, g1, c.g0, c.g1)
		}
	}
}

// TestNewRefuses: group, short and shared addresses, and too many guests.
func TestNewRefuses(t *testing.T) {
	for _, macs := range [][]net.HardwareAddr{{all}, {mac0[:5]}, {mac0, mac1, mac0}} {
		if _, err := New(ports(macs...), 1, 64); !errors.Is(err, ErrMAC) {
			t.Errorf("%v: %v, want ErrMAC", macs, err)
		}
	}
	many := make([]net.HardwareAddr, MaxGuests+1)
	for i := range many {
		many[i] = net.HardwareAddr{2, 0, 0, 0, 1, byte(i)}
	}
	if _, err := New(ports(many...), 1, 64); err == nil {
		t.Errorf("%d guests taken", len(many))
	}
}

// TestTable: a guest learns where wire and TAP sources live, not from
// guests or group sources, and forgets all when full.
func TestTable(t *testing.T) {
	tb := NewTable()
	lab := net.HardwareAddr{0x02, 0, 0, 0, 0x30, 1}
	tb.Learn([][]byte{frame(far, mac0, 0), frame(lab, mac0, 0), frame(mac1, mac0, 0), frame(all, mac0, 0)},
		[]Tag{{From: Wire}, {From: TAP}, {From: Guest, Guest: 1}, {From: Wire}})
	for _, c := range []struct {
		mac  net.HardwareAddr
		want From
	}{{far, Wire}, {lab, TAP}, {mac1, Unknown}, {all, Unknown}} {
		if got := tb.Lookup([6]byte(c.mac)); got != c.want {
			t.Errorf("%s: %d, want %d", c.mac, got, c.want)
		}
	}
	for i := 0; i < MaxLearned; i++ {
		src := net.HardwareAddr{2, 1, 0, 0, byte(i >> 8), byte(i)}
		tb.Learn([][]byte{frame(src, mac0, 0)}, []Tag{{From: Wire}})
	}
	if len(tb.where) > MaxLearned || tb.Lookup([6]byte(far)) != Unknown {
		t.Errorf("%d addresses learned, the first still there: %v", len(tb.where), tb.Lookup([6]byte(far)) != Unknown)
	}
}
