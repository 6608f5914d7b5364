package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tapfwd/tapfwd/bench/testbed"
)

// udpRcvbufErrors reads the Udp RcvbufErrors counter of namespace ns: UDP
// datagrams that reached a socket in ns and were dropped because its
// receive buffer was full. In a UDP flood this is the receiving
// application falling behind, not the path losing frames.
func udpRcvbufErrors(b *testbed.Bed, ns string) (uint64, error) {
	var n uint64
	err := b.Do(ns, func() error {
		// thread-self: /proc/self/net is the namespace of the process's
		// main thread, not of this one.
		raw, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		n, err = snmpCounter(string(raw), "Udp", "RcvbufErrors")
		return err
	})
	return n, err
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
