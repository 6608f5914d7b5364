package trace

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// softirqs are the NET_RX and NET_TX counts per CPU.
type softirqs struct{ rx, tx []int64 }

func readSoftirqs() (softirqs, error) {
	b, err := os.ReadFile("/proc/softirqs")
	if err != nil {
		return softirqs{}, err
	}
	return parseSoftirqs(string(b))
}

// parseSoftirqs reads the NET_RX and NET_TX lines of /proc/softirqs: the
// name, then a count per CPU.
func parseSoftirqs(text string) (softirqs, error) {
	var s softirqs
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != "NET_RX:" && f[0] != "NET_TX:") {
			continue
		}
		counts := make([]int64, len(f)-1)
		for i, v := range f[1:] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return softirqs{}, fmt.Errorf("softirqs: %s %q: %w", f[0], v, err)
			}
			counts[i] = n
		}
		if f[0] == "NET_RX:" {
			s.rx = counts
		} else {
			s.tx = counts
		}
	}
	if s.rx == nil || s.tx == nil {
		return softirqs{}, errors.New("softirqs: no NET_RX or NET_TX line")
	}
	return s, nil
}

// TCPCounters are the counters of a namespace a trace keeps, as
// "Proto.Name" of /proc/net/snmp and netstat: what TCP sent and how it
// packed it (IP packets and bytes out, segments, writes held back by
// autocorking), what it got and acknowledged, and what it sent again.
var TCPCounters = []string{
	"Ip.OutRequests", "IpExt.OutOctets", "Ip.InReceives", "IpExt.InOctets",
	"Tcp.OutSegs", "Tcp.InSegs", "Tcp.RetransSegs",
	"TcpExt.TCPOrigDataSent", "TcpExt.TCPAutoCorking", "TcpExt.DelayedACKs",
	"TcpExt.TCPPureAcks", "TcpExt.TCPHPAcks", "TcpExt.TCPHPHits",
	"TcpExt.TCPBacklogCoalesce", "TcpExt.TCPRcvCoalesce", "TcpExt.TCPOFOQueue",
}

// readTCPCounters reads TCPCounters in the calling thread's namespace.
func readTCPCounters() (map[string]int64, error) {
	all := procfs.Counters{}
	for _, f := range []string{"/proc/thread-self/net/snmp", "/proc/thread-self/net/netstat"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for k, v := range procfs.ParseSNMP(string(b)) {
			all[k] = v
		}
	}
	out := map[string]int64{}
	for _, k := range TCPCounters {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

// loadAverage is the 1-minute load average of /proc/loadavg.
func loadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("loadavg: empty")
	}
	return strconv.ParseFloat(f[0], 64)
}
