package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// Mode selects the topology between the wire and lab namespaces.
type Mode int

const (
	// Forwarder connects wire and fwd with a veth (w0 <-> w1) and leaves lab
	// empty: the forwarder under test creates a TAP named Bed.LabIf in fwd,
	// moves it into lab and gives it Bed.LabAddr.
	Forwarder Mode = iota
	// Bridge is the in-kernel reference: in fwd a bridge br0 enslaves w1 and
	// l1, and the veth l1 (fwd) <-> l0 (lab) carries Bed.LabAddr.
	Bridge
	// Direct is the ceiling: a veth w0 (wire) <-> l0 (lab). The fwd namespace
	// exists but is unused.
	Direct
)

func (m Mode) String() string { return enumString("Mode", int(m), "forwarder", "bridge", "direct") }

// enumString is the name of value v of an enumeration called typ whose
// values are names' indexes, or typ(v) for another value.
func enumString(typ string, v int, names ...string) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(v) + ")"
}

// Config describes a bed. The zero value is a Forwarder bed on a random
// subnet with MTU 1500.
type Config struct {
	Mode Mode
	// Subnet is X in 198.18.X.0/24; 0 picks one at random in 1..254. Beds
	// live in separate namespaces, so two beds may share a subnet.
	Subnet uint8
	// MTU of every interface the bed makes; 0 means 1500.
	MTU int
}

// Bed is a built test bed. Its fields are read-only.
type Bed struct {
	Mode Mode
	// ID is the random suffix shared by every name the bed makes.
	ID string
	// WireNS, FwdNS and LabNS name the namespaces, e.g. "tfw-a1b2c3-wire".
	WireNS, FwdNS, LabNS string
	// WireIf is the interface in WireNS ("w0").
	WireIf string
	// NIC is the interface in FwdNS the forwarder uses ("w1"); unused in
	// Direct mode.
	NIC string
	// LabIf is the interface in LabNS: "l0" for Bridge and Direct; for
	// Forwarder the unique name (at most 15 bytes) the forwarder should give
	// its TAP, e.g. "tfwtap-a1b2c3".
	LabIf string
	// WireAddr and LabAddr are 198.18.X.1/24 and 198.18.X.2/24.
	WireAddr, LabAddr netip.Prefix
	MTU               int

	ipPath string
	hosts  *Hosts // set on a Hosts.View: Close closes that bed

	close func() error // removeNamespaces once
}

// Interface and namespace names. The prefix "tfw-" marks everything a bed
// makes; the TAP name must fit IFNAMSIZ-1 = 15 bytes
// (include/uapi/linux/if.h).
const (
	nsPrefix  = "tfw-"
	tapPrefix = "tfwtap-"
	idLen     = 6 // hex digits
)

// Available reports whether beds can be built here: nil when the process has
// CAP_NET_ADMIN and CAP_SYS_ADMIN (ip netns add mounts under /run/netns) and
// the ip command exists, else an error saying what is missing.
func Available() error {
	if err := checkCaps(); err != nil {
		return err
	}
	if _, err := ipCommand(); err != nil {
		return err
	}
	return nil
}

// Capability numbers from include/uapi/linux/capability.h.
const (
	capNetAdmin = 12
	capSysAdmin = 21
)

func checkCaps() error {
	// Not os.Geteuid() == 0: root in a restricted container may still lack
	// the capabilities, so the effective set decides.
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("testbed: reading capabilities: %w", err)
	}
	v, ok := procfs.ParseStatus(string(raw))["CapEff"]
	if !ok {
		return errors.New("testbed: no CapEff line in /proc/self/status")
	}
	eff, err := strconv.ParseUint(v, 16, 64)
	if err != nil {
		return fmt.Errorf("testbed: parsing CapEff %q: %w", v, err)
	}
	var missing []string
	if eff&(1<<capNetAdmin) == 0 {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if eff&(1<<capSysAdmin) == 0 {
		missing = append(missing, "CAP_SYS_ADMIN")
	}
	if len(missing) > 0 {
		return fmt.Errorf("testbed: network namespaces need %s (euid %d): run the tests as root, e.g. sudo go test",
			strings.Join(missing, " and "), os.Geteuid())
	}
	return nil
}

// ipCommand finds the ip binary from iproute2.
func ipCommand() (string, error) {
	if p, err := exec.LookPath("ip"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("testbed: ip command not found: install iproute2 (apt-get install iproute2)")
}

// bridgeCommand finds iproute2's bridge binary: on $PATH, else beside ip.
func bridgeCommand(ipPath string) (string, error) {
	if p, err := exec.LookPath("bridge"); err == nil {
		return p, nil
	}
	p := filepath.Join(filepath.Dir(ipPath), "bridge")
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p, nil
	}
	return "", errors.New("testbed: bridge command not found: install iproute2 (apt-get install iproute2)")
}

// New builds a bed. On any failure it removes what it made.
func New(ctx context.Context, cfg Config) (*Bed, error) {
	if cfg.Mode < Forwarder || cfg.Mode > Direct {
		return nil, fmt.Errorf("testbed: unknown mode %d", int(cfg.Mode))
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 68 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("testbed: MTU %d out of range 68..65535", cfg.MTU)
	}
	ip, id, subnet, err := prepare(cfg.Subnet)
	if err != nil {
		return nil, err
	}
	b := &Bed{
		Mode:     cfg.Mode,
		ID:       id,
		WireNS:   nsPrefix + id + "-wire",
		FwdNS:    nsPrefix + id + "-fwd",
		LabNS:    nsPrefix + id + "-lab",
		WireIf:   "w0",
		NIC:      "w1",
		LabIf:    "l0",
		WireAddr: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, subnet, 1}), 24),
		LabAddr:  netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, subnet, 2}), 24),
		MTU:      cfg.MTU,
		ipPath:   ip,
	}
	if cfg.Mode == Forwarder {
		b.LabIf = tapPrefix + id
	}
	b.close = sync.OnceValue(func() error { return removeNamespaces(ip, b.WireNS, b.FwdNS, b.LabNS) })
	if err := closeOnError(b.build(ctx), b.Close); err != nil {
		return nil, err
	}
	return b, nil
}

// prepare checks that beds can be built here and returns the ip command,
// a new bed's random suffix, and subnet, or a random one for 0.
func prepare(subnet uint8) (ip, id string, _ uint8, err error) {
	if subnet == 0 {
		subnet = uint8(1 + mrand.IntN(254))
	}
	if err := checkCaps(); err != nil {
		return "", "", 0, err
	}
	if ip, err = ipCommand(); err != nil {
		return "", "", 0, err
	}
	var raw [idLen / 2]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", 0, fmt.Errorf("testbed: random suffix: %w", err)
	}
	return ip, hex.EncodeToString(raw[:]), subnet, nil
}

func (b *Bed) build(ctx context.Context) error {
	mtu := strconv.Itoa(b.MTU)
	// Namespaces first; each gets lo up (iperf3 and friends need nothing
	// else). veths are created directly inside the namespaces, with the peer
	// moved by "netns", so nothing transient appears in the root namespace.
	steps := nsSteps(b.WireNS, b.FwdNS, b.LabNS)
	switch b.Mode {
	case Forwarder:
		steps = append(steps,
			[]string{"-n", b.WireNS, "link", "add", b.WireIf, "mtu", mtu, "type", "veth", "peer", "name", b.NIC, "mtu", mtu, "netns", b.FwdNS},
			[]string{"-n", b.WireNS, "addr", "add", b.WireAddr.String(), "dev", b.WireIf},
			[]string{"-n", b.FwdNS, "link", "set", "dev", b.NIC, "up"},
			[]string{"-n", b.WireNS, "link", "set", "dev", b.WireIf, "up"},
		)
	case Bridge:
		// With STP off (the default) bridge ports forward as soon as they
		// are up: net/bridge/br_stp.c: br_port_state_selection.
		steps = append(steps,
			[]string{"-n", b.WireNS, "link", "add", b.WireIf, "mtu", mtu, "type", "veth", "peer", "name", b.NIC, "mtu", mtu, "netns", b.FwdNS},
			[]string{"-n", b.FwdNS, "link", "add", "l1", "mtu", mtu, "type", "veth", "peer", "name", b.LabIf, "mtu", mtu, "netns", b.LabNS},
			[]string{"-n", b.FwdNS, "link", "add", "br0", "mtu", mtu, "type", "bridge"},
			[]string{"-n", b.FwdNS, "link", "set", "dev", b.NIC, "master", "br0"},
			[]string{"-n", b.FwdNS, "link", "set", "dev", "l1", "master", "br0"},
			[]string{"-n", b.WireNS, "addr", "add", b.WireAddr.String(), "dev", b.WireIf},
			[]string{"-n", b.LabNS, "addr", "add", b.LabAddr.String(), "dev", b.LabIf},
			[]string{"-n", b.FwdNS, "link", "set", "dev", "br0", "up"},
			[]string{"-n", b.FwdNS, "link", "set", "dev", b.NIC, "up"},
			[]string{"-n", b.FwdNS, "link", "set", "dev", "l1", "up"},
			[]string{"-n", b.LabNS, "link", "set", "dev", b.LabIf, "up"},
			[]string{"-n", b.WireNS, "link", "set", "dev", b.WireIf, "up"},
		)
	case Direct:
		steps = append(steps,
			[]string{"-n", b.WireNS, "link", "add", b.WireIf, "mtu", mtu, "type", "veth", "peer", "name", b.LabIf, "mtu", mtu, "netns", b.LabNS},
			[]string{"-n", b.WireNS, "addr", "add", b.WireAddr.String(), "dev", b.WireIf},
			[]string{"-n", b.LabNS, "addr", "add", b.LabAddr.String(), "dev", b.LabIf},
			[]string{"-n", b.LabNS, "link", "set", "dev", b.LabIf, "up"},
			[]string{"-n", b.WireNS, "link", "set", "dev", b.WireIf, "up"},
		)
	}
	for _, s := range steps {
		if err := b.ip(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// closeOnError is err, with close's error joined to it when close fails,
// and calls close when err is not nil: a failed build removes what it
// made.
func closeOnError(err error, close func() error) error {
	if err != nil {
		if cerr := close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}
	return err
}

// nsSteps are the ip commands that make namespaces nss, each with lo up
// (iperf3 and friends need nothing else).
func nsSteps(nss ...string) [][]string {
	var steps [][]string
	for _, ns := range nss {
		steps = append(steps, []string{"netns", "add", ns}, []string{"-n", ns, "link", "set", "dev", "lo", "up"})
	}
	return steps
}

// ip runs the ip command in the root namespace (the -n flag switches to a
// bed namespace) and returns an error that includes its output.
func (b *Bed) ip(ctx context.Context, arg ...string) error {
	return runTool(ctx, b.ipPath, arg...)
}

// runTool runs an iproute2 command (ip, bridge) and returns an error that
// includes its output.
func runTool(ctx context.Context, path string, arg ...string) error {
	out, err := exec.CommandContext(ctx, path, arg...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testbed: %s %s: %w: %s", filepath.Base(path), strings.Join(arg, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Close kills every process still running in the bed's namespaces (which
// includes any started from Command) and deletes the namespaces, which
// deletes the veths, bridge and TAPs inside them. It is idempotent.
//
// A namespace stays alive after deletion while something still holds it (a
// thread of this process that setns'd into it, an open socket created
// there); its interfaces then go only when that goes. Names never clash,
// since each bed has its own suffix.
//
// A Bed from Hosts.View closes its two-host bed.
func (b *Bed) Close() error {
	if b.hosts != nil {
		return b.hosts.Close()
	}
	return b.close()
}

// removeNamespaces kills every process in namespaces nss that exist,
// first in all of them (a forwarder in one may hold a TAP that lives in
// another), and then deletes them.
func removeNamespaces(ipPath string, nss ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nss = slices.DeleteFunc(nss, func(ns string) bool { return !nsExists(ns) })
	var errs []error
	for _, ns := range nss {
		errs = append(errs, killAll(ctx, ipPath, ns))
	}
	for _, ns := range nss {
		errs = append(errs, runTool(ctx, ipPath, "netns", "del", ns))
	}
	return errors.Join(errs...)
}

func nsExists(ns string) bool {
	_, err := os.Stat("/run/netns/" + ns)
	return err == nil
}

// killAll sends SIGKILL to every process whose main thread is in ns, except
// this process. Processes started with Command are among them: ip netns exec
// execs the program in place, keeping its pid.
func killAll(ctx context.Context, ipPath, ns string) error {
	out, err := exec.CommandContext(ctx, ipPath, "netns", "pids", ns).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testbed: ip netns pids %s: %w: %s", ns, err, strings.TrimSpace(string(out)))
	}
	self := os.Getpid()
	var errs []error
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("testbed: killing pid %d in %s: %w", pid, ns, err))
		}
	}
	return errors.Join(errs...)
}

// Command returns a command that runs name in namespace ns
// (ip netns exec ns name arg...). Close kills it if it is still running.
func (b *Bed) Command(ctx context.Context, ns string, name string, arg ...string) *exec.Cmd {
	return exec.CommandContext(ctx, b.ipPath, append([]string{"netns", "exec", ns, name}, arg...)...)
}

// Run runs name in namespace ns and returns its combined output; the error
// includes the output.
func (b *Bed) Run(ctx context.Context, ns string, name string, arg ...string) (string, error) {
	out, err := b.Command(ctx, ns, name, arg...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("testbed: in %s: %s %s: %w: %s", ns, name, strings.Join(arg, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
