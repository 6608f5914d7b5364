package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/tap"
)

// TestParseRunDefaults: the configuration of a bare `tapfwd run --nic x`.
func TestParseRunDefaults(t *testing.T) {
	c, err := parseRun([]string{"--nic", "eth1"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := &daemon.Config{
		NIC: daemon.NIC{Name: "eth1"}, TAP: tap.Config{Queues: 1, NAPI: tap.Auto, VnetHdr: tap.Auto},
		Workers: daemon.Workers{GRO: true, Batch: 64, FollowLoad: true}, Metrics: &daemon.Metrics{Addr: "127.0.0.1:9310"},
	}
	if !logsAs(c, slog.LevelInfo, false) || !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

// logsAs says whether c's logger logs from level up, as JSON or text, and
// takes the logger out of c, so that the rest compares.
func logsAs(c *daemon.Config, level slog.Level, asJSON bool) bool {
	l := c.Log.Logger
	c.Log.Logger = nil
	_, isJSON := l.Handler().(*slog.JSONHandler)
	return l.Enabled(context.Background(), level) && !l.Enabled(context.Background(), level-1) && isJSON == asJSON
}

// TestParseRunValues: each flag lands where the wiring reads it.
func TestParseRunValues(t *testing.T) {
	c, err := parseRun(strings.Fields("--nic eth1 --tap lab0 --queues 4 --cpus 2-3 --follow-load=false --napi on --vnet-hdr off "+
		"--tap-netns lab --tap-addr 198.18.1.2/24 --tap-mtu 1400 --tap-mac 02:00:00:00:00:01 "+
		"--tap-napi-threaded --tap-gro-flush-timeout 20us --tap-napi-defer-hard-irqs 2 --tap-napi-cpu 1 "+
		"--nic-napi-threaded enabled --nic-napi-cpu 0 --poll busy --gro=false --batch 32 --promisc "+
		"--wait-nic --vm-ports 3 --metrics-addr :9999 --pprof --stats-interval 10s --log-level debug "+
		"--persist --vm-port-owner qemu:kvm --ready-fd 3 --log-format json --tap-io uring --nic-backend xdp --xdp-mode generic --nic-gro on"), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := &daemon.Config{
		NIC: daemon.NIC{Name: "eth1", Promisc: true, Wait: true, Backend: daemon.BackendXDP, XDPMode: afxdp.ModeGeneric, GRO: daemon.ToggleOn},
		TAP: tap.Config{Name: "lab0", Queues: 4, NAPI: tap.On, VnetHdr: tap.Off, MTU: 1400,
			MAC: []byte{2, 0, 0, 0, 0, 1}, Netns: "lab", Addr: netip.MustParsePrefix("198.18.1.2/24"),
			NAPISettings: tap.NAPISettings{Threaded: true, GROFlushTimeout: 20 * time.Microsecond, DeferHardIRQs: 2},
			Persist:      true},
		Workers: daemon.Workers{CPUs: []int{2, 3}, Poll: daemon.PollBusy, GRO: false, Batch: 32, TAPIO: daemon.TAPIOURing},
		NAPI:    &daemon.NAPI{TAPCPU: 1, NICMode: napi.ThreadedEnabled, NICCPU: 0},
		VMPorts: daemon.VMPorts{N: 3, Owner: "qemu:kvm"},
		Metrics: &daemon.Metrics{Addr: ":9999", PProf: true},
		Log:     daemon.Log{StatsEvery: 10 * time.Second},
		Notify:  daemon.Notify{ReadyFd: 3},
	}
	if !logsAs(c, slog.LevelDebug, true) || !reflect.DeepEqual(c, want) {
		t.Errorf("values:\n got %+v\nwant %+v", c, want)
	}
	if c, _ := parseRun([]string{"--nic", "x", "--gro-window", "50us", "--tap-io", "auto"}, io.Discard, io.Discard); c.Workers.GROWindow != 50*time.Microsecond || c.Workers.TAPIO != daemon.TAPIOAuto {
		t.Errorf("--gro-window 50us --tap-io auto: %v, %v", c.Workers.GROWindow, c.Workers.TAPIO)
	}
	if c, _ := parseRun([]string{"--nic", "x"}, io.Discard, io.Discard); c.Workers.GROWindow != 0 || c.Workers.TAPIO != daemon.TAPIOSyscall {
		t.Errorf("defaults: --gro-window %v, --tap-io %v; want 0, syscall", c.Workers.GROWindow, c.Workers.TAPIO)
	}
	if c, _ := parseRun([]string{"--nic", "x", "--cpus", "none"}, io.Discard, io.Discard); c.Workers.CPUs == nil || len(c.Workers.CPUs) != 0 {
		t.Errorf("--cpus none: %v, want an empty list", c.Workers.CPUs)
	}
	if c, _ := parseRun([]string{"--nic", "x", "--user", "nobody"}, io.Discard, io.Discard); c.Privileges.User != "nobody" {
		t.Errorf("--user: %q", c.Privileges.User)
	}
	for _, args := range []string{"--nic x --strict-mac", "--nic x --vm-ports 2 --strict-mac", "--nic x --tap lab0 --vm-ports 2 --vhost-user /run/v --strict-mac"} {
		if c, err := parseRun(strings.Fields(args), io.Discard, io.Discard); err != nil || !c.Workers.StrictMAC {
			t.Errorf("%s: --strict-mac not set (%v)", args, err)
		}
	}
	if c, _ := parseRun([]string{"--nic", "x", "--metrics-addr", "", "--pprof"}, io.Discard, io.Discard); c.Metrics != nil {
		t.Errorf("--metrics-addr \"\": %+v, want no metrics", c.Metrics)
	}
	c, err = parseRun(strings.Fields("--nic x --nic-napi-threaded busy-poll"), io.Discard, io.Discard)
	if err != nil || *c.NAPI != (daemon.NAPI{TAPCPU: -1, NICMode: napi.ThreadedBusyPoll, NICCPU: -1}) {
		t.Errorf("--nic-napi-threaded alone: %+v, %v", c.NAPI, err)
	}
	c, err = parseRun(strings.Fields("--nic x --guest-vlans deny --l2-control drop --l2-control-allow 0e,0x02"), io.Discard, io.Discard)
	if err != nil || c.Workers.L2 != (forward.L2Policy{DenyVLANs: true, DropControl: true, ControlAllow: 1<<0x0e | 1<<0x02}) {
		t.Errorf("L2 policy: %+v, %v", c.Workers.L2, err)
	}
}

// TestParseRunKernelPoll: --poll kernel's defaults, and its tuning flags
// landing in Workers.KernelPoll.
func TestParseRunKernelPoll(t *testing.T) {
	for _, tc := range []struct {
		args string
		want daemon.KernelPoll
	}{
		{"", daemon.KernelPoll{DeferHardIRQs: 2, GROFlushTimeout: 200 * time.Microsecond, BusyPoll: 200 * time.Microsecond}},
		{"--nic-napi-defer-hard-irqs 0 --nic-gro-flush-timeout 0 --busy-poll-time 1us", daemon.KernelPoll{BusyPoll: time.Microsecond}},
		{"--nic-napi-defer-hard-irqs 10 --nic-gro-flush-timeout 1ms", daemon.KernelPoll{DeferHardIRQs: 10, GROFlushTimeout: time.Millisecond, BusyPoll: 200 * time.Microsecond}},
		{"--busy-poll-cpu 1", daemon.KernelPoll{DeferHardIRQs: 2, GROFlushTimeout: 200 * time.Microsecond, OwnCPU: true, CPU: 1}},
	} {
		c, err := parseRun(strings.Fields("--nic x --nic-backend xdp --poll kernel "+tc.args), io.Discard, io.Discard)
		if err != nil || c.Workers.KernelPoll != tc.want {
			t.Errorf("--poll kernel %s: %+v, %v; want %+v", tc.args, c.Workers.KernelPoll, err, tc.want)
		}
	}
}

// runRules are command lines parseRun refuses, each with what its error
// says ("usage" for a usage error without more).
var runRules = []struct {
	args string
	want string
}{
	{"", "usage"},
	{"--nic x extra", "usage"},
	{"--nic x --queues -1", "--queues -1: want 1 to 256"},
	{"--nic x --queues 257", "--queues 257: want 1 to 256"},
	{"--nic x --batch -1", "--batch -1: want 1 to 1024"},
	{"--nic x --batch 1025", "--batch 1025: want 1 to 1024"},
	{"--nic x --vm-ports -1", "--vm-ports -1: want 0 to 64"},
	{"--nic x --vm-ports 65", "--vm-ports 65: want 0 to 64"},
	{"--nic x --napi maybe", "--napi maybe: want auto, on or off"},
	{"--nic x --vnet-hdr yes", "--vnet-hdr yes: want auto, on or off"},
	{"--nic x --tap-addr 198.18.0.1", "--tap-addr"},
	{"--nic x --tap-mac zz", "--tap-mac"},
	{"--nic x --tap-gro-flush-timeout -1s", "must not be negative"},
	{"--nic x --tap-napi-defer-hard-irqs -1", "must not be negative"},
	{"--nic x --napi off --tap-napi-threaded", "--tap-napi-threaded: acts on the TAP's NAPI: it needs TAP NAPI auto or on (--napi)"},
	{"--nic x --napi off --tap-gro-flush-timeout 20us", "--tap-gro-flush-timeout: acts on the TAP's NAPI: it needs TAP NAPI auto or on (--napi)"},
	{"--nic x --tap-napi-cpu 0", "--tap-napi-cpu 0: pins the TAP's NAPI kthreads: it needs threaded TAP NAPI (--tap-napi-threaded)"},
	{"--nic x --nic-napi-cpu 0", "--nic-napi-cpu 0: pins the NIC's NAPI kthreads: it needs the NIC's NAPI threaded (--nic-napi-threaded)"},
	{"--nic x --tap-napi-threaded --tap-napi-cpu 1024", "--tap-napi-cpu 1024: want a CPU number, 0 to 1023, or -1 for none"},
	{"--nic x --nic-napi-threaded enabled --nic-napi-cpu -2", "--nic-napi-cpu -2: want a CPU number, 0 to 1023, or -1 for none"},
	{"--nic x --nic-napi-threaded disabled", "--nic-napi-threaded disabled: want enabled or busy-poll"},
	{"--nic x --nic-napi-threaded fast", "--nic-napi-threaded fast: want enabled or busy-poll"},
	{"--nic x --poll spin", "--poll spin: want"},
	{"--nic x --nic-backend dpdk", "--nic-backend dpdk: want"},
	{"--nic x --xdp-mode offload", "--xdp-mode offload: want"},
	{"--nic x --poll kernel", "--poll kernel: busy-polls the NIC queue's NAPI from AF_XDP sockets: it needs the xdp NIC backend (--nic-backend)"},
	{"--nic x --nic-backend xdp --poll kernel --nic-napi-defer-hard-irqs -1", "--nic-napi-defer-hard-irqs -1: want a whole number, 0 or more"},
	{"--nic x --nic-backend xdp --poll kernel --nic-napi-defer-hard-irqs 2147483648", "--nic-napi-defer-hard-irqs 2147483648: want 0 to"},
	{"--nic x --nic-backend xdp --poll kernel --nic-gro-flush-timeout -1us", "--nic-gro-flush-timeout -1µs: want 0 to 10ms"},
	{"--nic x --nic-backend xdp --poll kernel --nic-gro-flush-timeout 11ms", "--nic-gro-flush-timeout 11ms: want 0 to 10ms"},
	{"--nic x --nic-backend xdp --poll kernel --nic-napi-defer-hard-irqs 4294967296", "--nic-napi-defer-hard-irqs 4294967295: want 0 to"},
	{"--nic x --nic-backend xdp --poll kernel --nic-gro-flush-timeout 0", "--nic-napi-defer-hard-irqs 2: needs a NIC GRO flush timeout above 0: the kernel defers only with that timer armed (--nic-gro-flush-timeout)"},
	{"--nic x --nic-backend xdp --nic-gro-flush-timeout 100us", "tune --poll kernel: give --poll kernel too"},
	{"--nic x --nic-napi-defer-hard-irqs 2", "tune --poll kernel: give --poll kernel too"},
	{"--nic x --busy-poll-time 1ms", "tune --poll kernel: give --poll kernel too"},
	{"--nic x --busy-poll-cpu 1", "tune --poll kernel: give --poll kernel too"},
	{"--nic x --nic-backend xdp --poll kernel --busy-poll-cpu -2", "--busy-poll-cpu -2: want a CPU number, 0 to 1023"},
	{"--nic x --nic-backend xdp --poll kernel --busy-poll-cpu 1024", "--busy-poll-cpu 1024: want a CPU number"},
	{"--nic x --nic-backend xdp --poll kernel --busy-poll-cpu 1 --busy-poll-time 1ms", "with --busy-poll-cpu the workers do not busy-poll"},
	{"--nic x --nic-backend xdp --poll kernel --busy-poll-time -1us", "--busy-poll-time -1µs: want 1µs to 10ms (0: 200µs)"},
	{"--nic x --nic-backend xdp --poll kernel --busy-poll-time 20ms", "--busy-poll-time 20ms: want 1µs to 10ms"},
	{"--nic x --nic-backend xdp --poll kernel --user nobody", "--poll kernel: sets the NIC's NAPI instances and restores them at exit, which needs CAP_NET_ADMIN: it cannot be combined with a privilege drop (--user)"},
	{"--nic x --tap-io mmap", "--tap-io mmap: want syscall, uring or auto"},
	{"--nic x --gro-window 2ms", "--gro-window 2ms: want 0 to 1ms"},
	{"--nic x --gro-window -1us", "--gro-window -1µs: want 0 to 1ms"},
	{"--nic x --gro=false --gro-window 50us", "--gro-window 50µs: waits for segments to merge: it needs GRO (--gro)"},
	{"--nic x --user nobody --wait-nic", "--wait-nic: reopens packet sockets, which needs CAP_NET_RAW: it cannot be combined with a privilege drop (--user)"},
	{"--nic x --user nobody --nic-napi-threaded enabled", "--nic-napi-threaded enabled: is restored at exit, which needs CAP_NET_ADMIN: it cannot be combined with a privilege drop (--user)"},
	{"--nic x --user nobody --nic-gro off", "--nic-gro off: is restored at exit, which needs CAP_NET_ADMIN: it cannot be combined with a privilege drop (--user)"},
	{"--nic x --nic-gro yes", "--nic-gro yes: want auto, on or off"},
	{"--nic x --cpus 1-0", "bad CPU range"},
	{"--nic x --cpus a", "--cpus"},
	{"--nic x --log-level loud", "--log-level loud: want debug, info, warn or error"},
	{"--nic x --persist", "--persist: needs the TAP's name: a later run finds the TAP by it (--tap)"},
	{"--nic x --log-format yaml", "--log-format yaml: want text or json"},
	{"--nic x --tap x", "--tap x: names the NIC: the TAP needs a name of its own (--nic)"},
	{"--nic x --tap lab-with-a-long-name", `--tap: "lab-with-a-long-name" has 20 bytes: an interface name has at most 15`},
	{"--nic x --tap a/b", `--tap: "a/b" is no interface name`},
	{"--nic nic-with-a-long-name", `--nic: "nic-with-a-long-name" has 20 bytes: an interface name has at most 15`},
	{"--nic x --tap-mtu -1", "--tap-mtu -1: want 68 to 65521 bytes, or 0 for the NIC's"},
	{"--nic x --stats-interval 1ns", "--stats-interval 1ns: want at least 1s"},
	{"--nic x --tap-netns ../etc", "--tap-netns ../etc: bad network namespace name"},
	{"--nic x --tap-netns a/b", "--tap-netns a/b: bad network namespace name"},
	{"--nic x --queues 256 --batch 1024", "would take 32.0 GiB of frame buffers"},
	{"--nic x --guest-vlans maybe", "--guest-vlans maybe: want allow or deny"},
	{"--nic x --l2-control block", "--l2-control block: want forward or drop"},
	{"--nic x --l2-control-allow 0e", "--l2-control-allow: lists exceptions to dropping L2 control frames, which are forwarded (--l2-control)"},
	{"--nic x --l2-control drop --l2-control-allow 10", "not the last byte of a reserved address"},
	{"--nic x --vm-port-owner nobody", "--vm-port-owner nobody: owns the VM ports' nodes: it needs VM ports (--vm-ports)"},
	{"--nic x --ready-fd -2", "--ready-fd -2"},
	{"--nic x --ready-fd 0", "--ready-fd 0: want a file descriptor number other than stdin's"},
	{"--nic x --config /nonexistent/tapfwd.conf", "--config: open /nonexistent/tapfwd.conf"},
	{"--nic x --metrics-addr 9310", "--metrics-addr 9310: want HOST:PORT"},
	{"--nic x --metrics-addr :http", "--metrics-addr :http: want HOST:PORT"},
	{"--nic x --tap-mtu 67", "--tap-mtu 67: want 68 to 65521 bytes"},
	{"--nic x --tap-mtu 65522", "--tap-mtu 65522: want 68 to 65521 bytes"},
	{"--nic x --tap-mac 01:00:5e:00:00:01", "--tap-mac 01:00:5e:00:00:01: a multicast address"},
	{"--nic x --tap-mac 00:00:00:00:00:00", "--tap-mac 00:00:00:00:00:00: all zeros"},
	{"--nic x --tap-addr 198.18.1.2", "--tap-addr 198.18.1.2: want the address with its prefix length, e.g. 198.18.1.2/24"},
	{"--nic x --tap-addr 2001:db8::2", "--tap-addr 2001:db8::2: want the address with its prefix length, e.g. 2001:db8::2/64"},
	{"--nic x --tap-addr lab", "--tap-addr lab: want an IP address with its prefix length"},
	{"--nic x --tap-addr 198.18.1.2/24 --dhcp 198.18.1.100-198.18.1.150", "--dhcp serves the guests from the host's port on the segment: add --host-port"},
	{"--nic x --host-port --dhcp 198.18.1.100-198.18.1.150", "--dhcp 198.18.1.100-198.18.1.150: needs the host's address, in the subnet of the range (--tap-addr)"},
	{"--nic x --host-port --tap-addr 198.18.1.2/24 --dhcp 198.18.1.100", "--dhcp 198.18.1.100: DHCP range \"198.18.1.100\": want FIRST-LAST"},
	{"--nic x --host-port --tap-addr 198.18.1.2/24 --dhcp 198.18.2.100-198.18.2.150", "--dhcp 198.18.2.100-198.18.2.150: DHCP range: 198.18.2.100 is outside the host's subnet 198.18.1.0/24 (--tap-addr)"},
	{"--nic x --host-port --tap-addr 198.18.1.2/24 --dhcp 198.18.1.1-198.18.1.9", "takes the host's own address 198.18.1.2"},
	{"--nic x --host-port --tap-addr 2001:db8::2/64 --dhcp 198.18.1.100-198.18.1.150", "is not IPv4"},
	{"--nic x --tap lab,eth0 --host-port --tap-addr 198.18.1.2/24 --dhcp 198.18.1.100-198.18.1.150",
		`--dhcp: DHCP interface name "lab,eth0h": a name dnsmasq cannot take (it splits its interface list at commas and reads '*' as a wildcard): want ASCII letters, digits, '.', '-' and '_': the host port is named after the TAP (--tap)`},
	{"--nic x --tap lab0 --vhost-user /run/v", "--vhost-user: makes the VM ports vhost-user sockets: it needs VM ports (--vm-ports)"},
	{"--nic x --vm-ports 1 --vhost-user /run/v", "--vhost-user: needs the TAP's name: the sockets and the guests' MACs are named after the TAP, so that a restart finds them again (--tap)"},
	{"--nic x --tap lab0 --vm-ports 1 --vhost-user /run/v --wait-nic", "--wait-nic: reopens the queues' packet sockets, not those of the vhost-user ports: it cannot be combined with vhost-user VM ports (--vhost-user)"},
	{"--nic x --tap lab0 --vm-ports 1 --vhost-user /run/v --vm-port-queues 65", "--vm-port-queues 65: want 1 to 64"},
	{"--nic x --tap lab0 --vm-ports 1 --vhost-user /run/v --vm-port-queues -1", "--vm-port-queues -1: want 1 to 64"},
}

// TestParseRunRules: every rule parseRun applies, each with the one-line
// error naming the flag, in the user's words.
func TestParseRunRules(t *testing.T) {
	for _, tc := range runRules {
		c, err := parseRun(strings.Fields(tc.args), io.Discard, io.Discard)
		switch {
		case err == nil:
			t.Errorf("%q: accepted (%+v), want %q", tc.args, c, tc.want)
		case tc.want == "usage":
			if !errors.Is(err, cliflag.ErrUsage) {
				t.Errorf("%q: %v, want a usage error", tc.args, err)
			}
		case !strings.Contains(err.Error(), tc.want) || clitest.Flaw(err.Error()) != "":
			t.Errorf("%q: %q, want one line in the user's words containing %q", tc.args, err, tc.want)
		}
	}
}

// TestParseRunHostPort: --host-port takes --tap-addr off the TAP onto the
// host port; --dhcp needs both and a range in the host's subnet.
func TestParseRunHostPort(t *testing.T) {
	c, err := parseRun(strings.Fields("--nic x --tap lab0 --tap-addr 198.18.1.2/24 --host-port --dhcp 198.18.1.100-198.18.1.150 --strict-mac"), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := daemon.HostPort{Addr: netip.MustParsePrefix("198.18.1.2/24"),
		DHCP: &daemon.DHCPRange{First: netip.MustParseAddr("198.18.1.100"), Last: netip.MustParseAddr("198.18.1.150")}}
	if c.Host == nil || !reflect.DeepEqual(*c.Host, want) || c.TAP.Addr.IsValid() || !c.Workers.StrictMAC {
		t.Errorf("host port: %+v", c)
	}
	if c, err := parseRun(strings.Fields("--nic x --tap-addr 198.18.1.2/24"), io.Discard, io.Discard); err != nil || c.Host != nil || !c.TAP.Addr.IsValid() {
		t.Errorf("without --host-port the address stays on the TAP: %+v, %v", c, err)
	}
	if c, err := parseRun(strings.Fields("--nic x --host-port"), io.Discard, io.Discard); err != nil || c.Host == nil || c.Host.Addr.IsValid() || c.Host.DHCP != nil {
		t.Errorf("--host-port without an address: %+v, %v", c, err)
	}
}

// TestParseRunVhostUser: --vhost-user makes the --vm-ports ports vhost-user
// sockets, needs --tap and --vm-ports, refuses --wait-nic, and comes from
// the config file too; the directory is made absolute.
func TestParseRunVhostUser(t *testing.T) {
	c, err := parseRun(strings.Fields("--nic x --tap lab0 --vm-ports 2 --vhost-user /run/tapfwd/vhost"), io.Discard, io.Discard)
	if err != nil || c.VMPorts != (daemon.VMPorts{N: 2, VhostDir: "/run/tapfwd/vhost"}) {
		t.Errorf("--vhost-user: %+v, %v", c, err)
	}
	c, err = parseRun(strings.Fields("--nic x --tap lab0 --vm-ports 2 --vm-port-queues 4 --vhost-user /run/v"), io.Discard, io.Discard)
	if err != nil || c.VMPorts.Queues != 4 {
		t.Errorf("--vm-port-queues 4: %+v, %v", c.VMPorts, err)
	}
	wd, _ := os.Getwd()
	if c, err := parseRun(strings.Fields("--nic x --tap lab0 --vm-ports 1 --vhost-user vhu"), io.Discard, io.Discard); err != nil || c.VMPorts.VhostDir != filepath.Join(wd, "vhu") {
		t.Errorf("a relative --vhost-user: %+v, %v", c, err)
	}
	conf := filepath.Join(t.TempDir(), "lab.conf")
	os.WriteFile(conf, []byte("tap = lab0\nvm-ports = 1\nvhost-user = /run/tapfwd/vhost\n"), 0o600)
	if c, err := parseRun([]string{"--nic", "x", "--config", conf}, io.Discard, io.Discard); err != nil || c.VMPorts.VhostDir != "/run/tapfwd/vhost" {
		t.Errorf("vhost-user from the config file: %+v, %v", c, err)
	}
	var help strings.Builder
	parseRun([]string{"-h"}, &help, io.Discard)
	if !strings.Contains(help.String(), "-vhost-user") || !strings.Contains(help.String(), "vhost-user sockets") {
		t.Errorf("run -h lacks --vhost-user:\n%s", help.String())
	}
}

// TestParseRunAB: the hidden A/B flags land in Config.AB, with the TAP's
// NAPI settings when an arm has NAPI; the help does not list them; what
// they cannot be given with is refused.
func TestParseRunAB(t *testing.T) {
	c, err := parseRun(strings.Fields("--nic x --ab-control /run/ab --tap-napi-threaded --tap-napi-cpu 1"), io.Discard, io.Discard)
	if err != nil || *c.AB != (daemon.AB{Control: "/run/ab", NAPI: [2]bool{false, true}, Delay: 10 * time.Microsecond}) || !c.TAP.NAPISettings.Threaded {
		t.Fatalf("--ab-control alone: %+v, %v", c.AB, err)
	}
	c, err = parseRun(strings.Fields("--nic x --ab-control /run/ab --ab-napi on,off --ab-delay 1us"), io.Discard, io.Discard)
	if err != nil || *c.AB != (daemon.AB{Control: "/run/ab", NAPI: [2]bool{true, false}, Delay: time.Microsecond}) {
		t.Errorf("--ab-napi on,off --ab-delay 1us: %+v, %v", c.AB, err)
	}
	if c, _ := parseRun([]string{"--nic", "x"}, io.Discard, io.Discard); c.AB != nil {
		t.Errorf("A/B mode without --ab-control: %+v", c.AB)
	}
	var help strings.Builder
	parseRun([]string{"--help"}, &help, io.Discard)
	if strings.Contains(help.String(), "--ab-") || !strings.Contains(help.String(), "--tap-napi-threaded") {
		t.Errorf("run --help lists a hidden flag, or not the others:\n%s", help.String())
	}
	for args, want := range map[string]string{
		"--ab-napi off,on":                                     "give --ab-control too",
		"--ab-control f --ab-napi on":                          "--ab-napi on: want off or on for queue 0 and queue 1",
		"--ab-control f --ab-napi auto,on":                     "--ab-napi auto,on: want off or on",
		"--ab-control f --napi on":                             "--napi is per queue with --ab-control",
		"--ab-control f --ab-delay -1us":                       "--ab-delay -1µs: want 0 or more",
		"--ab-control f --ab-napi off,off --tap-napi-threaded": "--ab-napi off,off: the TAP's NAPI settings act on an arm with IFF_NAPI: give one arm IFF_NAPI (--tap-napi-threaded)",
		"--ab-control f --ab-napi off,off --tap-napi-cpu 0":    "--tap-napi-cpu 0: pins the TAP's NAPI kthreads: it needs threaded TAP NAPI (--tap-napi-threaded)",
		"--ab-control f --queues 2":                            "--ab-control: it runs one worker over two TAP queues of its own: it takes 1 queue, not 2 (--queues)",
	} {
		if _, err := parseRun(strings.Fields("--nic x "+args), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
