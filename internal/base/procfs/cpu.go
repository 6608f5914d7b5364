package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPUTimes are the machine's CPU times summed over all CPUs: the "cpu"
// line of /proc/stat (proc(5); fs/proc/stat.c), each counted since boot.
type CPUTimes struct {
	// User includes guest time (the kernel counts it in user too);
	// Nice is user time at a positive nice value.
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal time.Duration
}

// Sub is t - u, field by field: the times spent between two readings.
func (t CPUTimes) Sub(u CPUTimes) CPUTimes {
	return CPUTimes{
		User: t.User - u.User, Nice: t.Nice - u.Nice, System: t.System - u.System,
		Idle: t.Idle - u.Idle, IOWait: t.IOWait - u.IOWait, IRQ: t.IRQ - u.IRQ,
		SoftIRQ: t.SoftIRQ - u.SoftIRQ, Steal: t.Steal - u.Steal,
	}
}

// ParseCPUTimes parses the text of /proc/stat and returns its first line,
// "cpu" followed by the times in USER_HZ ticks. Kernels before 2.6.11
// have fewer than the eight fields read here; they are an error.
func ParseCPUTimes(text string) (CPUTimes, error) {
	line, _, _ := strings.Cut(text, "\n")
	return parseCPULine(line, "cpu")
}

// ParsePerCPUTimes parses the text of /proc/stat and returns the times of
// each CPU, from its "cpuN" lines, indexed by N (a CPU without a line,
// offline, has zero times).
func ParsePerCPUTimes(text string) ([]CPUTimes, error) {
	var out []CPUTimes
	for line := range strings.SplitSeq(text, "\n") {
		name, _, _ := strings.Cut(line, " ")
		n, err := strconv.Atoi(strings.TrimPrefix(name, "cpu"))
		if !strings.HasPrefix(name, "cpu") || err != nil || n < 0 || n >= 1<<16 {
			continue
		}
		t, err := parseCPULine(line, name)
		if err != nil {
			return nil, err
		}
		for len(out) <= n {
			out = append(out, CPUTimes{})
		}
		out[n] = t
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("/proc/stat: no cpuN line")
	}
	return out, nil
}

// parseCPULine parses one line of /proc/stat that names CPU name.
func parseCPULine(line, name string) (CPUTimes, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != name {
		return CPUTimes{}, fmt.Errorf("/proc/stat: line %q, want %q and at least 8 times", line, name)
	}
	var v [8]time.Duration
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("/proc/stat: %s field %d: %w", name, i+1, err)
		}
		v[i] = time.Duration(n) * time.Second / userHZ
	}
	return CPUTimes{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}, nil
}

// ReadCPUTimes reads the machine's CPU times from /proc/stat, which is
// the same in every network namespace.
func ReadCPUTimes() (CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, fmt.Errorf("read CPU times: %w", err)
	}
	return ParseCPUTimes(string(b))
}

// ReadPerCPUTimes reads each CPU's times from /proc/stat.
func ReadPerCPUTimes() ([]CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("read CPU times: %w", err)
	}
	return ParsePerCPUTimes(string(b))
}

// Received are a network namespace's counters of what its IP layer took
// in: packets (Ip InReceives) and their bytes (IpExt InOctets), both
// counted per packet as it arrives in ip_rcv (net/ipv4/ip_input.c), so a
// GRO-merged packet counts once with all its bytes; and the UDP datagrams
// queued to a socket (Udp InDatagrams).
type Received struct {
	IPPackets, IPOctets, UDPDatagrams int64
}

// Sub is r - s, counter by counter.
func (r Received) Sub(s Received) Received {
	return Received{IPPackets: r.IPPackets - s.IPPackets, IPOctets: r.IPOctets - s.IPOctets, UDPDatagrams: r.UDPDatagrams - s.UDPDatagrams}
}

// ReadReceived reads the Received counters of the network namespace of
// the calling thread (/proc/thread-self/net/snmp and netstat).
func ReadReceived() (Received, error) {
	snmp, err := os.ReadFile("/proc/thread-self/net/snmp")
	if err != nil {
		return Received{}, fmt.Errorf("read IP counters: %w", err)
	}
	netstat, err := os.ReadFile("/proc/thread-self/net/netstat")
	if err != nil {
		return Received{}, fmt.Errorf("read IP counters: %w", err)
	}
	return parseReceived(ParseSNMP(string(snmp)), ParseSNMP(string(netstat)))
}

func parseReceived(snmp, netstat Counters) (Received, error) {
	var r Received
	var err error
	if r.IPPackets, err = snmp.Counter("Ip", "InReceives"); err != nil {
		return Received{}, err
	}
	if r.UDPDatagrams, err = snmp.Counter("Udp", "InDatagrams"); err != nil {
		return Received{}, err
	}
	if r.IPOctets, err = netstat.Counter("IpExt", "InOctets"); err != nil {
		return Received{}, err
	}
	return r, nil
}
