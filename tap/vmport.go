package tap

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Errors a user can hit, for errors.Is. The errors returned say more.
var (
	ErrNoTAP     = errors.New("TAP not found")
	ErrNoPort    = errors.New("vm-port not found")
	ErrMACInUse  = errors.New("MAC in use")
	ErrNoMacvtap = errors.New("macvtap not supported")
)

// userError is a complete message for a user that matches a sentinel.
type userError struct {
	msg  string
	kind error
}

func (e *userError) Error() string { return e.msg }
func (e *userError) Unwrap() error { return e.kind }

func userErr(kind error, format string, a ...any) error {
	return &userError{msg: fmt.Sprintf(format, a...), kind: kind}
}

// DevDir holds the character device nodes tapfwd makes for VM ports, one
// per port: DevDir/PORT for a port in the initial network namespace,
// DevDir/NS:PORT for one in namespace NS (interface names cannot contain
// ':'). The kernel's own /dev/tapIFINDEX (devtmpfs) is ambiguous when
// several namespaces hold a macvtap with the same ifindex.
const DevDir = "/dev/tapfwd"

// PortPrefix starts the names tapfwd picks for ports: tfwvm0, tfwvm1, ...
const PortPrefix = "tfwvm"

// macvlanModeBridge is MACVLAN_MODE_BRIDGE (include/uapi/linux/if_link.h).
const macvlanModeBridge = 4

// VMPort is a macvtap device in bridge mode stacked on a TAP, for a VM's
// virtio-net to sit on its character device. Frames the guest sends leave
// through the TAP's transmit path (to tapfwd, then the NIC); frames tapfwd
// writes into the TAP reach the port whose MAC they are addressed to (and
// broadcasts reach every port); ports on one TAP reach each other without
// leaving it (drivers/net/macvlan.c: macvlan_queue_xmit,
// macvlan_handle_frame). The character device hands out and takes the
// guest's virtio_net_hdr, so guest TSO and checksum offload pass as GSO
// frames (drivers/net/tap.c: tap_get_user, tap_put_user).
type VMPort struct {
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

// VMPortConfig describes a port to add.
type VMPortConfig struct {
	TAP   string // the TAP netdev (tapfwd's --tap); required
	Netns string // namespace of the TAP (/run/netns/NAME); "" for the caller's
	Name  string // port name; "" picks tfwvmN, the lowest free N
	// MAC is the guest's address; nil picks a random locally administered
	// one. It must differ from every other address on the TAP's namespace.
	MAC net.HardwareAddr
}

// AddVMPort creates a macvtap in bridge mode on the TAP, brings it up, and
// makes its character device node under DevDir. On error nothing is left
// behind.
func AddVMPort(c VMPortConfig) (VMPort, error) {
	if c.TAP == "" {
		return VMPort{}, errors.New("tap: vm-port: no TAP given")
	}
	if c.Name != "" {
		if err := checkIfName(c.Name); err != nil {
			return VMPort{}, err
		}
	}
	if c.MAC != nil {
		if len(c.MAC) != 6 || c.MAC[0]&1 != 0 || isZero(c.MAC) {
			return VMPort{}, fmt.Errorf("tap: MAC %s is not a unicast Ethernet address (want six bytes, first byte even, e.g. 02:00:00:00:00:01)", c.MAC)
		}
	}
	h, err := openNS(c.Netns)
	if err != nil {
		return VMPort{}, err
	}
	defer h.close()
	label := h.label()
	sweepNodes(h, label)
	return addPort(h, label, c)
}

func addPort(h *nsHandle, label string, c VMPortConfig) (VMPort, error) {
	// A name picked here can be taken by a concurrent add: try the next.
	for try := 0; ; try++ {
		links, err := dumpLinks(h.conn)
		if err != nil {
			return VMPort{}, fmt.Errorf("tap: list links in %s: %w", h.where(), err)
		}
		t, err := findTAP(h, links, c.TAP)
		if err != nil {
			return VMPort{}, err
		}
		mac := c.MAC
		if mac == nil {
			if mac, err = freeMAC(links); err != nil {
				return VMPort{}, err
			}
		} else if l := linkWithMAC(links, mac); l != nil {
			return VMPort{}, userErr(ErrMACInUse, "tap: MAC %s is in use by %s in %s (choose another --mac, or leave it out for a random one)", mac, l.name, h.where())
		}
		name := c.Name
		if name == "" {
			name = freeName(links)
		} else if l := linkNamed(links, name); l != nil {
			return VMPort{}, fmt.Errorf("tap: vm-port name %q is in use in %s (a %s device): choose another --name", name, h.where(), l.describe())
		}
		err = createMacvtap(h.conn, name, t.index, mac)
		if errors.Is(err, unix.EEXIST) && c.Name == "" && try < 16 {
			continue
		}
		if err != nil {
			return VMPort{}, explainCreate(h, name, c.TAP, err)
		}
		p, err := finishPort(h, label, name, t, mac)
		if err != nil {
			if derr := delLink(h.conn, name, 0); derr != nil && !errors.Is(derr, ErrNoPort) {
				err = errors.Join(err, derr)
			}
			return VMPort{}, err
		}
		return p, nil
	}
}

// finishPort brings a new port up and makes its device node.
func finishPort(h *nsHandle, label, name string, t *linkInfo, mac net.HardwareAddr) (VMPort, error) {
	idx, err := linkIndex(h.conn, name)
	if err != nil {
		return VMPort{}, err
	}
	if err := setLink(h.conn, idx, unix.IFF_UP, nil, "set "+name+" up"); err != nil {
		// drivers/net/macvlan.c: macvlan_open refuses an address that the
		// lower device or another port on it has.
		if errors.Is(err, unix.EADDRINUSE) || errors.Is(err, unix.EADDRNOTAVAIL) {
			return VMPort{}, userErr(ErrMACInUse, "tap: MAC %s is in use on TAP %s (choose another --mac)", mac, t.name)
		}
		return VMPort{}, err
	}
	p := VMPort{Name: name, Index: int(idx), MAC: mac, TAP: t.name, TAPIndex: int(t.index), Netns: h.name, Up: true}
	if h.name == "" && label != "" && !strings.HasPrefix(label, "netns-") {
		p.Netns = label
	}
	mnt, err := h.sysfs()
	if err != nil {
		return VMPort{}, err
	}
	defer unix.Close(mnt)
	if p.Major, p.Minor, err = portDevt(mnt, name, p.Index); err != nil {
		return VMPort{}, err
	}
	p.Dev = nodePath(label, name)
	if err := makeNode(p.Dev, p.Major, p.Minor); err != nil {
		return VMPort{}, err
	}
	return p, nil
}

// VMPorts lists the VM ports (macvtaps on a TAP) in namespace netns ("" for
// the caller's), only those on TAP tapName unless it is "", by ifindex.
// A port's counters are its netdev's: the kernel counts frames toward the
// guest as the port's rx and the guest's frames as its tx, and counts frames
// dropped because the guest did not read them as rx_dropped (and rx_errors).
// Read them over rtnetlink in the port's namespace (IFLA_STATS64), or from
// /sys/class/net/PORT/statistics by a process whose /sys was mounted there:
// sysfs shows the namespace it was mounted in, not the reader's.
func VMPorts(netns, tapName string) ([]VMPort, error) {
	h, err := openNS(netns)
	if err != nil {
		return nil, err
	}
	defer h.close()
	label := h.label()
	sweepNodes(h, label)
	links, err := dumpLinks(h.conn)
	if err != nil {
		return nil, fmt.Errorf("tap: list links in %s: %w", h.where(), err)
	}
	var only *linkInfo
	if tapName != "" {
		if only, err = findTAP(h, links, tapName); err != nil {
			return nil, err
		}
	}
	byIndex := map[int32]*linkInfo{}
	for i := range links {
		byIndex[links[i].index] = &links[i]
	}
	mnt := -1
	defer func() {
		if mnt >= 0 {
			unix.Close(mnt)
		}
	}()
	var out []VMPort
	for _, l := range links {
		t := byIndex[l.parent]
		if l.kind != "macvtap" || l.parentNetns || t == nil || !t.isTAP() || (only != nil && t.index != only.index) {
			continue
		}
		p := VMPort{Name: l.name, Index: int(l.index), MAC: l.mac, TAP: t.name, TAPIndex: int(t.index),
			Netns: h.name, Up: l.up}
		if h.name == "" && label != "" && !strings.HasPrefix(label, "netns-") {
			p.Netns = label
		}
		if mnt < 0 {
			if mnt, err = h.sysfs(); err != nil {
				return nil, err
			}
		}
		if p.Major, p.Minor, err = portDevt(mnt, l.name, p.Index); err != nil {
			return nil, err
		}
		// Ours first; the kernel's devtmpfs node when it is this port's.
		for _, path := range []string{nodePath(label, l.name), fmt.Sprintf("/dev/tap%d", l.index)} {
			if nodeIs(path, p.Major, p.Minor) {
				p.Dev = path
				break
			}
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// DelVMPort deletes port name in namespace netns ("" for the caller's) and
// its device node. It refuses to delete anything that is not a macvtap.
func DelVMPort(netns, name string) error {
	if err := checkIfName(name); err != nil {
		return err
	}
	h, err := openNS(netns)
	if err != nil {
		return err
	}
	defer h.close()
	label := h.label()
	err = delLink(h.conn, name, 0)
	if errors.Is(err, ErrNoPort) {
		err = userErr(ErrNoPort, "tap: no vm-port %q in %s (list them with: tapfwd vm-port list%s)", name, h.where(), nsFlag(h.name))
	}
	// The node goes either way: without its port it is stale.
	if rerr := removeNode(nodePath(label, name)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// AddVMPorts adds n ports with kernel-free names and random MACs on the
// open TAP d, where it lives (d.Netns()). On error it removes the ports it
// made. The kernel deletes the ports with the TAP, but not their device
// nodes: call RemoveVMPorts before closing d.
func AddVMPorts(d *Device, n int) ([]VMPort, error) {
	var ports []VMPort
	for i := 0; i < n; i++ {
		p, err := AddVMPort(VMPortConfig{TAP: d.Name(), Netns: d.Netns()})
		if err != nil {
			return nil, errors.Join(err, RemoveVMPorts(ports))
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// RemoveVMPorts deletes ports (those still there with the same ifindex)
// and their device nodes. Ports already gone, with their TAP or namespace,
// are not an error.
func RemoveVMPorts(ports []VMPort) error {
	var errs []error
	for _, p := range ports {
		if h, err := openNS(p.Netns); err == nil {
			if err := delLink(h.conn, p.Name, int32(p.Index)); err != nil && !errors.Is(err, ErrNoPort) {
				errs = append(errs, err)
			}
			h.close()
		} else if !errors.Is(err, ErrNoNetns) {
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
		return fmt.Errorf("tap: bad interface name %q: want 1 to %d bytes, no '/', ':' or spaces", name, unix.IFNAMSIZ-1)
	}
	return nil
}

func isZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func findTAP(h *nsHandle, links []linkInfo, name string) (*linkInfo, error) {
	l := linkNamed(links, name)
	if l == nil {
		hint := ""
		if h.name == "" {
			hint = " If it moved the TAP with --tap-netns, pass that namespace with --netns."
		}
		return nil, userErr(ErrNoTAP, "tap: no TAP %q in %s (is tapfwd running with --tap %s?%s)", name, h.where(), name, hint)
	}
	if !l.isTAP() {
		return nil, userErr(ErrNoTAP, "tap: %q in %s is a %s device, not a TAP", name, h.where(), l.describe())
	}
	return l, nil
}

func freeName(links []linkInfo) string {
	for n := 0; ; n++ {
		name := PortPrefix + strconv.Itoa(n)
		if linkNamed(links, name) == nil {
			return name
		}
	}
}

func freeMAC(links []linkInfo) (net.HardwareAddr, error) {
	for {
		m := make(net.HardwareAddr, 6)
		if _, err := rand.Read(m); err != nil {
			return nil, err
		}
		m[0] = m[0]&^1 | 2 // unicast, locally administered
		if linkWithMAC(links, m) == nil {
			return m, nil
		}
	}
}

func explainCreate(h *nsHandle, name, tapName string, err error) error {
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		// net/core/rtnetlink.c: rtnl_newlink answers EOPNOTSUPP ("Unknown
		// device type") when no macvtap link type is registered, even
		// after trying to load the module.
		return userErr(ErrNoMacvtap, "tap: create macvtap %s on %s: this kernel has no macvtap (CONFIG_MACVTAP): load the module with modprobe macvtap (%v)", name, tapName, err)
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("tap: create macvtap %s: an interface of that name exists in %s: choose another --name", name, h.where())
	case errors.Is(err, unix.EADDRINUSE), errors.Is(err, unix.EADDRNOTAVAIL):
		return userErr(ErrMACInUse, "tap: create macvtap %s: its MAC is in use on TAP %s (choose another --mac)", name, tapName)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("tap: create macvtap %s: %w: vm-ports need CAP_NET_ADMIN (run as root)", name, err)
	}
	return fmt.Errorf("tap: create macvtap %s on %s: %w", name, tapName, err)
}

// linkInfo is what RTM_GETLINK says about one interface.
type linkInfo struct {
	index, parent int32 // parent: IFLA_LINK, the lower device
	parentNetns   bool  // IFLA_LINK_NETNSID: parent is in another namespace
	name          string
	mac           net.HardwareAddr
	kind          string // IFLA_INFO_KIND: "tun", "macvtap", "veth", ...
	tunType       uint8  // IFLA_TUN_TYPE: IFF_TUN or IFF_TAP
	up            bool
}

func (l *linkInfo) isTAP() bool { return l.kind == "tun" && l.tunType == unix.IFF_TAP }

func (l *linkInfo) describe() string {
	switch {
	case l.kind == "tun" && l.tunType == unix.IFF_TUN:
		return "TUN (layer 3)"
	case l.kind == "":
		return "physical"
	}
	return l.kind
}

func linkNamed(links []linkInfo, name string) *linkInfo {
	for i := range links {
		if links[i].name == name {
			return &links[i]
		}
	}
	return nil
}

func linkWithMAC(links []linkInfo, mac net.HardwareAddr) *linkInfo {
	for i := range links {
		if len(links[i].mac) == len(mac) && string(links[i].mac) == string(mac) {
			return &links[i]
		}
	}
	return nil
}

func dumpLinks(c *netlink.Conn) ([]linkInfo, error) {
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request | netlink.Dump},
		Data:   ifinfomsg(0, 0, 0),
	})
	if err != nil {
		return nil, err
	}
	out := make([]linkInfo, 0, len(msgs))
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		l, err := parseLink(m.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func parseLink(b []byte) (linkInfo, error) {
	l := linkInfo{
		index: int32(binary.NativeEndian.Uint32(b[4:])),
		up:    binary.NativeEndian.Uint32(b[8:])&unix.IFF_UP != 0,
	}
	ad, err := netlink.NewAttributeDecoder(b[unix.SizeofIfInfomsg:])
	if err != nil {
		return l, err
	}
	var infoData []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_IFNAME:
			l.name = ad.String()
		case unix.IFLA_ADDRESS:
			l.mac = net.HardwareAddr(ad.Bytes())
		case unix.IFLA_LINK:
			l.parent = int32(ad.Uint32())
		case unix.IFLA_LINK_NETNSID:
			l.parentNetns = true
		case unix.IFLA_LINKINFO:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					switch nad.Type() {
					case unix.IFLA_INFO_KIND:
						l.kind = nad.String()
					case unix.IFLA_INFO_DATA:
						infoData = nad.Bytes()
					}
				}
				return nil
			})
		}
	}
	if err := ad.Err(); err != nil {
		return l, err
	}
	if l.kind == "tun" && infoData != nil {
		if d, err := netlink.NewAttributeDecoder(infoData); err == nil {
			for d.Next() {
				if d.Type() == unix.IFLA_TUN_TYPE {
					l.tunType = d.Uint8()
				}
			}
		}
	}
	return l, nil
}

func createMacvtap(c *netlink.Conn, name string, parent int32, mac net.HardwareAddr) error {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, name)
	ae.Uint32(unix.IFLA_LINK, uint32(parent))
	ae.Bytes(unix.IFLA_ADDRESS, mac)
	ae.Nested(unix.IFLA_LINKINFO, func(li *netlink.AttributeEncoder) error {
		li.String(unix.IFLA_INFO_KIND, "macvtap")
		li.Nested(unix.IFLA_INFO_DATA, func(d *netlink.AttributeEncoder) error {
			d.Uint32(unix.IFLA_MACVLAN_MODE, macvlanModeBridge)
			return nil
		})
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		return err
	}
	_, err = c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_NEWLINK, Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Excl},
		Data:   append(ifinfomsg(0, 0, 0), attrs...),
	})
	return err
}

// delLink deletes macvtap name, only if its ifindex is index (when index is
// not 0). ErrNoPort when there is no such port.
func delLink(c *netlink.Conn, name string, index int32) error {
	links, err := dumpLinks(c)
	if err != nil {
		return fmt.Errorf("tap: list links: %w", err)
	}
	l := linkNamed(links, name)
	if l == nil || (index != 0 && l.index != index) {
		return ErrNoPort
	}
	if l.kind != "macvtap" {
		return fmt.Errorf("tap: %q is a %s device, not a vm-port (macvtap): not deleting it", name, l.describe())
	}
	_, err = c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_DELLINK, Flags: netlink.Request | netlink.Acknowledge},
		Data:   ifinfomsg(l.index, 0, 0),
	})
	if errors.Is(err, unix.ENODEV) {
		return ErrNoPort
	}
	if err != nil {
		return fmt.Errorf("tap: delete %s: %w", name, err)
	}
	return nil
}

// portDevt reads the port's character device number from its sysfs
// (drivers/net/macvtap.c: macvtap_device_event creates device tapIFINDEX
// in class macvtap, under the netdev).
func portDevt(mnt int, name string, index int) (major, minor uint32, err error) {
	rel := fmt.Sprintf("class/net/%s/macvtap/tap%d/dev", name, index)
	s, err := readAt(mnt, rel)
	if err != nil {
		return 0, 0, fmt.Errorf("tap: character device of %s: %w", name, err)
	}
	a, b, ok := strings.Cut(s, ":")
	ma, err1 := strconv.ParseUint(a, 10, 32)
	mi, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("tap: character device of %s: bad %s %q", name, rel, s)
	}
	return uint32(ma), uint32(mi), nil
}

func nodePath(label, name string) string {
	if label == "" {
		return filepath.Join(DevDir, name)
	}
	return filepath.Join(DevDir, label+":"+name)
}

// makeNode creates the character device node path, replacing a stale one.
func makeNode(path string, major, minor uint32) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tap: remove stale %w", err)
	}
	var err error
	// Twice: removeNode may take the directory away when it is empty.
	for try := 0; try < 2; try++ {
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("tap: %w", err)
		}
		// 0600 as the kernel's own /dev/tapN: opening it is access to the
		// network. chown it to let an unprivileged QEMU open it.
		if err = unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(major, minor))); !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("tap: create device node %s: %w", path, os.NewSyscallError("mknod", err))
	}
	return nil
}

func nodeIs(path string, major, minor uint32) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(major, minor)
}

// removeNode removes a device node, and DevDir once it is empty.
func removeNode(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tap: %w", err)
	}
	os.Remove(DevDir) // fails while other nodes are there
	return nil
}

// sweepNodes removes stale device nodes: those of namespace label whose
// port is gone or has another device number (ports go away with their TAP,
// and a minor number is reused by the next port), and those of named
// namespaces that no longer exist. Errors are ignored: a node left over
// is removed by the next sweep.
func sweepNodes(h *nsHandle, label string) {
	ents, err := os.ReadDir(DevDir)
	if err != nil {
		return
	}
	var mine []string
	for _, e := range ents {
		ns, port, hasNS := strings.Cut(e.Name(), ":")
		if !hasNS {
			ns, port = "", e.Name()
		}
		switch {
		case ns == label:
			mine = append(mine, port)
		case hasNS && !strings.HasPrefix(ns, "netns-"):
			if _, err := os.Stat(filepath.Join(netnsDir, ns)); errors.Is(err, os.ErrNotExist) {
				removeNode(filepath.Join(DevDir, e.Name()))
			}
		}
	}
	if len(mine) == 0 {
		return
	}
	links, err := dumpLinks(h.conn)
	if err != nil {
		return
	}
	mnt, err := h.sysfs()
	if err != nil {
		return
	}
	defer unix.Close(mnt)
	for _, port := range mine {
		path := nodePath(label, port)
		l := linkNamed(links, port)
		if l != nil && l.kind == "macvtap" {
			if ma, mi, err := portDevt(mnt, port, int(l.index)); err == nil && nodeIs(path, ma, mi) {
				continue
			}
		}
		removeNode(path)
	}
}

func nsFlag(ns string) string {
	if ns == "" {
		return ""
	}
	return " --netns " + ns
}
