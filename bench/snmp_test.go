package bench

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/testbed"
)

func TestSNMPCounter(t *testing.T) {
	const snmp = `Ip: Forwarding DefaultTTL
Ip: 2 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
Udp: 120 3 7 99 7 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
UdpLite: 0 0 0 0 5 0
`
	if n, err := snmpCounter(snmp, "Udp", "RcvbufErrors"); n != 7 || err != nil {
		t.Errorf("Udp RcvbufErrors: %d, %v; want 7", n, err)
	}
	if n, err := snmpCounter(snmp, "UdpLite", "RcvbufErrors"); n != 5 || err != nil {
		t.Errorf("UdpLite RcvbufErrors: %d, %v; want 5", n, err)
	}
	if _, err := snmpCounter(snmp, "Udp", "NoSuchCounter"); err == nil {
		t.Error("a missing counter gave no error")
	}
	if _, err := snmpCounter("", "Udp", "RcvbufErrors"); err == nil {
		t.Error("an empty file gave no error")
	}
}

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
	var lab1 udpCounters
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
		n, read, in, drop, rcvbufPercent(lab0, lab1), wire0, wire1)
	if in != read || in+drop != n || drop < n/2 {
		t.Errorf("lab counters: +%d delivered, +%d dropped for %d datagrams sent, %d read", in, drop, n, read)
	}
	if want := 100 * float64(drop) / n; rcvbufPercent(lab0, lab1) != want {
		t.Errorf("rcvbufPercent %v, want %v", rcvbufPercent(lab0, lab1), want)
	}
	if wire1.Rcvbuf != wire0.Rcvbuf {
		t.Errorf("wire RcvbufErrors moved by %d: the counters are not read per namespace", wire1.Rcvbuf-wire0.Rcvbuf)
	}
	if rcvbufPercent(wire0, wire0) != 0 {
		t.Error("no datagrams, yet a share")
	}
}
