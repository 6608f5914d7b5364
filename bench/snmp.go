package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tapfwd/tapfwd/bench/testbed"
)

// udpCounters are a namespace's UDP receive counters.
type udpCounters struct {
	// In counts datagrams delivered to a socket; Rcvbuf those that reached
	// a socket and were dropped because its receive buffer was full. In a
	// UDP flood the latter is the receiving application falling behind,
	// not the path losing frames.
	In, Rcvbuf uint64
}

// udpStats reads the Udp InDatagrams and RcvbufErrors counters of
// namespace ns.
func udpStats(b *testbed.Bed, ns string) (udpCounters, error) {
	var c udpCounters
	err := b.Do(ns, func() error {
		// thread-self: /proc/self/net is the namespace of the process's
		// main thread, not of this one.
		raw, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		if c.In, err = snmpCounter(string(raw), "Udp", "InDatagrams"); err != nil {
			return err
		}
		c.Rcvbuf, err = snmpCounter(string(raw), "Udp", "RcvbufErrors")
		return err
	})
	return c, err
}

// rcvbufPercent is the share of the datagrams that reached a socket
// between c0 and c1 that the socket dropped, in percent.
func rcvbufPercent(c0, c1 udpCounters) float64 {
	in, drop := c1.In-c0.In, c1.Rcvbuf-c0.Rcvbuf
	if in+drop == 0 {
		return 0
	}
	return 100 * float64(drop) / float64(in+drop)
}

// snmpCounter finds a counter in /proc/net/snmp's layout: for each
// protocol a line of names and a line of values, both starting "Proto:".
func snmpCounter(snmp, proto, name string) (uint64, error) {
	var names []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		for i, n := range names {
			if n == name && i+1 < len(f) {
				return strconv.ParseUint(f[i+1], 10, 64)
			}
		}
		break
	}
	return 0, fmt.Errorf("/proc/net/snmp: no %s %s", proto, name)
}
