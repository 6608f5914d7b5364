package vhostuser_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// Listen makes a port on a unix socket; a front-end (here vhostusertest's,
// which speaks QEMU 7.2's messages) connects and starts the guest's
// rings, and frames move: the guest transmits one, the port reads it
// behind a 10-byte virtio-net header, writes one back, and the guest
// receives it behind the 12-byte header it negotiated.
func ExampleListen() {
	dir, _ := os.MkdirTemp("", "vhostuser-example")
	defer os.RemoveAll(dir)
	p, err := vhostuser.Listen(vhostuser.Config{Path: filepath.Join(dir, "port.sock")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	fmt.Println("before the guest:", p.State())
	guest, err := vhostusertest.Dial(p.Path(), vhostusertest.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer guest.Close()
	fmt.Println("after it started its rings:", p.State(), "with", p.ActivePairs(), "queue pair")

	frame := bytes.Repeat([]byte{0xee}, 60)
	copy(frame, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x21})
	guest.Send(make([]byte, 10), frame, vhostusertest.Flat)
	buf := make([]byte, 2048)
	n := exampleRead(p, buf)
	mac, _ := p.MAC()
	fmt.Printf("the port read %d bytes; the guest's MAC is %s\n", n, mac)

	guest.FillRx()
	if _, err := p.Write([][]byte{buf[:n]}, 0); err != nil {
		fmt.Println(err)
		return
	}
	_, got, ok, err := guest.Recv(buf)
	fmt.Printf("the guest received %d bytes behind a %d-byte header: %v %v\n", got, guest.HdrLen, ok, err)
	// Output:
	// before the guest: listening
	// after it started its rings: running with 1 queue pair
	// the port read 70 bytes; the guest's MAC is 02:00:00:00:00:21
	// the guest received 60 bytes behind a 12-byte header: true <nil>
}

// exampleRead reads one frame from p into buf, waiting up to 5 s.
func exampleRead(p *vhostuser.Port, buf []byte) int {
	sizes := make([]int, 1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		n, err := p.Read([][]byte{buf}, sizes, 0)
		if n == 1 {
			return sizes[0]
		}
		if err != nil && !errors.Is(err, unix.EAGAIN) {
			return 0
		}
	}
	return 0
}
