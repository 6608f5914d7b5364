package throughput

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// TestUDPRcvbufErrors fills a socket nobody reads in the lab namespace and
// checks that the datagrams it had no room for are counted there, and only
// there.
func TestUDPRcvbufErrors(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Direct})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bed.WaitLabReachable(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var server, client int
	err := bed.Do(bed.LabNS, func() (err error) {
		if server, err = udpSocket(bed.LabAddr.Addr()); err == nil {
			// The smallest buffer the kernel allows: a few datagrams.
			err = unix.SetsockoptInt(server, unix.SOL_SOCKET, unix.SO_RCVBUF, 1)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(server)
	err = bed.Do(bed.WireNS, func() (err error) {
		client, err = udpSocket(bed.WireAddr.Addr())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(client)
	if err := connectPair(client, server); err != nil {
		t.Fatal(err)
	}
	lab0, err := udpStats(bed, bed.LabNS)
	if err != nil {
		t.Fatal(err)
	}
	wire0, err := udpStats(bed, bed.WireNS)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for range n {
		if _, err := unix.Write(client, make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
	}
	// Read what the socket kept (InDatagrams counts a datagram when it is
	// read); the rest it dropped. Wait until all n are accounted for.
	var lab1 procfs.UDP
	read := uint64(0)
	buf := make([]byte, 128)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		for {
			if _, err := unix.Read(server, buf); err != nil {
				break // EAGAIN after the receive timeout: nothing queued
			}
			read++
		}
		if lab1, err = udpStats(bed, bed.LabNS); err != nil {
			t.Fatal(err)
		}
		if lab1.In-lab0.In+lab1.Rcvbuf-lab0.Rcvbuf >= n || time.Now().After(deadline) {
			break
		}
	}
	wire1, err := udpStats(bed, bed.WireNS)
	if err != nil {
		t.Fatal(err)
	}
	in, drop := lab1.In-lab0.In, lab1.Rcvbuf-lab0.Rcvbuf
	t.Logf("%d datagrams at a small socket: %d read, lab InDatagrams +%d RcvbufErrors +%d (%.1f%%); wire %+v -> %+v",
		n, read, in, drop, procfs.RcvbufPercent(lab0, lab1), wire0, wire1)
	if in != int64(read) || in+drop != n || drop < n/2 {
		t.Errorf("lab counters: +%d delivered, +%d dropped for %d datagrams sent, %d read", in, drop, n, read)
	}
	if want := 100 * float64(drop) / n; procfs.RcvbufPercent(lab0, lab1) != want {
		t.Errorf("rcvbufPercent %v, want %v", procfs.RcvbufPercent(lab0, lab1), want)
	}
	if wire1.Rcvbuf != wire0.Rcvbuf {
		t.Errorf("wire RcvbufErrors moved by %d: the counters are not read per namespace", wire1.Rcvbuf-wire0.Rcvbuf)
	}
	if procfs.RcvbufPercent(wire0, wire0) != 0 {
		t.Error("no datagrams, yet a share")
	}
}

// udpSocket opens a UDP socket bound to addr and a port the kernel picks,
// with a short receive timeout.
func udpSocket(addr netip.Addr) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	tv := unix.NsecToTimeval(int64(10 * time.Millisecond))
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr.As4()}); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("bind", err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("setsockopt", err)
	}
	return fd, nil
}

// connectPair connects two bound UDP sockets to each other.
func connectPair(a, b int) error {
	sa, err := unix.Getsockname(a)
	if err != nil {
		return err
	}
	sb, err := unix.Getsockname(b)
	if err != nil {
		return err
	}
	if err := unix.Connect(a, sb); err != nil {
		return err
	}
	return unix.Connect(b, sa)
}
