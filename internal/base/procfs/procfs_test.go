package procfs

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSNMPCounter(t *testing.T) {
	const snmp = `Ip: Forwarding DefaultTTL
Ip: 2 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
Udp: 120 3 7 99 7 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
UdpLite: 0 0 0 0 5 0
Tcp: RtoAlgorithm MaxConn
Tcp: 1 -1
`
	c := ParseSNMP(snmp)
	if n, err := c.Counter("Udp", "RcvbufErrors"); n != 7 || err != nil {
		t.Errorf("Udp RcvbufErrors: %d, %v; want 7", n, err)
	}
	if n, err := c.Counter("UdpLite", "RcvbufErrors"); n != 5 || err != nil {
		t.Errorf("UdpLite RcvbufErrors: %d, %v; want 5", n, err)
	}
	if n, err := c.Counter("Tcp", "MaxConn"); n != -1 || err != nil {
		t.Errorf("Tcp MaxConn: %d, %v; want -1", n, err)
	}
	if _, err := c.Counter("Udp", "NoSuchCounter"); err == nil {
		t.Error("a missing counter gave no error")
	}
	if _, err := ParseSNMP("").Counter("Udp", "RcvbufErrors"); err == nil {
		t.Error("an empty file gave no error")
	}
}

func TestReadUDP(t *testing.T) {
	u, err := ReadUDP()
	if err != nil {
		t.Fatal(err)
	}
	if u.In < 0 || u.Rcvbuf < 0 {
		t.Errorf("%+v", u)
	}
	if RcvbufPercent(u, u) != 0 {
		t.Error("no datagrams, yet a share")
	}
	if p := RcvbufPercent(UDP{In: 10, Rcvbuf: 5}, UDP{In: 40, Rcvbuf: 15}); p != 25 {
		t.Errorf("RcvbufPercent = %v, want 25", p)
	}
}

func TestParseStat(t *testing.T) {
	// A command with a space and a parenthesis, as prctl(PR_SET_NAME) allows.
	const stat = "4242 (a b) c) S 17 4242 17 0 -1 4194560 300 0 0 0 250 75 0 0 20 0 3 0 98765 1000 10 0\n"
	s, err := ParseStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if s.Comm != "a b) c" || s.State != "S" || s.PPid != 17 || s.UTime != 2500*time.Millisecond ||
		s.STime != 750*time.Millisecond || s.CPU() != 3250*time.Millisecond || s.StartTime != 98765 ||
		s.Flags != 4194560 || s.IOWorker() {
		t.Errorf("ParseStat = %+v", s)
	}
	// An io-wq worker: PF_IO_WORKER (0x10) among its flags.
	if w, err := ParseStat(strings.Replace(stat, " 4194560 ", " 4194576 ", 1)); err != nil || !w.IOWorker() {
		t.Errorf("ParseStat of an io-wq worker = %+v, %v", w, err)
	}
	for _, bad := range []string{"", "1 (x S 1", "1 (x) S 1 2 3"} {
		if _, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q): no error", bad)
		}
	}
	self, err := ReadStat(os.Getpid())
	if err != nil || self.PPid != os.Getppid() || self.StartTime == 0 {
		t.Errorf("ReadStat(self) = %+v, %v", self, err)
	}
}

func TestStatus(t *testing.T) {
	const status = "Name:\ttapfwd\nState:\tS (sleeping)\nThreads:\t7\nVmRSS:\t   12345 kB\nCapEff:\t000001ffffffffff\n"
	if n, err := StatusNumber(status, "VmRSS"); n != 12345 || err != nil {
		t.Errorf("VmRSS: %d, %v", n, err)
	}
	if n, err := StatusNumber(status, "Threads"); n != 7 || err != nil {
		t.Errorf("Threads: %d, %v", n, err)
	}
	if _, err := StatusNumber(status, "VmSwap"); err == nil || !strings.Contains(err.Error(), "VmSwap") {
		t.Errorf("missing field: %v", err)
	}
	if _, err := StatusNumber(status, "Name"); err == nil {
		t.Error("a name is not a number")
	}
	if ParseStatus(status)["CapEff"] != "000001ffffffffff" {
		t.Errorf("CapEff: %q", ParseStatus(status)["CapEff"])
	}
}

func TestParseSNMP6(t *testing.T) {
	const snmp6 = "Ip6InReceives                   \t36\nIcmp6InType135 4\nUdp6InDatagrams 12\nUdp6InCsumErrors 2\nUdpLite6InErrors 1\nbogus\nNo6 x\n"
	c := ParseSNMP6(snmp6)
	for _, tc := range []struct {
		proto, name string
		want        int64
	}{
		{"Ip6", "InReceives", 36}, {"Icmp6", "InType135", 4}, {"Udp6", "InDatagrams", 12},
		{"Udp6", "InCsumErrors", 2}, {"UdpLite6", "InErrors", 1},
	} {
		if n, err := c.Counter(tc.proto, tc.name); n != tc.want || err != nil {
			t.Errorf("%s %s: %d, %v; want %d", tc.proto, tc.name, n, err, tc.want)
		}
	}
	if len(c) != 5 {
		t.Errorf("%d counters, want 5: %v", len(c), c)
	}
}

func TestParseSchedStat(t *testing.T) {
	run, wait, err := ParseSchedStat("1500000 250000 42\n")
	if err != nil || run != 1500*time.Microsecond || wait != 250*time.Microsecond {
		t.Errorf("ParseSchedStat = %v, %v, %v", run, wait, err)
	}
	for _, bad := range []string{"", "1", "x 2 3"} {
		if _, _, err := ParseSchedStat(bad); err == nil {
			t.Errorf("ParseSchedStat(%q): no error", bad)
		}
	}
	raw, err := os.ReadFile("/proc/self/schedstat")
	if err != nil {
		t.Skipf("no schedstat: %v", err)
	}
	if run, _, err := ParseSchedStat(string(raw)); err != nil || run <= 0 {
		t.Errorf("own schedstat %q: %v, %v", raw, run, err)
	}
}

func TestTasks(t *testing.T) {
	tids := Tasks(os.Getpid())
	if !slices.Contains(tids, syscall.Gettid()) || !slices.Contains(tids, os.Getpid()) {
		t.Errorf("Tasks(self) = %v, want this thread (%d) and the main one", tids, syscall.Gettid())
	}
	if got := Tasks(-1); got != nil {
		t.Errorf("Tasks(-1) = %v", got)
	}
}
