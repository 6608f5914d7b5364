package afxdp

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// TestVethMTU9000: on veths with MTU 9000 the xdp.frags program attaches
// and 9014-byte frames cross both ways as chains of chunks (copy mode,
// XDP_USE_SG); a TCP super-frame with a 8948-byte MSS leaves as jumbo
// segments.
func TestVethMTU9000(t *testing.T) {
	b := newBed(t, 9000)
	n := b.open(Config{Ifname: b.NIC})
	if !n.MultiBuffer() {
		t.Fatal("no multi-buffer on this kernel")
	}
	s := n.Sockets()[0]
	w0, w1 := b.mac(b.WireNS, b.WireIf), b.mac(b.FwdNS, b.NIC)
	in, got := b.fromWire(s, w0, w1, 9000)
	if len(got) != len(in) || !bytes.Equal(got[0].data, in[0]) || len(got[0].data) != 9014 {
		t.Fatalf("socket got %d of %d frames; the first intact at 9014 bytes: %v", len(got), len(in), len(got) > 0 && bytes.Equal(got[0].data, in[0]))
	}
	raw := traffic.OpenRaw(t, b.Bed, b.WireNS, b.WireIf)
	out := l2Frames(t, w1, w0, 9000)
	var bufs [][]byte
	for _, f := range out {
		bufs = append(bufs, withHdr(vnethdr.Hdr{}, f))
	}
	super := gsoFrame(t, 30000, 8948)
	copy(super[vnethdr.Len:], w0)
	copy(super[vnethdr.Len+6:], w1)
	writeAll(t, s, append(bufs, super))
	sent := wireFrames(t, raw, w1, len(out)+4, 3*time.Second)
	if len(sent) != len(out)+4 {
		t.Fatalf("wire got %d of %d frames", len(sent), len(out)+4)
	}
	for i := range out {
		if !bytes.Equal(sent[i], out[i]) {
			t.Errorf("frame %d (%d bytes) left as %d bytes, changed", i, len(out[i]), len(sent[i]))
		}
	}
	checkSegments(t, sent[len(out):], 30000, 8948)
}

// TestVethMTU9000WithoutMultiBuffer: what happens without multi-buffer at
// MTU 9000. A program without xdp.frags may not attach to the veth at all
// (ErrMTU: veth_xdp_set refuses a peer MTU beyond a page); with an
// xdp.frags program but a socket bound without XDP_USE_SG, the kernel
// drops the 9014-byte frame and counts it (rx_dropped), and Write refuses
// one with EMSGSIZE.
func TestVethMTU9000WithoutMultiBuffer(t *testing.T) {
	b := newBed(t, 9000)
	var s *Socket
	var p *Program
	err := b.Do(b.FwdNS, func() error {
		ifi, err := net.InterfaceByName(b.NIC)
		if err != nil {
			return err
		}
		if p, err := LoadProgram(ifi.Index, 1, ModeNative, false); !errors.Is(err, ErrMTU) {
			if p != nil {
				p.Close()
			}
			t.Errorf("program without frags at MTU 9000: %v, want ErrMTU", err)
		}
		if p, err = LoadProgram(ifi.Index, 1, ModeNative, true); err != nil {
			return err
		}
		if s, err = OpenSocket(SocketConfig{Ifindex: ifi.Index}); err != nil {
			return err
		}
		return p.Insert(s)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); p.Close() })
	w0, w1 := b.mac(b.WireNS, b.WireIf), b.mac(b.FwdNS, b.NIC)
	jumbo := l2Frames(t, w0, w1, 9000)[0]
	small := l2Frames(t, w0, w1, 1500)[0]
	wire := traffic.WireSocket(t, b.Bed, false)
	unix.Write(wire, jumbo)
	unix.Write(wire, small)
	got := readFrames(t, s, 1, 3*time.Second, from(w0))
	if len(got) != 1 || !bytes.Equal(got[0].data, small) {
		t.Fatalf("got %d frames; want only the 1514-byte one", len(got))
	}
	c, err := s.Counters()
	if err != nil || c.Kernel.Rx_dropped != 1 {
		t.Errorf("rx_dropped %d (%v), want 1: the jumbo frame counted", c.Kernel.Rx_dropped, err)
	}
	if _, dropped, _ := s.Stats(); dropped != 1 {
		t.Errorf("Stats drops %d, want 1", dropped)
	}
	if _, err := s.Write([][]byte{withHdr(vnethdr.Hdr{}, l2Frames(t, w1, w0, 9000)[0])}, 0); err != unix.EMSGSIZE {
		t.Errorf("writing 9014 bytes without multi-buffer: %v, want EMSGSIZE", err)
	}
}
