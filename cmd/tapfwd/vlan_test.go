package main

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testkit"
)

// This kernel has no 8021q module, so VLAN devices cannot be made; a raw
// packet socket sends tagged frames instead. The receiving stack (veth or
// TAP) strips the tag into the skb (net/core/dev.c: skb_vlan_untag), so
// each side's packet socket sees it in PACKET_AUXDATA, not in the frame:
// tapfwd must put it back for the tag to survive.
func TestVLAN(t *testing.T) {
	testkit.NeedRoot(t)
	for _, vnet := range []string{"on", "off"} {
		t.Run("vnet-"+vnet, func(t *testing.T) {
			bed, fw := startForwarder(t, "--vnet-hdr", vnet)
			tapHW := testkit.LinkMAC(t, bed.LabNS, bed.LabIf)
			wireHW := testkit.LinkMAC(t, bed.WireNS, bed.WireIf)
			wire := testkit.OpenRaw(t, bed, bed.WireNS, bed.WireIf)
			lab := testkit.OpenRaw(t, bed, bed.LabNS, bed.LabIf)

			for _, tc := range []struct {
				name     string
				from, to int
				src, dst net.HardwareAddr
				tci      uint16
			}{
				{"wire->lab", wire, lab, wireHW, tapHW, 100},
				{"lab->wire", lab, wire, tapHW, wireHW, 0x2000 | 200}, // priority 1, VLAN 200
			} {
				inner := testkit.UDPPacket(t, bed)
				frame := testkit.Tagged(t, tc.src, tc.dst, tc.tci, inner)
				if _, err := unix.Write(tc.from, frame); err != nil {
					t.Fatalf("%s: send: %v", tc.name, err)
				}
				if tci := testkit.RecvTagged(t, tc.to, tc.src, inner); tci != tc.tci {
					t.Errorf("%s: VLAN TCI %#x, want %#x", tc.name, tci, tc.tci)
				}
			}
			if err := fw.Stop(); err != nil {
				t.Fatalf("tapfwd exit: %v\n%s", err, fw.Output())
			}
		})
	}
}
