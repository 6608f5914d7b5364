package forward

import (
	"bytes"
	"net"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward/forwardtest"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// withDst is a copy of frame with another destination MAC.
func withDst(frame []byte, dst ...byte) []byte {
	f := append([]byte(nil), frame...)
	copy(f, dst)
	return f
}

// tagged inserts an 802.1Q tag (TPID tpid, VLAN 7) after the MACs.
func tagged(frame []byte, tpid uint16) []byte {
	f := append(append(append([]byte(nil), frame[:12]...), byte(tpid>>8), byte(tpid), 0, 7), frame[12:]...)
	return f
}

// TestL2Policy: by default every frame from the TAP side goes to the wire;
// the policy drops reserved-group control frames (but those allowed) and
// tagged frames, each counted by reason.
func TestL2Policy(t *testing.T) {
	plain := tcpFrame(t, 100)
	frames := map[string][]byte{
		"stp":   withDst(plain, 0x01, 0x80, 0xc2, 0, 0, 0x00),
		"pause": withDst(plain, 0x01, 0x80, 0xc2, 0, 0, 0x01),
		"lldp":  withDst(plain, 0x01, 0x80, 0xc2, 0, 0, 0x0e),
		"gmrp":  withDst(plain, 0x01, 0x80, 0xc2, 0, 0, 0x20), // not in the reserved 00-0F block
		"q":     tagged(plain, 0x8100),
		"ad":    tagged(plain, 0x88a8),
		"plain": plain,
	}
	for _, tc := range []struct {
		name          string
		l2            L2Policy
		sent, control int
		vlan          int
	}{
		{"default", L2Policy{}, 7, 0, 0},
		{"drop control", L2Policy{DropControl: true}, 4, 3, 0},
		{"drop control but lldp", L2Policy{DropControl: true, ControlAllow: 1 << 0x0e}, 5, 2, 0},
		{"deny vlans", L2Policy{DenyVLANs: true}, 5, 0, 2},
		{"both", L2Policy{DropControl: true, DenyVLANs: true}, 2, 3, 2},
	} {
		p := newPairWith(t, Config{Batch: 16, L2: tc.l2})
		for _, f := range frames {
			p.tap.Push(forwardtest.Frame{Data: f})
		}
		p.q.tx.toNIC()
		d := &p.q.Counters.TAPToNIC
		if got := len(p.nic.Written()); got != tc.sent || int(d.Drops[DropL2Control].Load()) != tc.control || int(d.Drops[DropGuestVLAN].Load()) != tc.vlan {
			t.Errorf("%s: sent %d, l2_control %d, guest_vlan %d; want %d, %d, %d", tc.name, got,
				d.Drops[DropL2Control].Load(), d.Drops[DropGuestVLAN].Load(), tc.sent, tc.control, tc.vlan)
		}
		balanced(t, tc.name, d, 0)
	}
}

// TestReadErrorsCounted: a read error after the kernel took a frame off
// its queue costs that frame, which is received and dropped with a reason
// (and counted as an error unless it is the expected EINVAL).
func TestReadErrorsCounted(t *testing.T) {
	p := newPairWith(t, Config{Batch: 8})
	p.tap.Push(forwardtest.Frame{Data: tcpFrame(t, 100)})
	p.tap.FailRead(unix.EFAULT)
	if n, err := p.q.tx.toNIC(); n != 1 || err != nil {
		t.Fatalf("tx.toNIC = %d, %v", n, err)
	}
	d := &p.q.Counters.TAPToNIC
	if d.Rx.Packets.Load() != 2 || d.Drops[DropTAPRead].Load() != 1 || d.Errors.Load() != 1 {
		t.Errorf("TAP read error: rx %d tap_read %d errors %d; want 2, 1, 1", d.Rx.Packets.Load(), d.Drops[DropTAPRead].Load(), d.Errors.Load())
	}
	balanced(t, "TAP->NIC", d, 0)
	for _, e := range []unix.Errno{unix.EINVAL, unix.EFAULT} {
		p.nic.FailRead(e)
		p.q.nicToTAP()
	}
	n := &p.q.Counters.NICToTAP
	if n.Rx.Packets.Load() != 2 || n.Drops[DropNICRecv].Load() != 2 || n.Errors.Load() != 1 {
		t.Errorf("NIC read errors: rx %d nic_recv %d errors %d; want 2, 2, 1", n.Rx.Packets.Load(), n.Drops[DropNICRecv].Load(), n.Errors.Load())
	}
	balanced(t, "NIC->TAP", n, 0)
}

// TestGROMaxSize: merged frames stay within the TAP's gro_ipv4_max_size.
func TestGROMaxSize(t *testing.T) {
	for _, limit := range []int{0, 16384} {
		nic, wire := forwardtest.NIC(t, 32)
		tq, lab := forwardtest.TAP(t)
		f, err := New([]Endpoint{tq}, []NIC{nic}, Config{Batch: 32, TAPVnetHdr: true, GRO: true, GROMaxIPv4: limit, CPUs: []int{-1}})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range mtuSegments(t, 24) { // 24 x 1448 = 34752 bytes of payload
			mustWrite(t, wire, s)
		}
		f.queues[0].nicToTAP()
		got := readAll(t, lab)
		biggest := 0
		for _, fr := range got {
			biggest = max(biggest, len(fr)-vnethdr.Len-14)
		}
		want := 1
		if limit > 0 {
			want = 3 // 11 + 11 + 2 segments: 11 x 1448 + headers is the most under 16384
			if biggest > limit {
				t.Errorf("gro max %d: a merged IP packet of %d bytes", limit, biggest)
			}
		}
		if len(got) != want {
			t.Errorf("gro max %d: %d frames to the TAP, want %d (largest IP packet %d)", limit, len(got), want, biggest)
		}
		f.Close()
	}
}

// TestStrictMACTAPSide: with StrictMACs, frames from the TAP pass with any
// of them as their source (the lab host's, each macvtap guest's) and no
// other; without, every source passes. New refuses an empty list (no frame
// could pass) and addresses that are not unicast Ethernet ones.
func TestStrictMACTAPSide(t *testing.T) {
	lab, vm0, vm1 := net.HardwareAddr{2, 0, 0, 0, 0x30, 1}, net.HardwareAddr{2, 0, 0, 0, 0x40, 0}, net.HardwareAddr{2, 0, 0, 0, 0x40, 1}
	other := net.HardwareAddr{2, 0, 0, 0, 0x20, 1}
	for _, strict := range []bool{true, false} {
		c := Config{Batch: 8, TAPVnetHdr: true}
		if strict {
			c.StrictMACs = []net.HardwareAddr{lab, vm0, vm1}
		}
		p := newPairWith(t, c)
		for _, src := range []net.HardwareAddr{lab, vm0, vm1, other, macA} {
			f := tcpFrame(t, 60)
			copy(f[6:], src)
			p.tap.Push(forwardtest.Frame{Data: withHdr(vnethdr.Hdr{}, f)})
		}
		if _, err := p.q.tx.toNIC(); err != nil {
			t.Fatal(err)
		}
		d := &p.q.Counters.TAPToNIC
		want := map[bool][2]uint64{true: {3, 2}, false: {5, 0}}[strict]
		if got := [2]uint64{d.Tx.Packets.Load(), d.Drops[DropSpoofed].Load()}; got != want {
			t.Errorf("strict %v: sent %d, spoofed_mac %d; want %d, %d", strict, got[0], got[1], want[0], want[1])
		}
		for _, w := range p.nic.Written() {
			if src := net.HardwareAddr(w[vnethdr.Len+6 : vnethdr.Len+12]); strict && !slices.ContainsFunc([]net.HardwareAddr{lab, vm0, vm1}, func(a net.HardwareAddr) bool { return bytes.Equal(a, src) }) {
				t.Errorf("strict: a frame from %s reached the wire", src)
			}
		}
		balanced(t, "TAP->NIC", d, 0)
		if _, fromTAP := p.q.fw.DropReasons(); slices.Contains(fromTAP, DropSpoofed) != strict {
			t.Errorf("strict %v: the TAP's drop reasons are %v", strict, fromTAP)
		}
	}
	for _, c := range []Config{{StrictMACs: []net.HardwareAddr{}}, {StrictMACs: []net.HardwareAddr{{2, 0, 0, 0, 0, 1}, {0xff, 0, 0, 0, 0, 1}}}, {TAPMACs: []net.HardwareAddr{{1, 0, 0x5e, 0, 0, 1}}}, {TAPMACs: []net.HardwareAddr{{2, 0}}}} {
		if f, err := New([]Endpoint{forwardtest.NewFake(t)}, []NIC{forwardtest.NewFake(t)}, c); err == nil {
			f.Close()
			t.Errorf("New took %+v", c)
		}
	}
}
