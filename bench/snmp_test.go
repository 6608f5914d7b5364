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
	lab0, err := udpRcvbufErrors(bed, bed.LabNS)
	if err != nil {
		t.Fatal(err)
	}
	wire0, err := udpRcvbufErrors(bed, bed.WireNS)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for range n {
		if _, err := unix.Write(client, make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
	}
	var lab1, wire1 uint64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if lab1, err = udpRcvbufErrors(bed, bed.LabNS); err != nil {
			t.Fatal(err)
		}
		if lab1-lab0 >= n-20 {
			break
		}
	}
	if wire1, err = udpRcvbufErrors(bed, bed.WireNS); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d datagrams at a full socket: %d counted in the lab, %d in the wire namespace", n, lab1-lab0, wire1-wire0)
	if d := lab1 - lab0; d < n-20 || d > n {
		t.Errorf("lab RcvbufErrors went up by %d for %d datagrams sent at a socket that holds a few", d, n)
	}
	if wire1 != wire0 {
		t.Errorf("wire RcvbufErrors moved by %d: the counter is not per namespace", wire1-wire0)
	}
}
