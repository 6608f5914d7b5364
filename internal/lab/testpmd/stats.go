package testpmd

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// PortStats are a port's counters as "show port stats" prints them (the
// ethdev's: frames the port received and sent).
type PortStats struct {
	RxPackets, RxMissed, RxBytes, RxErrors, RxNoMbuf uint64
	TxPackets, TxErrors, TxBytes                     uint64
}

// ForwardStats are a port's forwarding counters, as "stop" and an exit on
// SIGINT print them.
type ForwardStats struct {
	RxPackets, RxDropped, TxPackets, TxDropped uint64
}

var counter = regexp.MustCompile(`([A-Za-z][A-Za-z0-9_-]*):\s+(\d+)`)

// counters reads the "NAME: VALUE" pairs of s.
func counters(s string) map[string]uint64 {
	m := make(map[string]uint64)
	for _, c := range counter.FindAllStringSubmatch(s, -1) {
		v, err := strconv.ParseUint(c[2], 10, 64)
		if err == nil {
			m[c[1]] = v
		}
	}
	return m
}

// PortStats runs "show port stats PORT".
func (p *Process) PortStats(port int) (PortStats, error) {
	out, err := p.Command(fmt.Sprintf("show port stats %d", port))
	if err != nil {
		return PortStats{}, err
	}
	if !strings.Contains(out, fmt.Sprintf("NIC statistics for port %d", port)) {
		return PortStats{}, fmt.Errorf("testpmd: show port stats %d: %q", port, out)
	}
	c := counters(out)
	return PortStats{
		RxPackets: c["RX-packets"], RxMissed: c["RX-missed"], RxBytes: c["RX-bytes"], RxErrors: c["RX-errors"],
		RxNoMbuf: c["RX-nombuf"], TxPackets: c["TX-packets"], TxErrors: c["TX-errors"], TxBytes: c["TX-bytes"],
	}, nil
}

// XStats runs "show port xstats PORT": the extended counters by name
// (for virtio-user: rx_q0_good_packets, tx_q1_good_bytes...).
func (p *Process) XStats(port int) (map[string]uint64, error) {
	out, err := p.Command(fmt.Sprintf("show port xstats %d", port))
	if err != nil {
		return nil, err
	}
	if !strings.Contains(out, fmt.Sprintf("NIC extended statistics for port %d", port)) {
		return nil, fmt.Errorf("testpmd: show port xstats %d: %q", port, out)
	}
	return counters(out), nil
}

// StartForwarding runs "start".
func (p *Process) StartForwarding() error {
	_, err := p.Command("start")
	return err
}

// StopForwarding runs "stop" and returns each port's forward statistics.
func (p *Process) StopForwarding() ([]ForwardStats, error) {
	out, err := p.Command("stop")
	if err != nil {
		return nil, err
	}
	return ParseForwardStats(out)
}

// ParseForwardStats reads the per-port "Forward statistics for port N"
// blocks of what "stop" or an exit on SIGINT printed, port 0 first.
func ParseForwardStats(out string) ([]ForwardStats, error) {
	var all []ForwardStats
	for port := 0; ; port++ {
		_, block, ok := strings.Cut(out, fmt.Sprintf("Forward statistics for port %d ", port))
		if !ok {
			break
		}
		lines := strings.SplitN(block, "\n", 4) // the header's end, RX, TX, the rest
		if len(lines) < 3 {
			break
		}
		c := counters(lines[1] + "\n" + lines[2])
		all = append(all, ForwardStats{RxPackets: c["RX-packets"], RxDropped: c["RX-dropped"],
			TxPackets: c["TX-packets"], TxDropped: c["TX-dropped"]})
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("testpmd: no forward statistics in %q", out)
	}
	return all, nil
}
