package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/syncbuf"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
)

// bedConfig is a forwarder between the bed's NIC and a TAP in its lab.
func bedConfig(bed *testbed.Bed, log *syncbuf.Buffer) Config {
	return Config{
		TAP:     tap.Config{Name: bed.LabIf, Netns: bed.LabNS, Addr: bed.LabAddr, NAPI: tap.Auto, VnetHdr: tap.Auto},
		NIC:     NIC{Name: bed.NIC},
		Workers: Workers{CPUs: []int{}, GRO: true},
		Log:     Log{Logger: slog.New(slog.NewTextHandler(log, nil))},
	}
}

// open opens c in the bed's fwd namespace, where its NIC is.
func open(t *testing.T, bed *testbed.Bed, c Config) (*Daemon, error) {
	t.Helper()
	var d *Daemon
	err := bed.Do(bed.FwdNS, func() error {
		var err error
		d, err = Open(c)
		return err
	})
	return d, err
}

// tapGone says whether the bed's lab has no TAP (and so no VM port) left.
func tapGone(t *testing.T, bed *testbed.Bed) bool {
	t.Helper()
	ns, err := netns.Open(bed.LabNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	_, err = ns.Link(bed.LabIf)
	return errors.Is(err, unix.ENODEV)
}

// TestDaemon starts a forwarder from a Config alone, without a command
// line: the lab answers through it, its status and /status say what it
// runs, and once Run ends Close leaves nothing behind.
func TestDaemon(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	var log syncbuf.Buffer
	c := bedConfig(bed, &log)
	c.VMPorts.N = 1
	c.Metrics = &Metrics{Addr: "127.0.0.1:0"}
	d, err := open(t, bed, c)
	if err != nil {
		t.Fatalf("Open: %v\n%s", err, log.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop := sync.OnceValue(func() error {
		cancel()
		err := <-done
		d.Close()
		return err
	})
	defer stop()
	if err := bed.WaitLabReachable(ctx, 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	st := d.Status()
	if st.TAP.Name != bed.LabIf || st.TAP.Netns != bed.LabNS || st.NIC != bed.NIC || len(st.Queues) != 1 ||
		len(st.VMPorts) != 1 || st.VMPorts[0].Type != "macvtap" || st.VMPorts[0].Origin != OriginRun || st.Queues[0].NICToTAP.RxPackets == 0 || st.Queues[0].TAPToNIC.TxPackets == 0 {
		t.Errorf("status after pings: %+v", st)
	}
	key, err := machineKey()
	if err != nil {
		t.Fatal(err)
	}
	if want := tap.StableMAC(key, bed.LabNS, bed.LabIf).String(); st.TAP.MAC != want {
		t.Errorf("the TAP's MAC is %s, want %s, the one its name has on this machine", st.TAP.MAC, want)
	}
	served := fetchStatus(t, bed, d.MetricsAddr().String())
	if served.TAP != st.TAP || served.Schema != StatusSchema || len(served.VMPorts) != 1 || served.VMPorts[0].Dev != st.VMPorts[0].Dev {
		t.Errorf("/status %+v, want what Status says: %+v", served, st)
	}

	if err := stop(); err != nil {
		t.Errorf("Run ended by its context: %v", err)
	}
	for _, want := range []string{"msg=forwarding", `msg="ready: every worker runs"`, `msg="queue totals"`, "msg=vm-port"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, log.String())
		}
	}
	if !tapGone(t, bed) {
		t.Error("the TAP is still there after Close")
	}
}

// fetchStatus gets /status from addr in the bed's fwd namespace (the
// connection is made there; http.Get would dial from another thread).
func fetchStatus(t *testing.T, bed *testbed.Bed, addr string) Status {
	t.Helper()
	var conn net.Conn
	if err := bed.Do(bed.FwdNS, func() (err error) {
		conn, err = net.Dial("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /status HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/status: %s, %v", resp.Status, err)
	}
	return st
}

// TestOpenFails: a step that fails undoes the steps before it (the TAP
// made, the VM port added), and says which part of the Config failed;
// what the machine refuses before anything is made fails with nothing
// made.
func TestOpenFails(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	var log syncbuf.Buffer
	c := bedConfig(bed, &log)
	c.VMPorts.N = 1
	// An interface where the host port goes: the start fails after the
	// TAP and the VM port are made.
	if _, err := bed.Run(context.Background(), bed.LabNS, "ip", "link", "add", tapport.HostName(bed.LabIf), "type", "veth", "peer", "name", tapport.HostName(bed.LabIf)+"p"); err != nil {
		t.Fatal(err)
	}
	c.Host = &HostPort{}
	_, err := open(t, bed, c)
	var de *Error
	if !errors.As(err, &de) || de.Part != PartHostPort || !errors.Is(err, tapport.ErrNameInUse) {
		t.Errorf("Open: %v, want an *Error about the host port", err)
	}
	if !strings.Contains(log.String(), "msg=vm-port") || !tapGone(t, bed) {
		t.Errorf("a failed Open left the TAP it made, or made none:\n%s", log.String())
	}
	c.Host = nil
	for _, tc := range []struct {
		change func(*Config)
		part   Part
		want   string
	}{
		{func(c *Config) { c.Metrics = &Metrics{Addr: "198.18.0.1:1"} }, PartMetricsAddr, "metrics address 198.18.0.1:1: bind: cannot assign requested address"},
		{func(c *Config) { c.VMPorts.Owner = "tfw-no-such-user" }, PartPortOwner, `no user "tfw-no-such-user"`},
		{func(c *Config) { c.Workers.CPUs = []int{1023} }, PartCPUs, `worker CPUs 1023: "1023" is not a CPU this process may use`},
		{func(c *Config) { c.TAP.NAPISettings.Threaded, c.NAPI = true, &NAPI{TAPCPU: 1023, NICCPU: -1} }, PartTAPNAPICPU, "CPU 1023 is not online"},
		{func(c *Config) { c.NAPI = &NAPI{TAPCPU: -1, NICMode: napi.ThreadedEnabled, NICCPU: -1} }, PartNICNAPI, "no NAPI instances"},
		{func(c *Config) {
			c.NIC.Backend, c.Workers.Poll, c.Workers.KernelPoll = BackendXDP, PollKernel, KernelPoll{OwnCPU: true, CPU: 1023}
		}, PartBusyPollCPU, `busy poll CPU 1023: "1023" is not a CPU this process may use`},
	} {
		log = syncbuf.Buffer{}
		c := bedConfig(bed, &log)
		c.VMPorts.N = 1
		tc.change(&c)
		_, err := open(t, bed, c)
		if !errors.As(err, &de) || de.Part != tc.part || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open: %v, want an *Error about the %s saying %q", err, tc.part, tc.want)
		}
		if strings.Contains(log.String(), "msg=vm-port") {
			t.Errorf("%s: made the TAP and a VM port before failing:\n%s", tc.part, log.String())
		}
	}
}
