package forward

import (
	"net"
	"testing"

	"github.com/tapfwd/tapfwd/forward/fabric"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// FuzzSwitch sends frames of fuzzed addresses, headers and bytes at a
// segment (the wire, the TAP, two guests; a macvtap guest behind the TAP)
// from every side, with StrictMACs or not, and checks after every round
// what no frame may do, whatever its bytes:
//
//   - every frame received is transmitted or dropped under a reason, once,
//     on every side (a flood's copy that fails is an error, not a drop);
//   - what leaves a guest's sender comes from that guest's address;
//     nothing reaches the TAP from an address behind it; with StrictMACs
//     the TAP's frames reach the wire from the addresses behind the TAP
//     only, and no guest gets a frame from its own address;
//   - no guest's worker learns that an address behind the TAP or a guest's
//     lives on the wire.
//
// The input is frames of at most 255 bytes, each led by four bytes: the
// side it comes from, its destination and source (indices into addrs) and
// its length; the first byte of the input picks the TAP's vnet header and
// StrictMACs, the second whether frames carry a fuzzed vnet header or a
// zero one.
func FuzzSwitch(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 2, 4, 40}) // the wire: broadcast from the lab's address
	f.Add([]byte{1, 0, 2, 5, 2, 30, 3, 0, 4, 40, 1, 0, 0, 60})
	f.Add([]byte{3, 1, 1, 1, 0, 40, 2, 5, 4, 50, 0, 2, 0, 30, 0, 6, 1, 30})
	f.Add(append([]byte{2, 1, 2, 0, 4, 60}, make([]byte, 60)...))
	// A forwarder costs more to make (its inboxes' buffers) than most
	// inputs cost to run: one per configuration, reset for each input.
	macvtap := net.HardwareAddr{0x02, 0, 0, 0, 0x40, 1}
	var segs [4]*segment
	for k := range segs {
		c := Config{TAPMACs: []net.HardwareAddr{macvtap}, TAPVnetHdr: k&1 != 0}
		if k&2 != 0 {
			c.StrictMACs = []net.HardwareAddr{{0x02, 0, 0, 0, 0x30, 1}, macvtap}
		}
		segs[k] = newSegmentOn(f, c)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return
		}
		s, strict := segs[in[0]&3], in[0]&2 != 0
		s.reset()
		addrs := []net.HardwareAddr{bcastMAC, {0x33, 0x33, 0, 0, 0, 1}, s.tapMAC(), macvtap, guestMAC0, guestMAC1, wireMAC}
		sides := []*forwardtest.Fake{s.nic, s.tap, s.guests[0], s.guests[1]}
		fuzzHdr := in[1]&1 != 0
		for rest := in[2:]; len(rest) >= 4; {
			side, dst, src, n := int(rest[0])%len(sides), addrs[int(rest[1])%len(addrs)], addrs[int(rest[2])%len(addrs)], int(rest[3])
			rest = rest[4:]
			body := rest[:min(n, len(rest))]
			rest = rest[len(body):]
			frame := append(append(append([]byte{}, dst...), src...), body...)
			if sides[side] != s.tap || s.q.tapHdr != 0 {
				hdr := make([]byte, vnethdr.Len)
				if fuzzHdr {
					copy(hdr, body)
				}
				frame = append(hdr, frame...)
			}
			sides[side].Push(forwardtest.Frame{Data: frame})
			if len(rest)%3 == 0 { // a round now and then, so that learning shows
				s.step(t)
				s.checkSwitch(t, strict)
			}
		}
		s.step(t)
		s.checkSwitch(t, strict)
	})
}

// checkSwitch checks what FuzzSwitch promises after a round.
func (s *segment) checkSwitch(t *testing.T, strict bool) {
	t.Helper()
	// What guests left for the TAP is counted once the queue wrote it.
	for more := true; more; {
		var err error
		if more, err = s.q.guestsToTAP(); err != nil {
			t.Fatal(err)
		}
	}
	for what, d := range map[string]*Dir{"NIC->TAP": &s.q.Counters.NICToTAP, "TAP->NIC": &s.q.Counters.TAPToNIC,
		"from guest 0": &s.g0.Counters.From, "from guest 1": &s.g1.Counters.From, "to guest 0": &s.g0.Counters.To, "to guest 1": &s.g1.Counters.To} {
		balanced(t, what, d, 0)
	}
	u := &s.f.untrusted
	srcOf := func(b []byte, hdr int) []byte { return b[hdr+6 : hdr+12] }
	for i, g := range []*GuestWorker{s.g0, s.g1} {
		for _, w := range s.guestNICs[i].Written() {
			if !g.own.has(srcOf(w, hdrLen)) {
				t.Fatalf("guest %d's sender put a frame from %s on the wire", i, net.HardwareAddr(srcOf(w, hdrLen)))
			}
		}
		for _, w := range s.guests[i].Written() {
			if strict && g.own.has(srcOf(w, hdrLen)) {
				t.Fatalf("guest %d got a frame from its own address", i)
			}
		}
		for _, a := range u.ours {
			mac := []byte{byte(a >> 40), byte(a >> 32), byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}
			if g.where.Lookup([6]byte(mac)) == fabric.Wire {
				t.Fatalf("guest %d's worker learned that %s lives on the wire", i, net.HardwareAddr(mac))
			}
		}
	}
	for _, w := range s.tap.Written() {
		if src := srcOf(w, s.q.tapHdr); u.ours.has(src) && !s.f.sw.IsGuest([6]byte(src)) {
			t.Fatalf("the TAP got a frame from %s, an address behind it", net.HardwareAddr(src))
		}
	}
	if strict {
		for _, w := range s.nic.Written() {
			if !u.tap.has(srcOf(w, hdrLen)) {
				t.Fatalf("with StrictMACs the TAP's frame from %s reached the wire", net.HardwareAddr(srcOf(w, hdrLen)))
			}
		}
	}
}
