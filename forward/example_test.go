package forward_test

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/forward/forwardtest"
)

// New makes a forwarder of one queue over a NIC and a TAP endpoint (here
// forwardtest's: the real packet-socket and TAP code over socketpairs).
// A frame the wire sends, behind its 10-byte virtio-net header, comes out
// of the TAP as it was (the TAP has no vnet header), and one from the lab
// reaches the wire with a header in front.
func ExampleNew() {
	p, err := forwardtest.NewPair(8)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	f, err := forward.New([]forward.Endpoint{p.TAP}, []forward.NIC{p.NIC}, forward.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	wire := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	lab := net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
	unix.Write(p.Wire, append(make([]byte, 10), frame(lab, wire, "from the wire")...))
	got := receive(p.Lab)
	if len(got) < 60 {
		fmt.Println("the lab got nothing")
		return
	}
	fmt.Printf("lab got %d bytes from %s to %s: %q\n", len(got), net.HardwareAddr(got[6:12]), net.HardwareAddr(got[:6]), got[14:27])

	unix.Write(p.Lab, frame(wire, lab, "from the lab"))
	got = receive(p.Wire)
	if len(got) < 70 {
		fmt.Println("the wire got nothing")
		return
	}
	fmt.Printf("wire got %d bytes: a %d-byte header, then a frame from %s: %q\n", len(got), len(got)-60, net.HardwareAddr(got[16:22]), got[24:36])

	cancel()
	fmt.Println("Run:", <-done)
	c := &f.QueueWorkers()[0].Counters
	fmt.Println("NIC to TAP:", c.NICToTAP.Tx.Packets.Load(), "frame; TAP to NIC:", c.TAPToNIC.Tx.Packets.Load(), "frame")
	// Output:
	// lab got 60 bytes from 02:00:00:00:00:01 to 02:00:00:00:00:02: "from the wire"
	// wire got 70 bytes: a 10-byte header, then a frame from 02:00:00:00:00:02: "from the lab"
	// Run: <nil>
	// NIC to TAP: 1 frame; TAP to NIC: 1 frame
}

// frame is a 60-byte Ethernet frame from src to dst of an experimental
// EtherType (0x88b5) carrying text.
func frame(dst, src net.HardwareAddr, text string) []byte {
	f := make([]byte, 60)
	copy(f, dst)
	copy(f[6:], src)
	f[12], f[13] = 0x88, 0xb5
	copy(f[14:], text)
	return f
}

// receive waits up to 5 s for a frame on fd, a non-blocking socket.
func receive(fd int) []byte {
	buf := make([]byte, 2048)
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if _, err := unix.Poll(pfd, 5000); err != nil {
		return nil
	}
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}
