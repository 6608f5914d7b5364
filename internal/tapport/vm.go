package tapport

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
)

// NamePrefix starts the names Add picks for ports: tfwvm0, tfwvm1, ...
const NamePrefix = "tfwvm"

// Port is a macvtap device in bridge mode stacked on a TAP, for a VM's
// virtio-net to sit on its character device. Frames the guest sends leave
// through the TAP's transmit path (to tapfwd, then the NIC); frames tapfwd
// writes into the TAP reach the port whose MAC they are addressed to (and
// broadcasts reach every port); ports on one TAP reach each other without
// leaving it (drivers/net/macvlan.c: macvlan_queue_xmit,
// macvlan_handle_frame). The character device hands out and takes the
// guest's virtio_net_hdr, so guest TSO and checksum offload pass as GSO
// frames (drivers/net/tap.c: tap_get_user, tap_put_user).
//
// While no one holds the character device, the port's netdev takes the
// frames for its guest into the namespace's own stack (drivers/net/tap.c:
// tap_handle_frame passes them up when the port has no queue), so the
// port is quietened as the TAP under a host port is: it answers no ARP,
// drops IPv4 whose source is reached elsewhere and has no IPv6, and sends
// nothing of its own. The lab host stays one MAC on the segment, and a
// port's tx counts its guest's frames only. A port takes every multicast
// frame on the segment for its guest (IFF_ALLMULTI), as a bridge port does.
type Port struct {
	Name     string           // the macvtap netdev, e.g. "tfwvm0"
	Index    int              // its ifindex in Netns; the kernel names the char device tapINDEX
	MAC      net.HardwareAddr // the address the guest's NIC must use
	TAP      string           // the TAP it sits on
	TAPIndex int
	// Netns is the namespace holding the TAP and the port: its /run/netns
	// name, or "" for the initial namespace.
	Netns        string
	Dev          string // character device node to open, e.g. /dev/tapfwd/lab:tfwvm0; "" when there is none
	Major, Minor uint32
	Up           bool
}

// Config describes a port to add.
type Config struct {
	TAP   string // the TAP netdev; required
	Netns string // namespace of the TAP (/run/netns/NAME); "" for the caller's
	Name  string // port name; "" picks tfwvmN, the lowest free N
	// MAC is the guest's address; nil picks a random locally administered
	// one. It must differ from every other address on the TAP's namespace.
	MAC net.HardwareAddr
	// Owner, when set, owns the device node (mode 0660); else root does
	// (mode 0600).
	Owner *Owner
}

// Add creates a macvtap in bridge mode on the TAP, brings it up, and makes
// its character device node under DevDir. On error nothing is left behind.
func Add(c Config) (Port, error) {
	if c.Name != "" {
		if err := checkIfName(c.Name); err != nil {
			return Port{}, err
		}
	}
	h, err := Open(c.TAP, c.MAC, c.Netns)
	if err != nil {
		return Port{}, err
	}
	defer h.Close()
	label := h.Label()
	sweepNodes(h, label)
	return addPort(h, label, c)
}

func addPort(h *netns.NS, label string, c Config) (Port, error) {
	// A name picked here can be taken by a concurrent add: try the next.
	for try := 0; ; try++ {
		links, err := h.Links()
		if err != nil {
			return Port{}, err
		}
		t, err := FindTAP(h, links, c.TAP)
		if err != nil {
			return Port{}, err
		}
		mac, err := PickMAC(h, links, c.MAC)
		if err != nil {
			return Port{}, err
		}
		name := c.Name
		if name == "" {
			name = freeName(links)
		} else if l := netns.LinkNamed(links, name); l != nil {
			return Port{}, Errorf(ErrNameInUse, h, name, "vm-port name %q is in use in %s (a %s device)", name, h, l.KindName())
		}
		err = h.NewMacvtap(name, t.Index, mac, freeIndex(links))
		// EEXIST: the name (when picked here) or the index was taken
		// meanwhile; a taken given name is caught on the next try.
		if errors.Is(err, unix.EEXIST) && try < 16 {
			continue
		}
		if err != nil {
			return Port{}, CreateErr(h, "macvtap", ErrNoMacvtap, name, c.TAP, err)
		}
		p, err := finishPort(h, label, name, t, mac, c.Owner)
		if err != nil {
			if derr := delLink(h, name, 0); derr != nil && !errors.Is(derr, ErrNoPort) {
				err = errors.Join(err, derr)
			}
			if errors.Is(err, errNodeTaken) && try < 16 {
				continue
			}
			return Port{}, err
		}
		return p, nil
	}
}

// finishPort quietens a new port, brings it up and makes its device node.
func finishPort(h *netns.NS, label, name string, t *netns.Link, mac net.HardwareAddr, owner *Owner) (Port, error) {
	l, err := h.Link(name)
	if err != nil {
		return Port{}, err
	}
	if err := quieten(h, l.Index, name); err != nil {
		return Port{}, err
	}
	if err := SetUp(h, l.Index, name, mac, t.Name); err != nil {
		return Port{}, err
	}
	p := Port{Name: name, Index: l.Index, MAC: mac, TAP: t.Name, TAPIndex: t.Index, Netns: Netns(h, label), Up: true}
	mnt, err := h.Sysfs(false)
	if err != nil {
		return Port{}, err
	}
	defer unix.Close(mnt)
	if p.Major, p.Minor, err = portDevt(mnt, name, p.Index); err != nil {
		return Port{}, err
	}
	if k := kernelNode(p.Index); fileExists(k) && !nodeIs(k, p.Major, p.Minor) {
		return Port{}, fmt.Errorf("%s belongs to another namespace's port: %w", k, errNodeTaken)
	}
	p.Dev = nodePath(label, name)
	if err := makeNode(p.Dev, p.Major, p.Minor, owner); err != nil {
		return Port{}, err
	}
	return p, nil
}

// quieten keeps the namespace's stack off port name (ifindex index) and
// has it take every multicast frame: without IPv6 its netdev joins no group
// for its guest (the solicited-node address of the guest's link-local
// one, which it made from the same MAC), and a macvtap only passes the
// multicast its netdev's groups hash to (drivers/net/macvlan.c:
// macvlan_set_mac_lists), unless IFF_ALLMULTI.
func quieten(h *netns.NS, index int, name string) error {
	if err := Quieten(h, name); err != nil {
		return err
	}
	if err := h.SetLink(index, netns.LinkChange{AllMulti: true}); err != nil {
		return err
	}
	return nil
}

// List lists the VM ports (macvtaps on a TAP) in namespace ns ("" for the
// caller's), only those on TAP tapName unless it is "", by ifindex.
// A port's counters are its netdev's: the kernel counts frames toward the
// guest as the port's rx and the guest's frames as its tx, and counts frames
// dropped because the guest did not read them as rx_dropped (and rx_errors).
// Read them over rtnetlink in the port's namespace (netns.NS.Stats), or from
// /sys/class/net/PORT/statistics by a process whose /sys was mounted there:
// sysfs shows the namespace it was mounted in, not the reader's.
func List(ns, tapName string) ([]Port, error) {
	h, err := netns.Open(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	label := h.Label()
	sweepNodes(h, label)
	mnt := -1
	defer func() {
		if mnt >= 0 {
			unix.Close(mnt)
		}
	}()
	// The namespace's sysfs is mounted at the first port, if any.
	return listPorts(h, label, tapName, func() (int, error) {
		if mnt < 0 {
			mnt, err = h.Sysfs(false)
		}
		return mnt, err
	})
}

// A Lister lists the VM ports on one TAP as List does, over a namespace
// handle and a sysfs view of that namespace opened once, and changes
// nothing (no stale node is swept): once made it needs no privilege, so a
// running tapfwd's /status can list the ports after it dropped its
// privileges, those added since it started included.
type Lister struct {
	h     *netns.NS
	label string
	tap   string
	mnt   int
}

// NewLister returns a Lister of the ports on TAP tapName ("" for every
// TAP) in h's namespace; h stays the caller's to close, after the
// Lister.
func NewLister(h *netns.NS, tapName string) (*Lister, error) {
	mnt, err := h.Sysfs(false)
	if err != nil {
		return nil, err
	}
	return &Lister{h: h, label: h.Label(), tap: tapName, mnt: mnt}, nil
}

// List lists the ports as List(ns, tapName) would, by name. It may run
// from several goroutines at once.
func (l *Lister) List() ([]Port, error) {
	return listPorts(l.h, l.label, l.tap, func() (int, error) { return l.mnt, nil })
}

// Close releases the sysfs view.
func (l *Lister) Close() error { return unix.Close(l.mnt) }

// listPorts is List in h (whose label is label), sysfs the namespace's
// sysfs view for the ports' device numbers.
func listPorts(h *netns.NS, label, tapName string, sysfs func() (int, error)) ([]Port, error) {
	links, err := h.Links()
	if err != nil {
		return nil, err
	}
	var only *netns.Link
	if tapName != "" {
		if only, err = FindTAP(h, links, tapName); err != nil {
			return nil, err
		}
	}
	byIndex := map[int]*netns.Link{}
	for i := range links {
		byIndex[links[i].Index] = &links[i]
	}
	var out []Port
	for _, l := range links {
		t := byIndex[l.Parent]
		if l.Kind != "macvtap" || l.ParentElsewhere || t == nil || !t.IsTAP() || (only != nil && t.Index != only.Index) {
			continue
		}
		p := Port{Name: l.Name, Index: l.Index, MAC: l.MAC, TAP: t.Name, TAPIndex: t.Index, Netns: Netns(h, label), Up: l.Up}
		mnt, err := sysfs()
		if err != nil {
			return nil, err
		}
		if p.Major, p.Minor, err = portDevt(mnt, l.Name, p.Index); err != nil {
			return nil, err
		}
		// Ours first; the kernel's devtmpfs node when it is this port's.
		for _, path := range []string{nodePath(label, l.Name), kernelNode(l.Index)} {
			if nodeIs(path, p.Major, p.Minor) {
				p.Dev = path
				break
			}
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Del deletes port name in namespace ns ("" for the caller's) and its
// device node. It refuses to delete anything that is not a macvtap.
func Del(ns, name string) error {
	if err := checkIfName(name); err != nil {
		return err
	}
	h, err := netns.Open(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	label := h.Label()
	err = delLink(h, name, 0)
	if errors.Is(err, ErrNoPort) {
		err = Errorf(ErrNoPort, h, name, "no vm-port %q in %s", name, h)
	}
	// The node goes either way: without its port it is stale.
	if rerr := removeNode(nodePath(label, name)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// AddN adds n ports with free names and random MACs on the TAP c.TAP in
// namespace c.Netns, owned by c.Owner. On error it removes the ports it
// made. The kernel deletes the ports with the TAP, but not their device
// nodes: call Remove before closing the TAP.
func AddN(c Config, n int) ([]Port, error) {
	var ports []Port
	for i := 0; i < n; i++ {
		p, err := Add(Config{TAP: c.TAP, Netns: c.Netns, Owner: c.Owner})
		if err != nil {
			return nil, errors.Join(err, Remove(ports))
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// Ensure makes the TAP c.TAP in c.Netns have at least n ports: the ports
// already on it (a persistent TAP keeps them across runs) are adopted,
// quietened, their device nodes made again where missing or stale (with
// c.Owner), and the rest added. It returns every port and, apart, those it
// added.
func Ensure(c Config, n int) (all, added []Port, err error) {
	have, err := List(c.Netns, c.TAP)
	if err != nil {
		return nil, nil, err
	}
	h, err := netns.Open(c.Netns)
	if err != nil {
		return nil, nil, err
	}
	defer h.Close()
	label := h.Label()
	for i := range have {
		p := &have[i]
		if err := quieten(h, p.Index, p.Name); err != nil {
			return nil, nil, err
		}
		if p.Dev != "" && strings.HasPrefix(p.Dev, DevDir+"/") && ownedBy(p.Dev, c.Owner) {
			continue
		}
		p.Dev = nodePath(label, p.Name)
		if err := makeNode(p.Dev, p.Major, p.Minor, c.Owner); err != nil {
			return nil, nil, err
		}
	}
	if len(have) < n {
		if added, err = AddN(c, n-len(have)); err != nil {
			return nil, nil, err
		}
	}
	return append(have, added...), added, nil
}

// ownedBy reports whether the node at path has the owner and mode makeNode
// gives it for owner.
func ownedBy(path string, owner *Owner) bool {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false
	}
	if owner == nil {
		return st.Uid == 0 && st.Mode&0o777 == 0o600
	}
	return int(st.Uid) == owner.UID && int(st.Gid) == owner.GID && st.Mode&0o777 == 0o660
}

// Remove deletes ports (those still there with the same ifindex) and their
// device nodes. Ports already gone, with their TAP or namespace, are not an
// error.
func Remove(ports []Port) error {
	var errs []error
	for _, p := range ports {
		if h, err := netns.Open(p.Netns); err == nil {
			if err := delLink(h, p.Name, p.Index); err != nil && !errors.Is(err, ErrNoPort) {
				errs = append(errs, err)
			}
			h.Close()
		} else if !errors.Is(err, netns.ErrNotFound) {
			errs = append(errs, err)
		}
		if p.Dev != "" && strings.HasPrefix(p.Dev, DevDir+"/") {
			errs = append(errs, removeNode(p.Dev))
		}
	}
	return errors.Join(errs...)
}

func checkIfName(name string) error {
	// net/core/dev.c: dev_valid_name.
	if name == "" || len(name) >= unix.IFNAMSIZ || name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n") {
		return fmt.Errorf("bad interface name %q: want 1 to %d bytes, no '/', ':' or spaces", name, unix.IFNAMSIZ-1)
	}
	return nil
}

func freeName(links []netns.Link) string {
	for n := 0; ; n++ {
		name := NamePrefix + strconv.Itoa(n)
		if netns.LinkNamed(links, name) == nil {
			return name
		}
	}
}

// delLink deletes macvtap name, only if its ifindex is index (when index is
// not 0). ErrNoPort when there is no such port.
func delLink(h *netns.NS, name string, index int) error {
	links, err := h.Links()
	if err != nil {
		return err
	}
	l := netns.LinkNamed(links, name)
	if l == nil || (index != 0 && l.Index != index) {
		return ErrNoPort
	}
	if l.Kind != "macvtap" {
		return fmt.Errorf("%q is a %s device, not a vm-port (macvtap): not deleting it", name, l.KindName())
	}
	err = h.DelLink(l.Index)
	if errors.Is(err, unix.ENODEV) {
		return ErrNoPort
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}
