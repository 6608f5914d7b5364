package daemon

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/tap"
)

// validConfig is a Config every rule accepts, for a row to break one.
func validConfig() Config {
	return Config{
		TAP:     tap.Config{Name: "lab0", NAPI: tap.Auto, VnetHdr: tap.Auto},
		NIC:     NIC{Name: "eth1"},
		Workers: Workers{GRO: true},
		Metrics: &Metrics{Addr: DefaultMetricsAddr},
	}
}

// validateRules are Configs that break one rule each: the part the
// refusal names, the other part a rule between two names (0: none), and
// a word of its message.
var validateRules = []struct {
	name   string
	change func(*Config)
	part   Part
	with   Part
	word   string
}{
	{"no NIC", func(c *Config) { c.NIC.Name = "" }, PartNIC, 0, "no name"},
	{"NIC name too long", func(c *Config) { c.NIC.Name = "nic-with-a-long-name" }, PartNIC, 0, "at most 15"},
	{"TAP name of IFNAMSIZ bytes", func(c *Config) { c.TAP.Name = "lab-name-16bytes" }, PartTAPName, 0, "has 16 bytes"},
	{"TAP name with a slash", func(c *Config) { c.TAP.Name = "a/b" }, PartTAPName, 0, "no interface name"},
	{"TAP name with a space", func(c *Config) { c.TAP.Name = "a b" }, PartTAPName, 0, "no interface name"},
	{"TAP named ..", func(c *Config) { c.TAP.Name = ".." }, PartTAPName, 0, "no interface name"},
	{"TAP named after the NIC", func(c *Config) { c.TAP.Name = "eth1" }, PartTAPName, PartNIC, "names the NIC"},
	{"persistent TAP without a name", func(c *Config) { c.TAP.Name, c.TAP.Persist = "", true }, PartPersist, PartTAPName, "finds the TAP by it"},
	{"TAP namespace a path", func(c *Config) { c.TAP.Netns = "../etc" }, PartTAPNetns, 0, "bad network namespace name"},
	{"negative queues", func(c *Config) { c.TAP.Queues = -1 }, PartTAPQueues, 0, "want 1 to 256"},
	{"too many queues", func(c *Config) { c.TAP.Queues = MaxQueues + 1 }, PartTAPQueues, 0, "want 1 to 256"},
	{"MTU too small", func(c *Config) { c.TAP.MTU = tap.MinMTU - 1 }, PartTAPMTU, 0, "want 68 to 65521 bytes"},
	{"MTU too large", func(c *Config) { c.TAP.MTU = tap.MaxMTU + 1 }, PartTAPMTU, 0, "want 68 to 65521 bytes"},
	{"negative TAP GRO flush timeout", func(c *Config) { c.TAP.NAPISettings.GROFlushTimeout = -1 }, PartTAPGROFlush, 0, "negative"},
	{"negative TAP NAPI deferral", func(c *Config) { c.TAP.NAPISettings.DeferHardIRQs = -1 }, PartTAPNAPIDefer, 0, "negative"},
	{"TAP NAPI settings without NAPI", func(c *Config) { c.TAP.NAPI, c.TAP.NAPISettings.Threaded = tap.Off, true }, PartTAPNAPIThreaded, PartTAPNAPI, "acts on the TAP's NAPI"},
	{"multicast TAP MAC", func(c *Config) { c.TAP.MAC = net.HardwareAddr{1, 0, 0x5e, 0, 0, 1} }, PartTAPMAC, 0, "multicast"},
	{"zero TAP MAC", func(c *Config) { c.TAP.MAC = make(net.HardwareAddr, 6) }, PartTAPMAC, 0, "all zeros"},
	{"short TAP MAC", func(c *Config) { c.TAP.MAC = net.HardwareAddr{2, 0, 0} }, PartTAPMAC, 0, "six hex bytes"},
	{"negative batch", func(c *Config) { c.Workers.Batch = -1 }, PartBatch, 0, "want 1 to 1024"},
	{"batch too large", func(c *Config) { c.Workers.Batch = MaxBatch + 1 }, PartBatch, 0, "want 1 to 1024"},
	{"frame buffers too large", func(c *Config) { c.TAP.Queues, c.Workers.Batch = MaxQueues, MaxBatch }, PartBatch, PartTAPQueues, "32.0 GiB of frame buffers"},
	{"negative GRO window", func(c *Config) { c.Workers.GROWindow = -time.Microsecond }, PartGROWindow, 0, "want 0 to 1ms"},
	{"GRO window too long", func(c *Config) { c.Workers.GROWindow = 2 * time.Millisecond }, PartGROWindow, 0, "want 0 to 1ms"},
	{"negative spin", func(c *Config) { c.Workers.Spin = -time.Microsecond }, PartSpin, 0, "want 0 to 1ms"},
	{"spin too long", func(c *Config) { c.Workers.Spin = 2 * time.Millisecond }, PartSpin, 0, "want 0 to 1ms"},
	{"spin with busy polling", func(c *Config) { c.Workers.Spin, c.Workers.Poll = 50*time.Microsecond, PollBusy }, PartSpin, PartPoll, "needs the block poll mode"},
	{"split on AF_XDP", func(c *Config) { c.Workers.Split, c.NIC.Backend = true, BackendXDP }, PartSplit, PartNICBackend, "needs the packet NIC backend"},
	{"split through io_uring", func(c *Config) { c.Workers.Split, c.Workers.TAPIO = true, TAPIOAuto }, PartSplit, PartTAPIO, "needs TAP I/O syscall"},
	{"split in the A/B mode", ab(func(c *Config) { c.Workers.Split = true }), PartSplit, PartAB, "switches between two TAPs"},
	{"GRO window without GRO", func(c *Config) { c.Workers.GRO, c.Workers.GROWindow = false, 50*time.Microsecond }, PartGROWindow, PartGRO, "needs GRO"},
	{"worker CPU out of range", func(c *Config) { c.Workers.CPUs = []int{0, 1024} }, PartCPUs, 0, "0 to 1023"},
	{"negative worker CPU", func(c *Config) { c.Workers.CPUs = []int{-1} }, PartCPUs, 0, "0 to 1023"},
	{"L2 exceptions while forwarding", func(c *Config) { c.Workers.L2.ControlAllow = 1 << 0x0e }, PartL2ControlAllow, PartL2Control, "exceptions"},
	{"kernel poll on packet sockets", func(c *Config) { c.Workers.Poll = PollKernel }, PartPoll, PartNICBackend, "xdp NIC backend"},
	{"kernel poll deferral too high", kernelPoll(KernelPoll{DeferHardIRQs: MaxNICDeferHardIRQs + 1, GROFlushTimeout: time.Millisecond}), PartNICDefer, 0, "want 0 to 2147483647 polls"},
	{"kernel poll flush too long", kernelPoll(KernelPoll{GROFlushTimeout: 11 * time.Millisecond}), PartNICGROFlush, 0, "want 0 to 10ms"},
	{"kernel poll negative flush", kernelPoll(KernelPoll{GROFlushTimeout: -1}), PartNICGROFlush, 0, "want 0 to 10ms"},
	{"kernel poll deferral without a flush timer", kernelPoll(KernelPoll{DeferHardIRQs: 2}), PartNICDefer, PartNICGROFlush, "timer armed"},
	{"kernel busy poll too long", kernelPoll(KernelPoll{BusyPoll: 20 * time.Millisecond}), PartBusyPollTime, 0, "want 1µs to 10ms"},
	{"kernel busy poll too short", kernelPoll(KernelPoll{BusyPoll: time.Nanosecond}), PartBusyPollTime, 0, "want 1µs to 10ms"},
	{"busy poll CPU out of range", kernelPoll(KernelPoll{OwnCPU: true, CPU: 1024}), PartBusyPollCPU, 0, "0 to 1023"},
	{"negative busy poll CPU", kernelPoll(KernelPoll{OwnCPU: true, CPU: -1}), PartBusyPollCPU, 0, "0 to 1023"},
	{"TAP NAPI CPU out of range", func(c *Config) { c.TAP.NAPISettings.Threaded, c.NAPI = true, &NAPI{TAPCPU: 1024, NICCPU: -1} }, PartTAPNAPICPU, 0, "0 to 1023, or -1"},
	{"NIC NAPI CPU below -1", func(c *Config) { c.NAPI = &NAPI{TAPCPU: -1, NICMode: napi.ThreadedEnabled, NICCPU: -2} }, PartNICNAPICPU, 0, "0 to 1023, or -1"},
	{"TAP NAPI CPU without threaded NAPI", func(c *Config) { c.NAPI = &NAPI{TAPCPU: 0, NICCPU: -1} }, PartTAPNAPICPU, PartTAPNAPIThreaded, "needs threaded TAP NAPI"},
	{"NIC NAPI CPU without threaded NAPI", func(c *Config) { c.NAPI = &NAPI{TAPCPU: -1, NICCPU: 0} }, PartNICNAPICPU, PartNICNAPI, "needs the NIC's NAPI threaded"},
	{"unknown NIC NAPI mode", func(c *Config) { c.NAPI = &NAPI{TAPCPU: -1, NICMode: 7, NICCPU: -1} }, PartNICNAPI, 0, "want enabled, busy-poll"},
	{"waiting for the NIC as a user", func(c *Config) { c.Privileges.User, c.NIC.Wait = "nobody", true }, PartNICWait, PartUser, "CAP_NET_RAW"},
	{"kernel poll as a user", func(c *Config) {
		c.Privileges.User, c.NIC.Backend, c.Workers.Poll = "nobody", BackendXDP, PollKernel
	}, PartPoll, PartUser, "CAP_NET_ADMIN"},
	{"threaded NIC NAPI as a user", func(c *Config) {
		c.Privileges.User, c.NAPI = "nobody", &NAPI{TAPCPU: -1, NICMode: napi.ThreadedEnabled, NICCPU: -1}
	}, PartNICNAPI, PartUser, "CAP_NET_ADMIN"},
	{"threaded poll as a user", func(c *Config) { c.Privileges.User, c.Workers.Poll = "nobody", PollThreaded }, PartPoll, PartUser, "CAP_NET_ADMIN"},
	{"negative VM ports", func(c *Config) { c.VMPorts.N = -1 }, PartVMPorts, 0, "want 0 to 64"},
	{"too many VM ports", func(c *Config) { c.VMPorts.N = MaxVMPorts + 1 }, PartVMPorts, 0, "want 0 to 64"},
	{"too many VM port queues", func(c *Config) { c.VMPorts.Queues = MaxVMPortQueues + 1 }, PartVMPortQueues, 0, "want 1 to 64"},
	{"VM port owner without ports", func(c *Config) { c.VMPorts.Owner = "qemu" }, PartPortOwner, PartVMPorts, "needs VM ports"},
	{"relative vhost-user directory", func(c *Config) { c.VMPorts.N, c.VMPorts.VhostDir = 1, "vhu" }, PartVhostDir, 0, "absolute"},
	{"vhost-user without ports", func(c *Config) { c.VMPorts.VhostDir = "/run/v" }, PartVhostDir, PartVMPorts, "needs VM ports"},
	{"vhost-user without a TAP name", func(c *Config) { c.TAP.Name, c.VMPorts.N, c.VMPorts.VhostDir = "", 1, "/run/v" }, PartVhostDir, PartTAPName, "named after the TAP"},
	{"vhost-user and waiting for the NIC", func(c *Config) { c.VMPorts.N, c.VMPorts.VhostDir, c.NIC.Wait = 1, "/run/v", true }, PartNICWait, PartVhostDir, "vhost-user"},
	{"DHCP without the host's address", func(c *Config) { c.Host = &HostPort{DHCP: dhcpRange("198.18.1.100", "198.18.1.150")} }, PartDHCP, PartHostAddr, "needs the host's address"},
	{"DHCP outside the subnet", func(c *Config) {
		c.Host = &HostPort{Addr: netip.MustParsePrefix("198.18.1.2/24"), DHCP: dhcpRange("198.18.2.100", "198.18.2.150")}
	}, PartDHCP, PartHostAddr, "outside the host's subnet"},
	{"DHCP on a name dnsmasq splits", func(c *Config) {
		c.TAP.Name, c.Host = "lab,eth0", &HostPort{Addr: netip.MustParsePrefix("198.18.1.2/24"), DHCP: dhcpRange("198.18.1.100", "198.18.1.150")}
	}, PartDHCP, PartTAPName, "dnsmasq cannot take"},
	{"A/B on two queues", ab(func(c *Config) { c.TAP.Queues = 2 }), PartAB, PartTAPQueues, "1 queue, not 2"},
	{"A/B through io_uring", ab(func(c *Config) { c.Workers.TAPIO = TAPIOAuto }), PartAB, PartTAPIO, "io_uring"},
	{"A/B with VM ports", ab(func(c *Config) { c.VMPorts.N = 1 }), PartAB, PartVMPorts, "VM ports"},
	{"A/B on a persistent TAP", ab(func(c *Config) { c.TAP.Persist = true }), PartAB, PartPersist, "persistent"},
	{"A/B negative delay", ab(func(c *Config) { c.AB.Delay = -1 }), PartABDelay, 0, "0 or more"},
	{"A/B NAPI settings and no NAPI arm", ab(func(c *Config) { c.AB.NAPI, c.TAP.NAPISettings.Threaded = [2]bool{}, true }), PartABNAPI, PartTAPNAPIThreaded, "IFF_NAPI"},
	{"metrics address without a port", func(c *Config) { c.Metrics.Addr = "9310" }, PartMetricsAddr, 0, "want HOST:PORT"},
	{"metrics address with a named port", func(c *Config) { c.Metrics.Addr = ":http" }, PartMetricsAddr, 0, "want HOST:PORT"},
	{"metrics address empty", func(c *Config) { c.Metrics.Addr = "" }, PartMetricsAddr, 0, "want HOST:PORT"},
	{"stats interval too short", func(c *Config) { c.Log.StatsEvery = time.Millisecond }, PartStatsEvery, 0, "at least 1s"},
	{"negative stats interval", func(c *Config) { c.Log.StatsEvery = -time.Second }, PartStatsEvery, 0, "at least 1s"},
	{"negative ready fd", func(c *Config) { c.Notify.ReadyFd = -1 }, PartReadyFd, 0, "file descriptor"},
}

// kernelPoll sets PollKernel on the xdp backend, tuned by kp.
func kernelPoll(kp KernelPoll) func(*Config) {
	return func(c *Config) { c.NIC.Backend, c.Workers.Poll, c.Workers.KernelPoll = BackendXDP, PollKernel, kp }
}

// ab turns the A/B mode on (arm B with NAPI), then makes change.
func ab(change func(*Config)) func(*Config) {
	return func(c *Config) {
		c.AB = &AB{Control: "/run/ab", NAPI: [2]bool{false, true}}
		change(c)
	}
}

func dhcpRange(first, last string) *DHCPRange {
	return &DHCPRange{First: netip.MustParseAddr(first), Last: netip.MustParseAddr(last)}
}

// TestValidate: each rule refuses its row with an *Error naming the part
// (and the other part of a rule between two), wrapping ErrInvalid, with a
// message that names no flag; a Config that keeps every rule, the zero
// defaults and each rule's edge included, passes.
func TestValidate(t *testing.T) {
	for _, tc := range validateRules {
		c := validConfig()
		tc.change(&c)
		err := c.Validate()
		var de *Error
		switch {
		case !errors.As(err, &de) || !errors.Is(err, ErrInvalid):
			t.Errorf("%s: %v, want an *Error wrapping ErrInvalid", tc.name, err)
		case de.Part != tc.part || de.With != tc.with || !strings.Contains(err.Error(), tc.word):
			t.Errorf("%s: %q (part %q, with %q), want part %q with %q saying %q", tc.name, err, de.Part, de.With, tc.part, tc.with, tc.word)
		case strings.Contains(err.Error(), "--") || strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: %q names a flag or is not one line", tc.name, err)
		}
	}
	for name, change := range map[string]func(*Config){
		"as given":      func(*Config) {},
		"zero defaults": func(c *Config) { c.TAP.Name, c.Metrics, c.Workers = "", nil, Workers{} },
		"the edges": func(c *Config) {
			c.TAP.Name, c.TAP.MTU, c.Workers.Batch, c.Workers.GROWindow = "lab-name-15byte", tap.MaxMTU, MaxBatch, MaxGROWindow
		},
		"kernel poll defaults": kernelPoll(KernelPoll{DeferHardIRQs: DefaultNICDeferHardIRQs, GROFlushTimeout: DefaultNICGROFlushTimeout}),
		"own CPU poller":       kernelPoll(KernelPoll{OwnCPU: true, CPU: 1023}),
		"threaded NAPI pinned": func(c *Config) {
			c.TAP.NAPISettings.Threaded, c.NAPI = true, &NAPI{TAPCPU: 1, NICMode: napi.ThreadedBusyPoll, NICCPU: 0}
		},
		"vhost-user ports": func(c *Config) {
			c.VMPorts = VMPorts{N: MaxVMPorts, Owner: "qemu", VhostDir: "/run/v", Queues: MaxVMPortQueues}
		},
		"host port with DHCP": func(c *Config) {
			c.Host = &HostPort{Addr: netip.MustParsePrefix("198.18.1.2/24"), DHCP: dhcpRange("198.18.1.100", "198.18.1.150")}
		},
		"A/B mode":           ab(func(c *Config) { c.TAP.Queues, c.TAP.NAPISettings.Threaded = 1, true }),
		"kernel-picked name": func(c *Config) { c.TAP.Name = "tap%d" },
		"stats every second": func(c *Config) { c.Log.StatsEvery = MinStatsEvery },
		"any free port":      func(c *Config) { c.Metrics.Addr = "[::1]:0" },
		"a passed socket":    func(c *Config) { c.Metrics = &Metrics{Listener: &net.TCPListener{}} },
	} {
		c := validConfig()
		change(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestOpenValidatesFirst: Open refuses a Config that breaks a rule before
// any step: not even the NIC (which does not exist) is looked up, no
// metrics address is bound, the vhost-user directory is not made, and the
// error is Validate's.
func TestOpenValidatesFirst(t *testing.T) {
	dir := t.TempDir() + "/vhost"
	c := Config{
		TAP:     tap.Config{Name: "tfw-name-too-long"},
		NIC:     NIC{Name: "tfw-no-such-nic"},
		VMPorts: VMPorts{N: 1, VhostDir: dir},
		Metrics: &Metrics{Addr: "127.0.0.1:0"},
	}
	d, err := Open(c)
	var de *Error
	if d != nil || !errors.As(err, &de) || de.Part != PartTAPName || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "at most 15") {
		t.Fatalf("Open: %v, want Validate's refusal of the TAP name", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open made the vhost-user directory before refusing: %v", err)
	}
	c.TAP.Name = "lab0"
	if _, err := Open(c); errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "tfw-no-such-nic") {
		t.Errorf("Open of a valid Config: %v, want the NIC's look-up to fail", err)
	}
}
