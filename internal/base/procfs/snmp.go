package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Counters maps "Proto.Name" (e.g. "Udp.RcvbufErrors") to a counter's
// value.
type Counters map[string]int64

// ParseSNMP reads the layout of /proc/net/snmp and /proc/net/netstat: for
// each protocol a line of names and a line of values, both starting
// "Proto:". Later pairs of a protocol already seen do not replace the
// first. Values that are not numbers are left out.
func ParseSNMP(text string) Counters {
	out := Counters{}
	var names []string
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasSuffix(f[0], ":") {
			names = nil
			continue
		}
		if names == nil || names[0] != f[0] {
			names = f
			continue
		}
		proto := strings.TrimSuffix(f[0], ":")
		for i := 1; i < len(f) && i < len(names); i++ {
			key := proto + "." + names[i]
			if _, seen := out[key]; seen {
				continue
			}
			if v, err := strconv.ParseInt(f[i], 10, 64); err == nil {
				out[key] = v
			}
		}
		names = nil
	}
	return out
}

// ParseSNMP6 reads the layout of /proc/net/snmp6: a line per counter, its
// name and its value ("Udp6InDatagrams 12"). The protocol is the name up
// to its first '6' (Ip6, Icmp6, Udp6, UdpLite6), so the counter above is
// "Udp6.InDatagrams". Lines of another shape are left out.
func ParseSNMP6(text string) Counters {
	out := Counters{}
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		i := strings.IndexByte(f[0], '6')
		if i < 0 || i == len(f[0])-1 {
			continue
		}
		if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			out[f[0][:i+1]+"."+f[0][i+1:]] = v
		}
	}
	return out
}

// Counter returns the counter proto.name, or an error naming it when the
// text has no such counter.
func (c Counters) Counter(proto, name string) (int64, error) {
	v, ok := c[proto+"."+name]
	if !ok {
		return 0, fmt.Errorf("no %s %s counter in /proc/net/snmp", proto, name)
	}
	return v, nil
}

// UDP are a network namespace's UDP receive counters.
type UDP struct {
	// In counts datagrams delivered to a socket; Rcvbuf those that reached
	// a socket and were dropped because its receive buffer was full. In a
	// UDP flood the latter is the receiving application falling behind,
	// not the path losing frames.
	In, Rcvbuf int64
}

// ReadUDP reads the Udp InDatagrams and RcvbufErrors counters of the
// network namespace of the calling thread (/proc/thread-self/net/snmp:
// /proc/self/net is the namespace of the process's main thread).
func ReadUDP() (UDP, error) {
	raw, err := os.ReadFile("/proc/thread-self/net/snmp")
	if err != nil {
		return UDP{}, fmt.Errorf("read UDP counters: %w", err)
	}
	c := ParseSNMP(string(raw))
	var u UDP
	if u.In, err = c.Counter("Udp", "InDatagrams"); err != nil {
		return UDP{}, err
	}
	if u.Rcvbuf, err = c.Counter("Udp", "RcvbufErrors"); err != nil {
		return UDP{}, err
	}
	return u, nil
}

// RcvbufPercent is the share of the datagrams that reached a socket
// between u0 and u1 that the socket dropped, in percent.
func RcvbufPercent(u0, u1 UDP) float64 {
	in, drop := u1.In-u0.In, u1.Rcvbuf-u0.Rcvbuf
	if in+drop <= 0 {
		return 0
	}
	return 100 * float64(drop) / float64(in+drop)
}
