package vnethdr

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func TestInsertVLAN(t *testing.T) {
	for _, tt := range []struct {
		tpid, want uint16
	}{{0, 0x8100}, {0x8100, 0x8100}, {0x88a8, 0x88a8}} {
		s := spec{Payload: pattern(3000, 1)}
		h, f := superFrame(t, s, 1000)
		if err := Fixup(&h, f); err != nil {
			t.Fatal(err)
		}
		const head = 10
		buf := make([]byte, head+len(f)+8)
		copy(buf[head:], f)
		off, err := InsertVLAN(buf, head, len(f), tt.tpid, 0xa064, &h) // PCP 5, DEI 0, VID 100
		if err != nil || off != head-4 {
			t.Fatalf("InsertVLAN = %d, %v", off, err)
		}
		tagged := buf[off : off+len(f)+4]
		if !bytes.Equal(tagged[:12], f[:12]) || !bytes.Equal(tagged[16:], f[12:]) {
			t.Fatal("addresses or the rest of the frame moved wrong")
		}
		p := gopacket.NewPacket(tagged, layers.LayerTypeEthernet, gopacket.Default)
		eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		q, ok := p.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
		if !ok || uint16(eth.EthernetType) != tt.want || q.VLANIdentifier != 100 || q.Priority != 5 || q.Type != layers.EthernetTypeIPv4 {
			t.Fatalf("tpid %#x: decoded %v", tt.tpid, p)
		}
		if h.CsumStart != 38 || h.HdrLen != 58 {
			t.Fatalf("header not moved: %+v", h)
		}
		// The moved header still matches the tagged frame, and both are
		// what a sender of the tagged frame would have made.
		again := h
		if err := Fixup(&again, tagged); err != nil || again != h {
			t.Fatalf("Fixup after InsertVLAN: %v, %+v", err, again)
		}
		vs := s
		vs.VLAN = true
		if tt.want == 0x8100 {
			wh, wf := superFrame(t, vs, 1000)
			if err := Fixup(&wh, wf); err != nil || wh != h || !bytes.Equal(tagged, wf) {
				t.Fatalf("tagged frame and header %+v differ from those built tagged (%+v, %v)", h, wh, err)
			}
		}
	}
}

func TestInsertVLANHeaderUpdate(t *testing.T) {
	buf := make([]byte, 100)
	for _, tt := range []struct{ in, want Hdr }{
		{Hdr{}, Hdr{}},
		{Hdr{Flags: FlagDataValid, CsumStart: 34}, Hdr{Flags: FlagDataValid, CsumStart: 34}},
		{Hdr{Flags: FlagNeedsCsum, HdrLen: 54, CsumStart: 34, CsumOffset: 16}, Hdr{Flags: FlagNeedsCsum, HdrLen: 58, CsumStart: 38, CsumOffset: 16}},
	} {
		h := tt.in
		if _, err := InsertVLAN(buf, 4, 60, 0, 1, &h); err != nil || h != tt.want {
			t.Errorf("%+v -> %+v, %v; want %+v", tt.in, h, err, tt.want)
		}
	}
	if _, err := InsertVLAN(buf, 4, 60, 0, 1, nil); err != nil {
		t.Errorf("nil header: %v", err)
	}
}

func TestInsertVLANErrors(t *testing.T) {
	buf := make([]byte, 100)
	for _, tt := range []struct {
		off, n int
		h      *Hdr
		err    error
	}{
		{3, 60, nil, ErrNoHeadroom},
		{0, 60, nil, ErrNoHeadroom},
		{-5, 60, nil, ErrNoHeadroom},
		{4, 97, nil, ErrShort},
		{101, 0, nil, ErrShort},
		{4, -1, nil, ErrShort},
		{4, 13, nil, ErrMalformed},
		{4, 60, &Hdr{Flags: FlagNeedsCsum, CsumStart: 0xfffc}, ErrCsumBounds},
		{4, 60, &Hdr{HdrLen: 0xfffd}, ErrCsumBounds},
	} {
		orig := append([]byte(nil), buf...)
		var before Hdr
		if tt.h != nil {
			before = *tt.h
		}
		if _, err := InsertVLAN(buf, tt.off, tt.n, 0, 1, tt.h); !errors.Is(err, tt.err) {
			t.Errorf("off %d n %d: %v, want %v", tt.off, tt.n, err, tt.err)
		}
		if !bytes.Equal(buf, orig) || (tt.h != nil && *tt.h != before) {
			t.Errorf("off %d n %d: changed buffer or header on error", tt.off, tt.n)
		}
	}
}

func TestL3Offset(t *testing.T) {
	eth := func(types ...uint16) []byte {
		f := make([]byte, 12, 12+4*len(types))
		for i, et := range types {
			f = append(f, byte(et>>8), byte(et))
			if i < len(types)-1 {
				f = append(f, 0, 1) // TCI
			}
		}
		return f
	}
	tests := []struct {
		name  string
		frame []byte
		off   int
		et    uint16
		ok    bool
	}{
		{"untagged", eth(etherTypeIPv6), 14, etherTypeIPv6, true},
		{"802.1Q", eth(tpid8021Q, etherTypeIPv4), 18, etherTypeIPv4, true},
		{"QinQ", eth(tpid8021AD, tpid8021Q, etherTypeIPv6), 22, etherTypeIPv6, true},
		{"third tag not skipped", eth(tpid8021AD, tpid8021Q, tpid8021Q, etherTypeIPv6), 22, tpid8021Q, true},
		{"short", eth(etherTypeIPv6)[:13], 0, 0, false},
		{"tag without EtherType", eth(tpid8021Q, etherTypeIPv4)[:17], 0, 0, false},
	}
	for _, tt := range tests {
		off, et, ok := L3Offset(tt.frame)
		if off != tt.off || et != tt.et || ok != tt.ok {
			t.Errorf("%s: L3Offset = %d, %#x, %v; want %d, %#x, %v", tt.name, off, et, ok, tt.off, tt.et, tt.ok)
		}
	}
}
