package testpmd_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/internal/lab/testpmd"
)

// What testpmd 22.11 prints for the commands the package reads.
const (
	portStats = `
  ######################## NIC statistics for port 0  ########################
  RX-packets: 123        RX-missed: 4          RX-bytes:  7872
  RX-errors: 5
  RX-nombuf:  6
  TX-packets: 45         TX-errors: 7          TX-bytes:  2880

  Throughput (since last show)
  Rx-pps:            9          Rx-bps:         4608
  Tx-pps:            1          Tx-bps:          512
  ############################################################################
`
	xstats = `###### NIC extended statistics for port 0
rx_good_packets: 123
tx_good_packets: 45
rx_q0_good_packets: 100
rx_q1_good_packets: 23
`
	forwardStats = `Telling cores to stop...
Waiting for lcores to finish...

  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 10             RX-dropped: 1             RX-total: 11
  TX-packets: 9              TX-dropped: 2             TX-total: 11
  ----------------------------------------------------------------------------

  ---------------------- Forward statistics for port 1  ----------------------
  RX-packets: 20             RX-dropped: 0             RX-total: 20
  TX-packets: 19             TX-dropped: 1             TX-total: 20
  ----------------------------------------------------------------------------

  +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++
  RX-packets: 30             RX-dropped: 1             RX-total: 31
  TX-packets: 28             TX-dropped: 3             TX-total: 31
  ++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++

Done.
`
)

// fakeTestpmd puts a dpdk-testpmd first on $PATH that plays testpmd's
// interactive prompt with the outputs above (SIGINT: the forward
// statistics, then death by SIGINT, as testpmd) and writes its arguments,
// one a line, to the file it returns.
func fakeTestpmd(t *testing.T) string {
	t.Helper()
	need.Tools(t, "bash", "stdbuf")
	dir := t.TempDir()
	for name, text := range map[string]string{"ports": portStats, "xstats": xstats, "fwd": forwardStats} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `#!/bin/bash
d=$(dirname "$0")
printf '%s\n' "$@" >"$d/args"
trap 'cat "$d/fwd"; trap - INT; kill -INT $$' INT
printf 'EAL: Detected 2 lcore(s)\nPort 0: 02:00:00:00:00:21\ntestpmd> '
while IFS= read -r line; do
	case $line in
	"show port stats 0") cat "$d/ports" ;;
	"show port xstats 0") cat "$d/xstats" ;;
	start) echo "io packet forwarding - ports=1" ;;
	stop) cat "$d/fwd" ;;
	quit) echo Bye...; exit 0 ;;
	*) echo "Bad arguments" ;;
	esac
	printf 'testpmd> '
done
`
	if err := os.WriteFile(filepath.Join(dir, testpmd.Binary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return filepath.Join(dir, "args")
}

func start(t *testing.T, c testpmd.Config) *testpmd.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := testpmd.Start(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// TestFakeSession drives a fake testpmd through a session: its command
// line from Config, each command's output up to the next prompt, the
// port's statistics, extended statistics and forward statistics parsed,
// and quit.
func TestFakeSession(t *testing.T) {
	args := fakeTestpmd(t)
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 0x21}
	var log bytes.Buffer
	p := start(t, testpmd.Config{Devices: []string{testpmd.VirtioUser("/run/p.sock", 2, mac, "mrg_rxbuf=0"), testpmd.AFPacket("w1", 0)},
		Forward: "txonly", Queues: 2, TxPkts: 1514, Burst: 16, Lcores: "2,3", EAL: []string{"--main-lcore=2"}, Args: []string{"--nb-cores=1"}, Log: &log})
	raw, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strings.Fields(string(raw)), " ")
	want := "--no-huge -m 512 --no-pci --no-shconf --no-telemetry --file-prefix=" + filepath.Base(p.RuntimeDir()) + " -l 2,3 " +
		"--vdev=net_virtio_user0,path=/run/p.sock,queues=2,mac=02:00:00:00:00:21,mrg_rxbuf=0 --vdev=net_af_packet0,iface=w1,qpairs=1 " +
		"--main-lcore=2 -- -i --total-num-mbufs=16384 --rxq=2 --txq=2 --forward-mode=txonly --txpkts=1514 --burst=16 --nb-cores=1"
	if got != want {
		t.Errorf("arguments:\n%s\nwant\n%s", got, want)
	}
	if out, err := p.Command("start"); err != nil || out != "io packet forwarding - ports=1\n" {
		t.Errorf("start: %q %v", out, err)
	}
	ps, err := p.PortStats(0)
	if err != nil || ps != (testpmd.PortStats{RxPackets: 123, RxMissed: 4, RxBytes: 7872, RxErrors: 5, RxNoMbuf: 6, TxPackets: 45, TxErrors: 7, TxBytes: 2880}) {
		t.Errorf("PortStats: %+v %v", ps, err)
	}
	if _, err := p.PortStats(1); err == nil {
		t.Error("PortStats of a port testpmd has not: no error")
	}
	xs, err := p.XStats(0)
	if err != nil || xs["rx_q1_good_packets"] != 23 || xs["tx_good_packets"] != 45 || len(xs) != 4 {
		t.Errorf("XStats: %v %v", xs, err)
	}
	fs, err := p.StopForwarding()
	if err != nil || len(fs) != 2 || fs[0] != (testpmd.ForwardStats{RxPackets: 10, RxDropped: 1, TxPackets: 9, TxDropped: 2}) ||
		fs[1] != (testpmd.ForwardStats{RxPackets: 20, TxPackets: 19, TxDropped: 1}) {
		t.Errorf("StopForwarding: %+v %v", fs, err)
	}
	if err := p.Quit(); err != nil || !strings.Contains(p.Output(), "Bye...") || !strings.Contains(log.String(), "Bye...") {
		t.Errorf("Quit: %v\n%s", err, p.Output())
	}
}

// TestFakeInterrupt: SIGINT makes testpmd print its forward statistics
// and die of the signal, which is no error; a command after it has
// exited says so.
func TestFakeInterrupt(t *testing.T) {
	fakeTestpmd(t)
	p := start(t, testpmd.Config{})
	out, err := p.Interrupt()
	if err != nil {
		t.Fatalf("Interrupt: %v\n%s", err, p.Output())
	}
	if fs, err := testpmd.ParseForwardStats(out); err != nil || len(fs) != 2 || fs[1].RxPackets != 20 {
		t.Errorf("after SIGINT: %+v %v", fs, err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed after Interrupt")
	}
	if _, err := p.Command("start"); err == nil {
		t.Error("a command to a testpmd that exited: no error")
	}
}

// TestNotInstalled: without dpdk-testpmd on $PATH, Find and Start say
// which package installs it.
func TestNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := testpmd.Find(); !errors.Is(err, testpmd.ErrNotInstalled) || !strings.Contains(err.Error(), "apt-get install dpdk-dev") {
		t.Errorf("Find: %v", err)
	}
	if _, err := testpmd.Start(context.Background(), testpmd.Config{}); !errors.Is(err, testpmd.ErrNotInstalled) {
		t.Errorf("Start: %v", err)
	}
}

// TestParseForwardStats: no block is an error; a block cut short ends
// the list.
func TestParseForwardStats(t *testing.T) {
	if _, err := testpmd.ParseForwardStats("Done.\n"); err == nil {
		t.Error("no forward statistics: no error")
	}
	cut := forwardStats[:strings.Index(forwardStats, "Forward statistics for port 1")+40]
	if fs, err := testpmd.ParseForwardStats(cut); err != nil || len(fs) != 1 {
		t.Errorf("second block cut short: %+v %v", fs, err)
	}
}
