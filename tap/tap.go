package tap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// Want says whether a kernel feature should be asked for.
type Want int

const (
	// Auto asks for the feature when TUNGETFEATURES lists it.
	Auto Want = iota
	// On asks for it and fails when the kernel does not offer it.
	On
	// Off never asks for it.
	Off
)

// ParseWant parses "auto", "on" or "off".
func ParseWant(s string) (Want, error) {
	switch s {
	case "auto", "":
		return Auto, nil
	case "on":
		return On, nil
	case "off":
		return Off, nil
	}
	return Auto, errors.New("want auto, on or off")
}

func (w Want) String() string {
	switch w {
	case On:
		return "on"
	case Off:
		return "off"
	}
	return "auto"
}

// Errors callers test for with errors.Is; the errors returned say more.
// Open also returns netns.ErrNotFound for a missing Config.Netns, and
// netns.ErrNotPermitted without CAP_NET_ADMIN.
var (
	// ErrNameInUse means Config.Name is taken by another interface, here
	// or in Config.Netns.
	ErrNameInUse = errors.New("an interface of that name exists")
	// ErrNoMultiQueue means more than one queue was asked of a kernel
	// without IFF_MULTI_QUEUE.
	ErrNoMultiQueue = errors.New("the kernel lacks IFF_MULTI_QUEUE")
	// ErrNoFeature means a feature asked for with On (IFF_NAPI,
	// IFF_VNET_HDR), or that NAPISettings need, is missing.
	ErrNoFeature = errors.New("the kernel does not offer it")
	// ErrNoTun means there is no /dev/net/tun to open.
	ErrNoTun = errors.New("no TUN/TAP driver")
)

// Config describes the TAP to open. The zero value (plus Queues) is a
// kernel-named single-queue TAP with NAPI and vnet headers when available.
type Config struct {
	Name    string // interface name; "" lets the kernel pick tap%d
	Queues  int    // number of queues (fds); 0 means 1
	NAPI    Want   // IFF_NAPI
	VnetHdr Want   // IFF_VNET_HDR, with offloads
	MTU     int    // MinMTU to MaxMTU; 0 leaves the kernel default (1500)
	// MAC is the TAP's Ethernet address (unicast); nil derives it from
	// MACKey (StableMAC) when that is set, else lets the kernel pick a
	// random one.
	MAC net.HardwareAddr
	// MACKey is a secret of this machine (its machine id): with no MAC,
	// the TAP gets StableMAC(MACKey, Netns, its name), the same on every
	// run, so that the wire's ARP and neighbour caches stay right across
	// a restart.
	MACKey []byte
	// Netns names a network namespace (/run/netns/NAME) the TAP netdev is
	// moved into; its fds keep working. "" keeps it where tapfwd runs.
	Netns string
	// Addr is assigned to the TAP (in Netns when set). Zero means none.
	Addr netip.Prefix
	// NAPISettings tune the TAP's NAPI instance; any non-zero one needs
	// IFF_NAPI.
	NAPISettings NAPISettings
	// QueueNAPI, when not nil, gives each queue its own IFF_NAPI in place
	// of NAPI: queue i (fd i) is opened with it when QueueNAPI[i] is
	// true, which the kernel allows (drivers/net/tun.c: tun_set_iff passes
	// each TUNSETIFF's own IFF_NAPI to tun_attach). It needs one entry per
	// queue and the kernel's IFF_NAPI when any is true; NAPISettings then
	// act on the queues with it (only they have a NAPI instance, and a
	// kthread when threaded). Not with Persist.
	QueueNAPI []bool
	// Persist makes the TAP outlive tapfwd (TUNSETPERSIST), with its VM
	// ports, so guests keep their NICs across a restart; its settings are
	// recorded in its alias. When a persistent TAP of that name exists
	// (in Netns, else here), Open attaches to it instead of making one,
	// after checking that it has the settings asked for (ErrMismatch, with
	// nothing changed, when not); MTU, MAC and address stay as they are.
	Persist bool
}

// NAPISettings tune the TAP's NAPI instance through its sysfs attributes
// (/sys/class/net/TAP/, net/core/net-sysfs.c). They are written before the
// move into Config.Netns: after it, the TAP's sysfs shows only there.
type NAPISettings struct {
	// Threaded runs the NAPI poll in a kthread (threaded = 1).
	Threaded bool
	// GROFlushTimeout is how long GRO may hold frames (gro_flush_timeout);
	// 0 leaves the kernel default.
	GROFlushTimeout time.Duration
	// DeferHardIRQs is napi_defer_hard_irqs: polls to repeat before
	// re-arming; 0 leaves the kernel default.
	DeferHardIRQs int
}

// attrs are the sysfs writes s asks for, in order.
func (s NAPISettings) attrs() [][2]string {
	var a [][2]string
	if s.Threaded {
		a = append(a, [2]string{"threaded", "1"})
	}
	if s.GROFlushTimeout > 0 {
		a = append(a, [2]string{"gro_flush_timeout", strconv.FormatInt(s.GROFlushTimeout.Nanoseconds(), 10)})
	}
	if s.DeferHardIRQs > 0 {
		a = append(a, [2]string{"napi_defer_hard_irqs", strconv.Itoa(s.DeferHardIRQs)})
	}
	return a
}

// Features is what was negotiated with the kernel.
type Features struct {
	Kernel     uint32 // TUNGETFEATURES flags
	Flags      uint16 // flags given to TUNSETIFF
	NAPI       bool
	VnetHdr    bool
	VnetHdrLen int // 0 without a vnet header
	MultiQueue bool
	Offloads   uint32 // TUN_F_* accepted by TUNSETOFFLOAD

	// QueueNAPI is Config.QueueNAPI, granted: which queues have IFF_NAPI
	// (Flags lacks it, NAPI says whether any has it); nil without.
	QueueNAPI []bool
}

// OffloadNames lists the accepted offloads, e.g. "csum,tso4,tso6".
func (f Features) OffloadNames() string {
	s := offloadNames.of(f.Offloads)
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// bitNames names the bits of a set of flags.
type bitNames []struct {
	bit  uint32
	name string
}

// of names the bits of bits that n knows, in n's order.
func (n bitNames) of(bits uint32) []string {
	var s []string
	for _, b := range n {
		if bits&b.bit != 0 {
			s = append(s, b.name)
		}
	}
	return s
}

var offloadNames = bitNames{
	{unix.TUN_F_CSUM, "csum"},
	{unix.TUN_F_TSO4, "tso4"},
	{unix.TUN_F_TSO6, "tso6"},
	{unix.TUN_F_TSO_ECN, "tso_ecn"},
	{unix.TUN_F_UFO, "ufo"},
	{unix.TUN_F_USO4, "uso4"},
	{unix.TUN_F_USO6, "uso6"},
}

var flagNames = bitNames{
	{unix.IFF_TUN, "TUN"},
	{unix.IFF_TAP, "TAP"},
	{unix.IFF_NAPI, "NAPI"},
	{unix.IFF_NAPI_FRAGS, "NAPI_FRAGS"},
	{unix.IFF_NO_CARRIER, "NO_CARRIER"},
	{unix.IFF_NO_PI, "NO_PI"},
	{unix.IFF_ONE_QUEUE, "ONE_QUEUE"},
	{unix.IFF_VNET_HDR, "VNET_HDR"},
	{unix.IFF_MULTI_QUEUE, "MULTI_QUEUE"},
	{unix.IFF_PERSIST, "PERSIST"},
	{unix.IFF_TUN_EXCL, "TUN_EXCL"},
}

// FlagNames names the IFF_* bits in a TUNGETFEATURES value.
func FlagNames(flags uint32) []string { return flagNames.of(flags) }

const tunPath = "/dev/net/tun"

func openTun() (int, error) {
	fd, err := unix.Open(tunPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
			return -1, fmt.Errorf("open %s: %w: %w: load the tun module (modprobe tun) or create the node (mknod %s c 10 200)", tunPath, err, ErrNoTun, tunPath)
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			return -1, fmt.Errorf("open %s: %w: %w", tunPath, err, netns.ErrNotPermitted)
		}
		return -1, fmt.Errorf("open %s: %w", tunPath, err)
	}
	return fd, nil
}

// Probe returns the kernel's TUNGETFEATURES flags.
func Probe() (uint32, error) {
	return probeTun(func(fd int) (uint32, error) {
		f, err := unix.IoctlGetUint32(fd, unix.TUNGETFEATURES)
		if err != nil {
			return 0, fmt.Errorf("ask the TUN driver for its features: %w", os.NewSyscallError("ioctl", err))
		}
		return f, nil
	})
}

// ProbeOffloads tries TUNSETOFFLOAD combinations on a throw-away TAP and
// returns the largest one the kernel accepts. It needs CAP_NET_ADMIN.
func ProbeOffloads() (uint32, error) {
	return probeTun(func(fd int) (uint32, error) {
		ifr, err := unix.NewIfreq("")
		if err != nil {
			return 0, err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return 0, explainSetIff("", err)
		}
		return setOffload(fd)
	})
}

// probeTun runs probe on a throw-away fd of /dev/net/tun, closed after.
func probeTun(probe func(fd int) (uint32, error)) (uint32, error) {
	fd, err := openTun()
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return probe(fd)
}

// Offload combinations tried in order. drivers/net/tun.c: set_offload takes
// USO only as a whole (CSUM|TSO4|TSO6|USO4|USO6); USO4 alone, or TSO without
// CSUM, is EINVAL.
var offloadTries = []uint32{
	unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_USO4 | unix.TUN_F_USO6,
	unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6,
	unix.TUN_F_CSUM,
}

func setOffload(fd int) (uint32, error) {
	var last error
	for _, o := range offloadTries {
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(o)); err == nil {
			return o, nil
		} else {
			last = err
		}
	}
	return 0, last
}

func explainSetIff(name string, err error) error {
	e := fmt.Errorf("make TAP %q: %w", name, os.NewSyscallError("ioctl", err))
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %w", e, netns.ErrNotPermitted)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%w: the TAP is held by another process", e)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%w: the name belongs to another device or a TAP with other flags", e)
	}
	return e
}

// Device is an open TAP with one fd per queue.
type Device struct {
	name       string
	fds        []int
	feat       Features
	netns      string
	mac        net.HardwareAddr
	persistent bool // TUNSETPERSIST: the TAP stays when the fds close
	attached   bool // Open attached to a TAP an earlier run left
	// The TAP's gro_ipv4_max_size and gro_max_size (0: not reported).
	groIPv4, groIPv6 int
}

// GROMaxSizes are the largest IPv4 and IPv6 packets the TAP's stack takes
// from GRO (gro_ipv4_max_size, gro_max_size; 0 when the kernel does not
// report them): what userspace GRO may build for it.
func (d *Device) GROMaxSizes() (ipv4, ipv6 int) { return d.groIPv4, d.groIPv6 }

// Open creates the TAP described by c, or attaches to the persistent one
// an earlier run left (Config.Persist). On error nothing is left behind.
func Open(c Config) (_ *Device, err error) {
	if c.Queues <= 0 {
		c.Queues = 1
	}
	if err := checkConfig(c); err != nil {
		return nil, err
	}
	f, err := negotiate(c)
	if err != nil {
		return nil, err
	}
	// The namespace first: a missing one fails before a TAP exists.
	var there *netns.NS
	if c.Netns != "" {
		if there, err = netns.Open(c.Netns); err != nil {
			return nil, err
		}
		defer there.Close()
	}
	ns, l, err := existing(c, there)
	if err != nil {
		return nil, err
	}
	if ns != nil {
		defer ns.Close()
		if err := checkExisting(c, f, ns, l); err != nil {
			return nil, err
		}
		return attach(c, f, ns, l)
	}
	return create(c, f, there)
}

// create makes a new TAP with c.Queues queues and configures it.
func create(c Config, f Features, there *netns.NS) (_ *Device, err error) {
	d := &Device{name: c.Name, feat: f}
	defer func() {
		if err != nil {
			d.unpersist()
			d.Close()
		}
	}()
	for q := 0; q < c.Queues; q++ {
		if err := d.openQueue(); err != nil {
			return nil, err
		}
	}
	if f.VnetHdr {
		// Offloads only let the TAP hand out GSO frames; writes of GSO
		// frames work without them, so a refusal is tolerated.
		if o, err := setOffload(d.fds[0]); err == nil {
			d.feat.Offloads = o
		}
	}
	if err := configure(d, c, there); err != nil {
		return nil, err
	}
	if c.Persist {
		ns := there
		if ns == nil {
			if ns, err = netns.Open(""); err != nil {
				return nil, err
			}
			defer ns.Close()
		}
		if err := d.persist(c, ns); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// checkConfig refuses what would fail only after the TAP exists.
func checkConfig(c Config) error {
	if len(c.Name) >= unix.IFNAMSIZ {
		return fmt.Errorf("TAP name %q is longer than %d bytes", c.Name, unix.IFNAMSIZ-1)
	}
	if len(c.MAC) > 0 && len(c.MAC) != 6 {
		return fmt.Errorf("MAC %s is not a 6-byte Ethernet address", c.MAC)
	}
	if c.QueueNAPI != nil {
		switch {
		case len(c.QueueNAPI) != c.Queues:
			return fmt.Errorf("IFF_NAPI given for %d queues of %d", len(c.QueueNAPI), c.Queues)
		case c.Persist:
			return errors.New("a persistent TAP records one IFF_NAPI for all its queues, not one per queue")
		case c.NAPISettings != (NAPISettings{}) && !slices.Contains(c.QueueNAPI, true):
			return errors.New("NAPI settings need IFF_NAPI, which no queue has")
		}
		return nil
	}
	if c.NAPISettings != (NAPISettings{}) && c.NAPI == Off {
		return errors.New("NAPI settings need IFF_NAPI, which is turned off")
	}
	return nil
}

// negotiate picks the TUNSETIFF flags for c from what the kernel offers.
func negotiate(c Config) (Features, error) {
	kern, err := Probe()
	if err != nil {
		return Features{}, err
	}
	f := Features{Kernel: kern}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if kern&unix.IFF_MULTI_QUEUE != 0 {
		flags |= unix.IFF_MULTI_QUEUE
		f.MultiQueue = true
	} else if c.Queues > 1 {
		return f, fmt.Errorf("%d queues: %w", c.Queues, ErrNoMultiQueue)
	}
	napi := c.NAPI
	if c.QueueNAPI != nil {
		// Each queue's TUNSETIFF adds its own IFF_NAPI (openQueue).
		f.QueueNAPI, napi = slices.Clone(c.QueueNAPI), Off
		if slices.Contains(c.QueueNAPI, true) {
			napi = On
		}
	}
	if f.NAPI, err = want("IFF_NAPI", napi, kern, unix.IFF_NAPI); err != nil {
		return f, err
	}
	if f.NAPI && f.QueueNAPI == nil {
		flags |= unix.IFF_NAPI
	} else if !f.NAPI && c.NAPISettings != (NAPISettings{}) {
		return f, fmt.Errorf("NAPI settings need IFF_NAPI, but %w (TUNGETFEATURES %#x)", ErrNoFeature, kern)
	}
	if f.VnetHdr, err = want("IFF_VNET_HDR", c.VnetHdr, kern, unix.IFF_VNET_HDR); err != nil {
		return f, err
	}
	if f.VnetHdr {
		flags |= unix.IFF_VNET_HDR
		f.VnetHdrLen = vnethdr.Len
	}
	f.Flags = flags
	return f, nil
}

// openQueue attaches one more queue (fd) to the TAP, creating it with the
// first.
func (d *Device) openQueue() error {
	fd, err := openTun()
	if err != nil {
		return err
	}
	d.fds = append(d.fds, fd)
	ifr, err := unix.NewIfreq(d.name)
	if err != nil {
		return fmt.Errorf("TAP name %q: %w", d.name, err)
	}
	flags := d.feat.Flags
	if q := len(d.fds) - 1; q < len(d.feat.QueueNAPI) && d.feat.QueueNAPI[q] {
		flags |= unix.IFF_NAPI
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return explainSetIff(d.name, err)
	}
	// The kernel writes the final name back (tun_set_iff).
	d.name = ifr.Name()
	if d.feat.VnetHdr {
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnethdr.Len); err != nil {
			return fmt.Errorf("set the vnet header size: %w", os.NewSyscallError("ioctl", err))
		}
	}
	// O_NONBLOCK only after TUNSETIFF: the workers block in ppoll.
	if err := unix.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("make a TAP queue non-blocking: %w", os.NewSyscallError("fcntl", err))
	}
	return nil
}

func want(name string, w Want, kern, bit uint32) (bool, error) {
	has := kern&bit != 0
	switch w {
	case Off:
		return false, nil
	case On:
		if !has {
			return false, fmt.Errorf("%s requested (on) but %w (TUNGETFEATURES %#x)", name, ErrNoFeature, kern)
		}
		return true, nil
	}
	return has, nil
}

// Name is the interface name the kernel gave the TAP.
func (d *Device) Name() string { return d.name }

// Netns is the namespace the TAP was moved into, or "".
func (d *Device) Netns() string { return d.netns }

// MAC is the TAP's Ethernet address.
func (d *Device) MAC() net.HardwareAddr { return d.mac }

// Features is what was negotiated.
func (d *Device) Features() Features { return d.feat }

// Fds returns the queue file descriptors, non-blocking. They stay owned by
// the Device.
func (d *Device) Fds() []int { return d.fds }

// Persistent reports whether the TAP stays when its queues close.
func (d *Device) Persistent() bool { return d.persistent }

// Attached reports whether Open attached to a persistent TAP an earlier run
// left, rather than making a new one.
func (d *Device) Attached() bool { return d.attached }

// Close closes every queue; a non-persistent TAP disappears with the last.
func (d *Device) Close() error {
	var first error
	for _, fd := range d.fds {
		if err := unix.Close(fd); err != nil && first == nil {
			first = os.NewSyscallError("close", err)
		}
	}
	d.fds = nil
	return first
}
