package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// TestExplain checks the flag advice the CLI adds to the libraries' typed
// errors, and that it adds none to others.
func TestExplain(t *testing.T) {
	advice := func(err error, want string) { // want: the advice, at the end; "" for none
		t.Helper()
		got := explain(err)
		if !errors.Is(got, err) {
			t.Errorf("explain(%v) = %v, which does not wrap it", err, got)
		}
		if got.Error() != err.Error()+want {
			t.Errorf("explain(%q) = %q, want the error and %q", err, got, want)
		}
		if strings.Contains(err.Error(), "--") {
			t.Errorf("a library error names a flag: %q", err)
		}
	}
	advice(fmt.Errorf("tap: name %q is in use: %w", "lab0", tap.ErrNameInUse), " (choose another --tap or delete it)")
	advice(fmt.Errorf("tap: 4 queues: %w", tap.ErrNoMultiQueue), ": use --queues 1")
	advice(&tapport.Error{Kind: tapport.ErrNoTAP, Name: "tfw-no-tap0"}, " (no network namespace here has one: tapfwd run --tap tfw-no-tap0 makes it)")
	advice(&tapport.Error{Kind: tapport.ErrNoTAP, Netns: "lab", Name: "tfw-no-tap0"}, " (no network namespace here has one: tapfwd run --tap tfw-no-tap0 makes it)")
	advice(&tapport.Error{Kind: tapport.ErrNotTAP, Netns: "lab", Name: "w1"}, "")
	advice(errors.Join(&tapport.Error{Kind: tapport.ErrNoPort, Netns: "lab", Name: "tfwvm9"}), " (list them with: tapfwd vm-port list --tap-netns lab)")
	advice(&tapport.Error{Kind: tapport.ErrNoPort, Name: "tfwvm9"}, " (list them with: tapfwd vm-port list)")
	advice(&tapport.Error{Kind: tapport.ErrMACInUse, Name: "02:00:00:00:00:10"}, " (choose another --mac, or leave it out for a random one)")
	advice(&tapport.Error{Kind: tapport.ErrNameInUse, Name: "tfwvm0"}, ": choose another --name")
	advice(&tapport.Error{Kind: tapport.ErrNoMacvtap}, "")
	advice(fmt.Errorf("network namespace %q not found: %w", "x", netns.ErrNotFound), "")
	advice(errors.New("tap: something else"), "")
	if explain(nil) != nil {
		t.Error("explain(nil) is not nil")
	}
}

// TestExplainVhost: what --vhost-user can do about a socket path or its
// directory.
func TestExplainVhost(t *testing.T) {
	c, err := parseRun(strings.Fields("--nic w1 --tap lab0 --vm-ports 1 --vhost-user /x"), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: %q has 120 bytes, at most 101 fit here", vhostuser.ErrPathTooLong, "/x"), "(choose a shorter directory, or a shorter --tap)"},
		{fmt.Errorf("%w: /x exists and is a regular file", vhostuser.ErrNotSocket), "(remove it, or choose another directory)"},
		{fmt.Errorf("/x: %w", os.NewSyscallError("access", unix.EROFS)), "(the directory must be writable to tapfwd as it starts: choose another)"},
		{fmt.Errorf("listen: %w", os.NewSyscallError("bind", unix.EACCES)), "(the directory must be writable to tapfwd as it starts: choose another)"},
		{fmt.Errorf("vhostuser: socket directory: /x has mode 0777: group or others may write to it: %w", vhostuser.ErrUnsafeDir),
			"(the directory must be root's and writable by no one else, or others could take the guests' connections: chown root and chmod go-w it, or choose another)"},
		{errors.New("/x is not a directory"), ""},
	} {
		got := explainRun(&daemon.Error{Part: daemon.PartVhostDir, Err: tc.err}, c)
		if !errors.Is(got, tc.err) || got.Error() != strings.TrimSpace("--vhost-user: "+tc.err.Error()+" "+tc.want) {
			t.Errorf("explainRun(%q) = %q, want the error with --vhost-user and %q", tc.err, got, tc.want)
		}
	}
}

// TestExplainRun: a start failure names the flag of the part of the
// configuration that caused it, with the advice for it.
func TestExplainRun(t *testing.T) {
	c, err := parseRun(strings.Fields("--nic w1 --tap lab0 --tap-netns lab"), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	inUse := errors.New("address already in use")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&daemon.Error{Part: daemon.PartMetricsAddr, Err: inUse}, `--metrics-addr: address already in use (choose another address, or "" to disable metrics)`},
		{&daemon.Error{Part: daemon.PartMetricsAddr, Value: "127.0.0.1:9310", Err: fmt.Errorf("bind: %w, by pid 7 (tapfwd run)", unix.EADDRINUSE)},
			`--metrics-addr 127.0.0.1:9310: bind: address already in use, by pid 7 (tapfwd run) (choose another address, or "" to disable metrics: each tapfwd needs an address of its own`},
		{&daemon.Error{Part: daemon.PartUser, Value: "nobody", Err: inUse}, "--user nobody: address already in use"},
		{&daemon.Error{Part: daemon.PartReadyFd, Value: "3", Err: errors.New("not an open file descriptor")}, "--ready-fd 3: not an open file descriptor"},
		{&daemon.Error{Part: daemon.PartHostPort, Err: fmt.Errorf("hostport: lab0h: %w", tapport.ErrNameInUse)}, "--host-port: hostport: lab0h: port name in use (rename or remove that interface)"},
		{&daemon.Error{Part: daemon.PartNICNAPI, Err: fmt.Errorf("w1: %w", napi.ErrNoInstances)}, "--nic-napi-threaded: w1 has no NAPI instances (a veth has them only with GRO on: --nic-gro on)"},
		{&daemon.Error{Part: daemon.PartVhostDir, Err: fmt.Errorf("%w: /x exists", vhostuser.ErrNotSocket)}, "--vhost-user: not a socket"},
		{&daemon.Error{Part: daemon.PartDHCP, Err: inUse}, "--dhcp: address already in use"},
		{&daemon.Error{Part: daemon.PartTAPMTU, Err: errors.New("the TAP would take the NIC's MTU, 65536")}, "--tap-mtu: the TAP would take the NIC's MTU, 65536 (give --tap-mtu 65521 or less)"},
		{&daemon.Error{Part: daemon.PartCPUs, Value: "7", Err: errors.New(`"7" is not a CPU this process may use (allowed: 0-1)`)}, `--cpus 7: "7" is not a CPU this process may use (allowed: 0-1)`},
		{&daemon.Error{Part: daemon.PartVhostDir, Err: fmt.Errorf("vhost-user socket directory: /x has mode 0777: %w", vhostuser.ErrUnsafeDir)}, "--vhost-user: vhost-user socket directory: /x has mode 0777: unsafe directory (the directory must be root's and writable by no one else"},
		{&daemon.Error{Part: daemon.PartNICBackend, Value: "xdp", Err: fmt.Errorf("XDP socket: %w: socket: EAFNOSUPPORT", afxdp.ErrNotSupported)}, "--nic-backend xdp: XDP socket: AF_XDP sockets are not available in this kernel: socket: EAFNOSUPPORT (use --nic-backend packet, or a kernel built with CONFIG_XDP_SOCKETS"},
		{&daemon.Error{Part: daemon.PartTAPIO, Value: "uring", Err: fmt.Errorf("batched I/O on a TAP queue: %w: EPERM", tap.ErrNoURing)}, "--tap-io uring: batched I/O on a TAP queue: io_uring is unavailable: EPERM (--tap-io auto falls back to a system call per frame)"},
		{fmt.Errorf("tap: %w (%w)", tap.ErrPersistent, tap.ErrNameInUse), "(add --persist to attach to it, or remove it with: tapfwd down --tap lab0 --tap-netns lab)"},
		{fmt.Errorf("tap: %w", tap.ErrMismatch), "(start with the settings it was made with, or remove it with: tapfwd down --tap lab0 --tap-netns lab)"},
		{fmt.Errorf("tap: %w", tap.ErrAttached), "(is another tapfwd running on it?)"},
		{fmt.Errorf("tap: %w", tap.ErrOwned), "(tapfwd does not attach to it: remove it with tapfwd down --tap lab0 --tap-netns lab, and let tapfwd make it)"},
		{fmt.Errorf("tap: %w", tap.ErrNameInUse), "(choose another --tap or delete it)"},
	} {
		got := explainRun(tc.err, c)
		if !strings.Contains(got.Error(), tc.want) || strings.Contains(got.Error(), "\n") {
			t.Errorf("explainRun(%q) = %q, want one line with %q", tc.err, got, tc.want)
		}
	}
	// A VM port's error from the start is not vm-port's to advise on.
	if err := (&tapport.Error{Kind: tapport.ErrMACInUse, Name: "02:00:00:00:00:10"}); explainRun(err, c) != error(err) {
		t.Errorf("explainRun added advice to %v", err)
	}
	for p := daemon.PartUser; p <= daemon.PartABDelay; p++ {
		if runFlag[p] == "" || p.String() == "" {
			t.Errorf("part %d (%q) has no flag", p, p)
		}
	}
}

// TestExplainRule: a rule of the Config broken is its part's flag and
// value, the rule, and the flag of the other part it names; the advice
// for a machine's refusal of the same part is not added.
func TestExplainRule(t *testing.T) {
	c := &daemon.Config{}
	for _, tc := range []struct {
		change func(*daemon.Config)
		want   string
	}{
		{func(c *daemon.Config) { c.Workers.GROWindow = 50 * time.Microsecond }, "--gro-window 50µs: waits for segments to merge: it needs GRO (--gro)"},
		{func(c *daemon.Config) { c.TAP.MTU = 67 }, "--tap-mtu 67: want 68 to 65521 bytes, or 0 for the NIC's"},
		{func(c *daemon.Config) { c.Metrics = &daemon.Metrics{Addr: "9310"} }, "--metrics-addr 9310: want HOST:PORT, e.g. 127.0.0.1:9310 (port 0: any free one)"},
		{func(c *daemon.Config) { c.TAP.Name = "lab-name-16bytes" }, `--tap: "lab-name-16bytes" has 16 bytes: an interface name has at most 15`},
	} {
		*c = daemon.Config{NIC: daemon.NIC{Name: "eth1"}}
		tc.change(c)
		err := c.Validate()
		if got := explainRun(err, c); got == nil || got.Error() != tc.want || !errors.Is(got, daemon.ErrInvalid) {
			t.Errorf("explainRun(%v) = %v, want %q", err, got, tc.want)
		}
	}
}
