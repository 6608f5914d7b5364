package main

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/netns"
)

// TestL2Policy sends, from the lab side of the TAP, STP and LLDP frames
// (IEEE 802.1D reserved group addresses), a VLAN-tagged frame and a plain
// broadcast, ten each. With --guest-vlans deny, --l2-control drop and LLDP
// allowed, the wire sees LLDP and the broadcast only; the rest is counted
// by reason, and every frame read from the TAP is transmitted or dropped.
func TestL2Policy(t *testing.T) {
	bed, _ := startForwarder(t, "--guest-vlans", "deny", "--l2-control", "drop", "--l2-control-allow", "0e")
	lab := testkit.OpenRaw(t, bed, bed.LabNS, bed.LabIf)
	wire := testkit.OpenRaw(t, bed, bed.WireNS, bed.WireIf)
	src := testkit.LinkMAC(t, bed.LabNS, bed.LabIf)
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	frame := func(dst net.HardwareAddr, etype []byte, kind string) []byte {
		f := append(append(append([]byte(nil), dst...), src...), etype...)
		f = append(f, []byte("tfw-l2-"+kind+"-"+bed.ID)...)
		return append(f, make([]byte, 40)...)
	}
	kinds := map[string][]byte{
		"stp":    frame(net.HardwareAddr{0x01, 0x80, 0xc2, 0, 0, 0x00}, []byte{0x00, 0x26}, "stp"),
		"lldp":   frame(net.HardwareAddr{0x01, 0x80, 0xc2, 0, 0, 0x0e}, []byte{0x88, 0xcc}, "lldp"),
		"tagged": frame(bcast, []byte{0x81, 0x00, 0x00, 0x07, 0x88, 0xb5}, "tagged"),
		"plain":  frame(bcast, []byte{0x88, 0xb5}, "plain"),
	}
	before := testkit.ParseCounts(testkit.Scrape(t, bed), bed)
	ifi := lookupIn(t, bed.LabNS, bed.LabIf)
	for i := 0; i < 10; i++ {
		for _, f := range kinds {
			if err := unix.Sendto(lab, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi, Halen: 6}); err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := map[string]int{}
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(wire, buf, 0)
		if err != nil {
			continue
		}
		for kind := range kinds {
			if bytes.Contains(buf[:n], []byte("tfw-l2-"+kind+"-"+bed.ID)) {
				seen[kind]++
			}
		}
	}
	if seen["lldp"] != 10 || seen["plain"] != 10 || seen["stp"] != 0 || seen["tagged"] != 0 {
		t.Errorf("the wire saw %v; want 10 lldp and plain, no stp or tagged", seen)
	}
	d := testkit.SettledCounts(t, bed, 3*time.Second).Sub(before)
	if d.TAPDrops["l2_control"] != 10 || d.TAPDrops["guest_vlan"] != 10 {
		t.Errorf("drops from the TAP: %s; want l2_control=10 guest_vlan=10", testkit.NonZero(d.TAPDrops))
	}
	if got := d.NICTx + testkit.DropSum(d.TAPDrops); got != d.TAPRx {
		t.Errorf("from the TAP: received %v != transmitted %v + dropped %v", d.TAPRx, d.NICTx, testkit.DropSum(d.TAPDrops))
	}
}

// lookupIn is the ifindex of dev in namespace ns of the bed.
func lookupIn(t *testing.T, ns, dev string) int {
	t.Helper()
	var idx int
	err := netns.Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err == nil {
			idx = ifi.Index
		}
		return err
	})
	if err != nil {
		t.Fatal(fmt.Errorf("%s in %s: %w", dev, ns, err))
	}
	return idx
}
