package forward

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestGROWindow: with a GRO window, segments of a flow that reach the NIC
// after the batch's first read still join its merge, up to a full batch;
// without one the batch is what the first read found; a batch whose last
// frame ends its run (PSH) does not wait.
func TestGROWindow(t *testing.T) {
	segs := mtuSegments(t, 8)
	for _, tc := range []struct {
		name   string
		window time.Duration
		psh    bool
		n      int // frames the batch takes
	}{
		{name: "window", window: 10 * time.Second, n: 8},
		{name: "no window", n: 2},
		{name: "psh", window: 10 * time.Second, psh: true, n: 2},
	} {
		p := newGROPair(t, 8)
		p.q.groWindow = tc.window
		first := [][]byte{segs[0], segs[1]}
		if tc.psh {
			psh := append([]byte(nil), segs[1]...)
			psh[hdrLen+14+20+13] |= 0x08
			first[1] = psh
		}
		for _, s := range first {
			mustWrite(t, p.nicPeer, s)
		}
		later := make(chan struct{})
		go func() {
			defer close(later)
			time.Sleep(50 * time.Millisecond)
			for _, s := range segs[2:] {
				unix.Write(p.nicPeer, s)
			}
		}()
		n, err := p.q.nicToTAP()
		<-later
		got := readAll(t, p.tapPeer)
		if err != nil || n != tc.n || len(got) != 1 {
			t.Errorf("%s: nicToTAP = %d, %v, %d TAP writes; want %d, nil, 1 (merged)", tc.name, n, err, len(got), tc.n)
		}
	}
}

// TestGROWindowEnds: a window with no more frames ends when it is over,
// and a stop ends it at once; the batch keeps what it had.
func TestGROWindowEnds(t *testing.T) {
	segs := mtuSegments(t, 2)
	p := newGROPair(t, 8)
	p.q.groWindow = 20 * time.Millisecond
	mustWrite(t, p.nicPeer, segs[0])
	if n, err := p.q.nicToTAP(); n != 1 || err != nil || len(readAll(t, p.tapPeer)) != 1 {
		t.Errorf("after the window: nicToTAP = %d, %v; want 1, nil and one TAP write", n, err)
	}
	p.q.groWindow = time.Hour
	p.q.fw.stop.set()
	defer p.q.fw.stop.clear()
	mustWrite(t, p.nicPeer, segs[1])
	if n, err := p.q.nicToTAP(); n != 1 || err != nil || len(readAll(t, p.tapPeer)) != 1 {
		t.Errorf("stopped: nicToTAP = %d, %v; want 1, nil and one TAP write", n, err)
	}
}
