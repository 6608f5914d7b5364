package fabric

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// TestInboxBytes: an inbox holds as many frames as its bytes allow, large
// or small, packed one after another and wrapping to the front; frames
// taken and not yet released are never overwritten. Small frames from one
// sender stop at its share of the frame count, not at the bytes.
func TestInboxBytes(t *testing.T) {
	in, err := NewInbox(1000, 10000)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	big := func(b byte) []byte {
		f := make([]byte, 3000)
		for i := range f {
			f[i] = b
		}
		return f
	}
	out, tags := make([][]byte, 1000), make([]Tag, 1000)
	for i := 0; i < 4; i++ { // 3 fit in 10000 bytes
		if got := in.Push(big(byte(i)), Tag{}); got != (i < 3) {
			t.Fatalf("frame %d of 3000 bytes: pushed %v", i, got)
		}
	}
	k, a := in.Take(out, tags)
	if k != 3 || a.Full != 1 {
		t.Fatalf("took %d, full %d; want 3, 1", k, a.Full)
	}
	in.Release(1)                // frames 1 and 2 stay taken
	if !in.Push(big(9), Tag{}) { // wraps to the front, where frame 0 was
		t.Fatal("no room at the front after the first frame went")
	}
	if in.Push(big(8), Tag{}) {
		t.Fatal("a frame pushed over frames still taken")
	}
	for i, want := range []byte{1, 2} {
		if out[1+i][0] != want || out[1+i][2999] != want {
			t.Fatalf("taken frame %d overwritten", 1+i)
		}
	}
	in.Release(2)
	k, _ = in.Take(out, tags)
	if k != 1 || out[0][0] != 9 || len(out[0]) != 3000 {
		t.Fatalf("after the wrap took %d frames, first byte %d", k, out[0][0])
	}
	in.Release(1)
	for i := 0; i < SoleShare(1000); i++ { // small frames: bounded by the frame count
		if !in.Push(make([]byte, 9), Tag{}) {
			t.Fatalf("small frame %d refused", i)
		}
	}
	if in.Push(make([]byte, 9), Tag{}) {
		t.Fatalf("frame %d of one sender taken by a 1000-frame inbox", SoleShare(1000)+1)
	}
}

// ipFrame is a vnet header and an IPv4/UDP frame between hosts a and b,
// ports sp and dp.
func ipFrame(dst net.HardwareAddr, a, b byte, sp, dp uint16) []byte {
	f := frame(far, dst, 28)
	e := f[vnethdr.Len:]
	binary.BigEndian.PutUint16(e[12:], 0x0800)
	ip := e[14:]
	ip[0], ip[9] = 0x45, 17
	copy(ip[12:], []byte{198, 18, 0, a, 198, 18, 0, b})
	binary.BigEndian.PutUint16(ip[20:], sp)
	binary.BigEndian.PutUint16(ip[22:], dp)
	return f
}

// TestSteer: frames for a guest of several queue pairs spread over the
// pairs it runs by flow, every frame of a flow on one pair; with one pair
// running (or none) all go to the first; frames of no IP flow go to the
// first too.
func TestSteer(t *testing.T) {
	active := 4
	s, err := New([]Port{{MAC: mac0, Queues: 4, Active: func() int { return active }}}, 1024, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, tags := make([][]byte, 1024), make([]Tag, 1024)
	counts := func() (c [4]int) {
		for q := range c {
			c[q], _ = s.Inbox(0, q).Take(out, tags)
			s.Inbox(0, q).Release(c[q])
		}
		return c
	}
	var dirty uint64
	for f := 0; f < 200; f++ {
		for range 3 {
			s.Deliver(ipFrame(mac0, byte(f), 1, uint16(1000+f), 53), Tag{From: Wire}, &dirty)
		}
	}
	c := counts()
	for q, n := range c {
		if n == 0 || n%3 != 0 {
			t.Errorf("pair %d got %d frames: want some, whole flows of 3 (%v)", q, n, c)
		}
	}
	one := ipFrame(mac0, 7, 1, 1007, 53)
	s.Deliver(one, Tag{From: Wire}, &dirty)
	s.Deliver(one, Tag{From: Wire}, &dirty)
	if c := counts(); c != [4]int{2, 0, 0, 0} && c != [4]int{0, 2, 0, 0} && c != [4]int{0, 0, 2, 0} && c != [4]int{0, 0, 0, 2} {
		t.Errorf("one flow split over pairs: %v", c)
	}
	for _, active = range []int{1, 0} {
		for f := 0; f < 50; f++ {
			s.Deliver(ipFrame(mac0, byte(f), 1, uint16(f), 53), Tag{From: Wire}, &dirty)
		}
		if c := counts(); c != [4]int{50, 0, 0, 0} {
			t.Errorf("%d pairs running: %v, want all on the first", active, c)
		}
	}
	active = 4
	for range 20 {
		s.Deliver(frame(far, mac0, 40), Tag{From: Wire}, &dirty) // no IP
	}
	if c := counts(); c != [4]int{20, 0, 0, 0} {
		t.Errorf("frames of no IP flow: %v, want all on the first pair", c)
	}
	if dirty != 1 {
		t.Errorf("dirty %b, want the guest marked", dirty)
	}
}

// TestFlowHash: the hash reads addresses and ports behind VLAN tags, and
// leaves the ports of a fragment out.
func TestFlowHash(t *testing.T) {
	a := ipFrame(mac0, 1, 2, 10, 20)[vnethdr.Len:]
	b := ipFrame(mac0, 1, 2, 11, 20)[vnethdr.Len:]
	if FlowHash(a) == FlowHash(b) || FlowHash(a) == 0 {
		t.Errorf("ports not hashed: %x %x", FlowHash(a), FlowHash(b))
	}
	tagged := append(append(append([]byte{}, a[:12]...), 0x81, 0, 0, 5), a[12:]...)
	if FlowHash(tagged) != FlowHash(a) {
		t.Error("a VLAN tag changed the hash")
	}
	frag := append([]byte{}, b...)
	frag[14+6] = 0x20 // more fragments
	fragA := append([]byte{}, a...)
	fragA[14+6] = 0x20
	if FlowHash(frag) != FlowHash(fragA) {
		t.Error("a fragment's ports were hashed")
	}
	if FlowHash(a[:13]) != 0 {
		t.Error("a short frame hashed")
	}
}
