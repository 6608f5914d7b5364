package vnethdr

import (
	"bytes"
	"testing"
)

// TestRecoverPartial: a frame partialized as the kernel leaves it is found
// and completes to the frame with its full checksum; the complete frame,
// one with a corrupt checksum and a non-IP frame are left alone.
func TestRecoverPartial(t *testing.T) {
	payload := bytes.Repeat([]byte("xdp!"), 100)
	for _, s := range []spec{
		{Payload: payload},
		{UDP: true, Payload: payload},
		{V6: true, Payload: payload},
		{V6: true, UDP: true, Ext: true, Payload: payload},
		{VLAN: true, QinQ: true, IPOpts: true, Payload: payload},
	} {
		full := build(t, s)
		if _, ok := RecoverPartial(full); ok {
			t.Errorf("%+v: complete frame taken for a partial one", s)
		}
		l, err := Parse(full)
		if err != nil {
			t.Fatal(err)
		}
		part := bytes.Clone(full)
		var h Hdr
		if err := Partialize(&h, part, &l); err != nil {
			t.Fatal(err)
		}
		got, ok := RecoverPartial(part)
		if !ok || got != (Hdr{Flags: FlagNeedsCsum, CsumStart: h.CsumStart, CsumOffset: h.CsumOffset}) {
			t.Fatalf("%+v: RecoverPartial = %+v, %v; want the header Partialize made (%+v)", s, got, ok, h)
		}
		if err := CompleteChecksum(&got, part); err != nil || !bytes.Equal(part, full) {
			t.Errorf("%+v: completing the recovered header does not give the original frame (%v)", s, err)
		}
		bad := bytes.Clone(part)
		bad[l.L4+l.CsumOffset()] ^= 0x40
		if _, ok := RecoverPartial(bad); ok {
			t.Errorf("%+v: a corrupt check field taken for a partial one", s)
		}
	}
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	if _, ok := RecoverPartial(arp); ok {
		t.Error("ARP frame taken for a partial TCP/UDP one")
	}
}
