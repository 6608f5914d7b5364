package abrun

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// Role is whose a thread of the run is.
type Role int

// The run's own threads, by whose they are.
const (
	RoleTapfwd  Role = iota // every thread of the tapfwd process
	RoleKthread             // the TAP's NAPI kthreads (napi/TAP-N)
	RoleSoftirq             // ksoftirqd/N of every CPU
	RoleClient              // the iperf3 client (wire namespace)
	RoleServer              // the iperf3 server (lab namespace)
	nRoles
)

var roleNames = [nRoles]string{"tapfwd", "napi kthread", "ksoftirqd", "iperf3 client", "iperf3 server"}

func (r Role) String() string { return roleNames[r] }

// RoleCPU is CPU-seconds by role.
type RoleCPU [nRoles]float64

// Total is the CPU of every role.
func (c RoleCPU) Total() float64 {
	t := 0.0
	for _, v := range c {
		t += v
	}
	return t
}

func (c RoleCPU) sub(d RoleCPU) RoleCPU {
	for i := range c {
		c[i] -= d[i]
	}
	return c
}

// sample is what the probe reads at one instant.
type sample struct {
	at            time.Duration // since the probe was made
	bytes, frames uint64        // the TAP's receive counters: what tapfwd wrote into it
	cpu           RoleCPU
}

// tcpSample are the TCP counters read at a window's start: the sender's
// retransmitted segments and the receiver's out-of-order queueings.
type tcpSample struct {
	retrans, ofo int64
}

// watchedProc is a process whose threads count as one role: tasks says
// whether its threads are listed (a user process) or it is one thread
// (a kthread).
type watchedProc struct {
	pid   int
	role  Role
	tasks bool
}

// threadStat is one thread's schedstat, held open and read with pread.
type threadStat struct {
	f    *os.File
	role Role
	last time.Duration // the last CPU time read: kept once the thread is gone
}

// probe reads a run's counters: the TAP's, from the lab namespace
// (through the iperf3 server's /proc/PID/net/dev), every own thread's
// CPU time, and the TCP counters of both ends.
type probe struct {
	start time.Time
	tap   string
	dev   *os.File // /proc/SERVER/net/dev
	procs []watchedProc
	tasks map[int]*threadStat // by tid
	snmp  string              // /proc/CLIENT/net/snmp: RetransSegs
	ofo   string              // /proc/SERVER/net/netstat: TCPOFOQueue
	// rx says whether the TAP's receive counters are the ones to read (a
	// wire->lab run: tapfwd writes into the TAP); else its transmit ones.
	rx  bool
	buf []byte
}

// newProbe watches the run of TAP tap whose iperf3 server and client are
// server and client, and tapfwd; kthreads are the TAP's NAPI kthreads.
func newProbe(tap string, rx bool, tapfwd, server, client int, kthreads []int) (*probe, error) {
	dev, err := os.Open(fmt.Sprintf("/proc/%d/net/dev", server))
	if err != nil {
		return nil, fmt.Errorf("inrun: the lab's counters: %w", err)
	}
	p := &probe{start: time.Now(), tap: tap, dev: dev, rx: rx, tasks: map[int]*threadStat{}, buf: make([]byte, 64<<10),
		snmp: fmt.Sprintf("/proc/%d/net/snmp", client), ofo: fmt.Sprintf("/proc/%d/net/netstat", server)}
	p.procs = []watchedProc{{tapfwd, RoleTapfwd, true}, {server, RoleServer, true}, {client, RoleClient, true}}
	for _, k := range kthreads {
		p.procs = append(p.procs, watchedProc{k, RoleKthread, false})
	}
	for _, k := range softirqThreads() {
		p.procs = append(p.procs, watchedProc{k, RoleSoftirq, false})
	}
	p.rescan()
	return p, nil
}

// softirqThreads are the pids of ksoftirqd/N.
func softirqThreads() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.HasPrefix(string(b), "ksoftirqd/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// rescan opens the schedstat of threads that appeared since the last
// scan (a process's threads come and go; a gone one keeps its last
// figure).
func (p *probe) rescan() {
	for _, w := range p.procs {
		tids := []int{w.pid}
		if w.tasks {
			tids = procfs.Tasks(w.pid)
		}
		for _, tid := range tids {
			if _, ok := p.tasks[tid]; ok {
				continue
			}
			f, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/schedstat", w.pid, tid))
			if err != nil {
				continue
			}
			p.tasks[tid] = &threadStat{f: f, role: w.role}
		}
	}
}

// close closes every file the probe holds.
func (p *probe) close() {
	p.dev.Close()
	for _, t := range p.tasks {
		t.f.Close()
	}
}

// read takes a sample.
func (p *probe) read() (sample, error) {
	s := sample{at: time.Since(p.start)}
	for _, t := range p.tasks {
		if n, err := unix.Pread(int(t.f.Fd()), p.buf, 0); err == nil {
			if v, ok := firstInt(p.buf[:n]); ok {
				t.last = time.Duration(v)
			}
		}
		s.cpu[t.role] += t.last.Seconds()
	}
	n, err := unix.Pread(int(p.dev.Fd()), p.buf, 0)
	if err != nil {
		return s, fmt.Errorf("inrun: reading the lab's net/dev: %w", err)
	}
	s.bytes, s.frames, err = devCounters(p.buf[:n], p.tap, p.rx)
	return s, err
}

// tcp reads the TCP counters; zero when they cannot be read (a process
// gone at the end of a run).
func (p *probe) tcp() tcpSample {
	var t tcpSample
	if b, err := os.ReadFile(p.snmp); err == nil {
		t.retrans, _ = procfs.ParseSNMP(string(b)).Counter("Tcp", "RetransSegs")
	}
	if b, err := os.ReadFile(p.ofo); err == nil {
		t.ofo, _ = procfs.ParseSNMP(string(b)).Counter("TcpExt", "TCPOFOQueue")
	}
	return t
}

// firstInt parses the decimal number that starts b.
func firstInt(b []byte) (int64, bool) {
	var v int64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		v = v*10 + int64(b[i]-'0')
	}
	return v, i > 0
}

// devCounters finds dev's line in the text of /proc/net/dev and returns
// its receive (rx) or transmit bytes and packets.
func devCounters(text []byte, dev string, rx bool) (bytesN, packets uint64, err error) {
	for line := range bytes.Lines(text) {
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(bytes.TrimSpace(name)) != dev {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) < 10 {
			return 0, 0, fmt.Errorf("inrun: net/dev: %s has %d fields", dev, len(f))
		}
		i := 0
		if !rx {
			i = 8
		}
		b, err1 := strconv.ParseUint(f[i], 10, 64)
		p, err2 := strconv.ParseUint(f[i+1], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("inrun: net/dev: %s: %q", dev, line)
		}
		return b, p, nil
	}
	return 0, 0, fmt.Errorf("inrun: net/dev has no %s", dev)
}
