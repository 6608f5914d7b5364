package procfs

import (
	"testing"
	"time"
)

func TestParseCPUTimes(t *testing.T) {
	const stat = "cpu  198093 5 122031 452454 1293 7 39335 188 0 0\ncpu0 105889 0 61574 219557 272 0 21611 86 0 0\n"
	got, err := ParseCPUTimes(stat)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.Second / userHZ
	want := CPUTimes{User: 198093 * tick, Nice: 5 * tick, System: 122031 * tick, Idle: 452454 * tick,
		IOWait: 1293 * tick, IRQ: 7 * tick, SoftIRQ: 39335 * tick, Steal: 188 * tick}
	if got != want {
		t.Errorf("ParseCPUTimes = %+v, want %+v", got, want)
	}
	if d := want.Sub(CPUTimes{User: tick, SoftIRQ: 2 * tick}); d.User != 198092*tick || d.SoftIRQ != 39333*tick || d.Idle != want.Idle {
		t.Errorf("Sub: %+v", d)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8 9\n"} {
		if _, err := ParseCPUTimes(bad); err == nil {
			t.Errorf("ParseCPUTimes(%q) took it", bad)
		}
	}
}

func TestParsePerCPUTimes(t *testing.T) {
	const stat = "cpu  198093 5 122031 452454 1293 7 39335 188 0 0\ncpu0 105889 0 61574 219557 272 0 21611 86 0 0\n" +
		"cpu2 9 0 1 2 3 4 5 6 0 0\nintr 123 4 5\ncpufreq 1\n"
	got, err := ParsePerCPUTimes(stat)
	tick := time.Second / userHZ
	if err != nil || len(got) != 3 || got[0].User != 105889*tick || got[0].SoftIRQ != 21611*tick || got[1] != (CPUTimes{}) ||
		got[2].User != 9*tick || got[2].Steal != 6*tick {
		t.Fatalf("ParsePerCPUTimes = %+v, %v", got, err)
	}
	for _, bad := range []string{"", "cpu 1 2 3 4 5 6 7 8\n", "cpu1 1 2 3\n", "cpu0 1 2 x 4 5 6 7 8 9\n"} {
		if _, err := ParsePerCPUTimes(bad); err == nil {
			t.Errorf("ParsePerCPUTimes(%q) took it", bad)
		}
	}
	all, err := ReadPerCPUTimes()
	if err != nil || len(all) == 0 {
		t.Fatalf("ReadPerCPUTimes: %d CPUs, %v", len(all), err)
	}
}

func TestReadCPUTimes(t *testing.T) {
	a, err := ReadCPUTimes()
	if err != nil {
		t.Fatal(err)
	}
	// Burn some CPU: the machine's busy time must not go backwards and
	// user time must grow (USER_HZ ticks are 10 ms).
	deadline := time.Now().Add(60 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
	}
	b, err := ReadCPUTimes()
	if err != nil {
		t.Fatal(err)
	}
	d := b.Sub(a)
	if d.User < 0 || d.System < 0 || d.SoftIRQ < 0 || d.User+d.Nice+d.System == 0 {
		t.Errorf("60 ms of spinning: CPU times moved by %+v", d)
	}
}

func TestReadReceived(t *testing.T) {
	const snmp = `Ip: Forwarding DefaultTTL InReceives InHdrErrors
Ip: 1 64 1200 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
Udp: 120 3 7 99 7 0
`
	const netstat = `TcpExt: SyncookiesSent
TcpExt: 0
IpExt: InNoRoutes InTruncatedPkts InMcastPkts OutMcastPkts InBcastPkts OutBcastPkts InOctets OutOctets
IpExt: 0 0 0 0 0 0 1800000 900
`
	r, err := parseReceived(ParseSNMP(snmp), ParseSNMP(netstat))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Received{IPPackets: 1200, IPOctets: 1800000, UDPDatagrams: 120}); r != want {
		t.Errorf("parseReceived = %+v, want %+v", r, want)
	}
	if d := r.Sub(Received{IPPackets: 200, IPOctets: 800000, UDPDatagrams: 20}); d != (Received{1000, 1000000, 100}) {
		t.Errorf("Sub = %+v", d)
	}
	if _, err := parseReceived(ParseSNMP(snmp), ParseSNMP("TcpExt: A\nTcpExt: 1\n")); err == nil {
		t.Error("parseReceived without IpExt took it")
	}
	if _, err := ReadReceived(); err != nil {
		t.Errorf("ReadReceived here: %v", err)
	}
}
