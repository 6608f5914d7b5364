package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Link is one interface as RTM_GETLINK describes it.
type Link struct {
	Index int
	Name  string
	MAC   net.HardwareAddr
	MTU   int
	Up    bool
	// Loopback is IFF_LOOPBACK: the namespace's lo.
	Loopback bool
	// Kind is IFLA_INFO_KIND: "tun", "macvtap", "veth", ...; "" for a
	// physical device (or the loopback).
	Kind string
	// TunType is IFLA_TUN_TYPE for Kind "tun": unix.IFF_TUN or IFF_TAP.
	TunType uint8
	// Parent is IFLA_LINK, the lower device's index (a macvtap's TAP).
	Parent int
	// ParentElsewhere (IFLA_LINK_NETNSID) says Parent is an index in
	// another namespace.
	ParentElsewhere bool
	// Alias is IFLA_IFALIAS, the free-form description ip link shows.
	Alias string
	// GROMaxSize and GROIPv4MaxSize are the largest packets GRO builds on
	// this device (IFLA_GRO_MAX_SIZE, IFLA_GRO_IPV4_MAX_SIZE; 0 when the
	// kernel does not report them).
	GROMaxSize, GROIPv4MaxSize int
	// Tun holds IFLA_INFO_DATA of a tun device (Kind "tun").
	Tun TunInfo
}

// TunInfo is what the kernel reports of a TUN/TAP device
// (drivers/net/tun.c: tun_fill_info).
type TunInfo struct {
	VnetHdr    bool // IFF_VNET_HDR
	MultiQueue bool // IFF_MULTI_QUEUE
	Persist    bool // TUNSETPERSIST: the device outlives its file descriptors
	// Queues is the number of queues a process has attached now (0 for a
	// persistent device nobody holds).
	Queues int
	// Owner and Group are the user and group that may attach queues
	// without CAP_NET_ADMIN (TUNSETOWNER, TUNSETGROUP); -1 for none.
	Owner, Group int
}

// IsTAP reports whether l is a TAP (a layer-2 tun device).
func (l *Link) IsTAP() bool { return l.Kind == "tun" && l.TunType == unix.IFF_TAP }

// KindName says what kind of device l is, for messages: "veth",
// "macvtap", "TUN (layer 3)", "loopback", "physical", ...
func (l *Link) KindName() string {
	switch {
	case l.Kind == "tun" && l.TunType == unix.IFF_TUN:
		return "TUN (layer 3)"
	case l.Loopback:
		return "loopback"
	case l.Kind == "":
		return "physical"
	}
	return l.Kind
}

// LinkNamed returns the link named name in links, or nil.
func LinkNamed(links []Link, name string) *Link {
	for i := range links {
		if links[i].Name == name {
			return &links[i]
		}
	}
	return nil
}

// LinkWithMAC returns a link in links whose address is mac, or nil.
func LinkWithMAC(links []Link, mac net.HardwareAddr) *Link {
	for i := range links {
		if len(links[i].MAC) == len(mac) && string(links[i].MAC) == string(mac) {
			return &links[i]
		}
	}
	return nil
}

func ifinfomsg(index int, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	binary.NativeEndian.PutUint32(b[8:], flags)
	binary.NativeEndian.PutUint32(b[12:], change)
	return b
}

// opErr is the shape of every error from a request: what was asked, where,
// and the kernel's answer; EPERM also matches ErrNotPermitted.
func (n *NS) opErr(op string, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s in %s: %w: %w", op, n, err, ErrNotPermitted)
	}
	return fmt.Errorf("%s in %s: %w", op, n, err)
}

// execute sends a request with attributes ae (nil for none) after the
// fixed header hdr.
func (n *NS) execute(typ netlink.HeaderType, flags netlink.HeaderFlags, hdr []byte, ae *netlink.AttributeEncoder) ([]netlink.Message, error) {
	data := hdr
	if ae != nil {
		attrs, err := ae.Encode()
		if err != nil {
			return nil, err
		}
		data = append(data, attrs...)
	}
	return n.conn.Execute(netlink.Message{Header: netlink.Header{Type: typ, Flags: flags}, Data: data})
}

// Links lists every interface in the namespace.
func (n *NS) Links() ([]Link, error) {
	msgs, err := n.execute(unix.RTM_GETLINK, netlink.Request|netlink.Dump, ifinfomsg(0, 0, 0), nil)
	if err != nil {
		return nil, n.opErr("list links", err)
	}
	out := make([]Link, 0, len(msgs))
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		l, _, err := parseLink(m.Data)
		if err != nil {
			return nil, fmt.Errorf("list links in %s: %w", n, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// Link describes interface name. A missing one is unix.ENODEV.
func (n *NS) Link(name string) (Link, error) {
	l, _, err := n.getLink(name)
	return l, err
}

// getLink describes interface name and returns its IFLA_STATS64.
func (n *NS) getLink(name string) (Link, []byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, name)
	msgs, err := n.execute(unix.RTM_GETLINK, netlink.Request, ifinfomsg(0, 0, 0), ae)
	if err != nil {
		return Link{}, nil, n.opErr(fmt.Sprintf("look up link %q", name), err)
	}
	if len(msgs) == 0 || len(msgs[0].Data) < unix.SizeofIfInfomsg {
		return Link{}, nil, fmt.Errorf("look up link %q in %s: the kernel's reply is short", name, n)
	}
	l, stats, err := parseLink(msgs[0].Data)
	if err != nil {
		return Link{}, nil, fmt.Errorf("look up link %q in %s: %w", name, n, err)
	}
	return l, stats, nil
}

// parseLink decodes an ifinfomsg and its attributes, and returns
// IFLA_STATS64 (nil when absent) apart.
func parseLink(b []byte) (Link, []byte, error) {
	l := Link{
		Index:    int(int32(binary.NativeEndian.Uint32(b[4:]))),
		Up:       binary.NativeEndian.Uint32(b[8:])&unix.IFF_UP != 0,
		Loopback: binary.NativeEndian.Uint32(b[8:])&unix.IFF_LOOPBACK != 0,
	}
	ad, err := netlink.NewAttributeDecoder(b[unix.SizeofIfInfomsg:])
	if err != nil {
		return l, nil, err
	}
	var infoData, stats []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_IFNAME:
			l.Name = ad.String()
		case unix.IFLA_ADDRESS:
			l.MAC = net.HardwareAddr(ad.Bytes())
		case unix.IFLA_MTU:
			l.MTU = int(ad.Uint32())
		case unix.IFLA_LINK:
			l.Parent = int(int32(ad.Uint32()))
		case unix.IFLA_LINK_NETNSID:
			l.ParentElsewhere = true
		case unix.IFLA_STATS64:
			stats = ad.Bytes()
		case unix.IFLA_IFALIAS:
			l.Alias = ad.String()
		case unix.IFLA_GRO_MAX_SIZE:
			l.GROMaxSize = int(ad.Uint32())
		case unix.IFLA_GRO_IPV4_MAX_SIZE:
			l.GROIPv4MaxSize = int(ad.Uint32())
		case unix.IFLA_LINKINFO:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					switch nad.Type() {
					case unix.IFLA_INFO_KIND:
						l.Kind = nad.String()
					case unix.IFLA_INFO_DATA:
						infoData = nad.Bytes()
					}
				}
				return nil
			})
		}
	}
	if err := ad.Err(); err != nil {
		return l, nil, err
	}
	if l.Kind == "tun" {
		l.Tun.Owner, l.Tun.Group = -1, -1
		parseTun(&l, infoData)
	}
	return l, stats, nil
}

func parseTun(l *Link, data []byte) {
	d, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return
	}
	for d.Next() {
		switch d.Type() {
		case unix.IFLA_TUN_TYPE:
			l.TunType = d.Uint8()
		case unix.IFLA_TUN_VNET_HDR:
			l.Tun.VnetHdr = d.Uint8() != 0
		case unix.IFLA_TUN_MULTI_QUEUE:
			l.Tun.MultiQueue = d.Uint8() != 0
		case unix.IFLA_TUN_PERSIST:
			l.Tun.Persist = d.Uint8() != 0
		case unix.IFLA_TUN_NUM_QUEUES:
			l.Tun.Queues = int(d.Uint32())
		// drivers/net/tun.c: tun_fill_info puts them only when set.
		case unix.IFLA_TUN_OWNER:
			l.Tun.Owner = int(d.Uint32())
		case unix.IFLA_TUN_GROUP:
			l.Tun.Group = int(d.Uint32())
		}
	}
}

// LinkChange is what SetLink changes; zero fields are left as they are.
type LinkChange struct {
	MTU int
	MAC net.HardwareAddr
	Up  bool // set IFF_UP
	// AllMulti sets IFF_ALLMULTI: the link takes every multicast frame,
	// not only those of the groups its stack joined.
	AllMulti bool
	// Netns moves the link into that namespace; its index there is its
	// old one unless that is taken (look it up there).
	Netns *NS
	// Alias sets IFLA_IFALIAS.
	Alias string
}

func (c LinkChange) String() string {
	var s []string
	if c.MTU > 0 {
		s = append(s, fmt.Sprintf("mtu %d", c.MTU))
	}
	if len(c.MAC) > 0 {
		s = append(s, "mac "+c.MAC.String())
	}
	if c.Netns != nil {
		s = append(s, "move to "+c.Netns.String())
	}
	if c.Alias != "" {
		s = append(s, fmt.Sprintf("alias %q", c.Alias))
	}
	if c.AllMulti {
		s = append(s, "allmulticast")
	}
	if c.Up {
		s = append(s, "up")
	}
	return strings.Join(s, ", ")
}

// SetLink applies c to the link with index (RTM_NEWLINK). A move onto a
// name taken in the target namespace is unix.EEXIST.
func (n *NS) SetLink(index int, c LinkChange) error {
	if c.String() == "" {
		return nil
	}
	if len(c.MAC) > 0 && len(c.MAC) != 6 {
		return fmt.Errorf("MAC %s is not a 6-byte Ethernet address", c.MAC)
	}
	ae := netlink.NewAttributeEncoder()
	if c.MTU > 0 {
		ae.Uint32(unix.IFLA_MTU, uint32(c.MTU))
	}
	if len(c.MAC) > 0 {
		ae.Bytes(unix.IFLA_ADDRESS, c.MAC)
	}
	if c.Alias != "" {
		ae.String(unix.IFLA_IFALIAS, c.Alias)
	}
	if c.Netns != nil {
		target := c.Netns.file
		if target == nil {
			f, err := openOwn()
			if err != nil {
				return err
			}
			defer f.Close()
			target = f
		}
		ae.Uint32(unix.IFLA_NET_NS_FD, uint32(target.Fd()))
	}
	var flags uint32
	if c.Up {
		flags |= unix.IFF_UP
	}
	if c.AllMulti {
		flags |= unix.IFF_ALLMULTI
	}
	_, err := n.execute(unix.RTM_NEWLINK, netlink.Request|netlink.Acknowledge, ifinfomsg(index, flags, flags), ae)
	if err != nil {
		return n.opErr(fmt.Sprintf("set link %d %s", index, c), err)
	}
	return nil
}

// AddAddr assigns p to the link with index (RTM_NEWADDR), with the
// broadcast address for an IPv4 prefix shorter than /31.
func (n *NS) AddAddr(index int, p netip.Prefix) error {
	msg, ae := addrMsg(index, p)
	if msg[0] == unix.AF_INET {
		bc := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked().Addr().As4()
		host := uint32(1)<<(32-p.Bits()) - 1
		binary.BigEndian.PutUint32(bc[:], binary.BigEndian.Uint32(bc[:])|host)
		if p.Bits() < 31 {
			ae.Bytes(unix.IFA_BROADCAST, bc[:])
		}
	}
	_, err := n.execute(unix.RTM_NEWADDR, netlink.Request|netlink.Acknowledge|netlink.Create|netlink.Excl, msg, ae)
	if err != nil {
		return n.opErr(fmt.Sprintf("add address %s to link %d", p, index), err)
	}
	return nil
}

// macvlanModeBridge is MACVLAN_MODE_BRIDGE (include/uapi/linux/if_link.h).
const macvlanModeBridge = 4

// NewMacvtap creates macvtap name in bridge mode on the link with index
// parent, with address mac, and interface index index (0: the kernel's
// next). The kernel's answers stay matchable: EOPNOTSUPP when it has no
// macvtap (net/core/rtnetlink.c: rtnl_newlink), EEXIST for a taken name,
// EADDRINUSE for a taken address; EEXIST for a taken index too
// (net/core/rtnetlink.c: rtnl_newlink finds the index taken).
func (n *NS) NewMacvtap(name string, parent int, mac net.HardwareAddr, index int) error {
	return n.newMacvlan("macvtap", name, parent, mac, index)
}

// NewMacvlan creates macvlan name in bridge mode on the link with index
// parent, with address mac: a plain netdev that frames to mac reach, and
// that reaches the other macvlans and macvtaps in bridge mode on parent
// without leaving it (drivers/net/macvlan.c). The kernel's answers are
// NewMacvtap's.
func (n *NS) NewMacvlan(name string, parent int, mac net.HardwareAddr) error {
	return n.newMacvlan("macvlan", name, parent, mac, 0)
}

func (n *NS) newMacvlan(kind, name string, parent int, mac net.HardwareAddr, index int) error {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, name)
	ae.Uint32(unix.IFLA_LINK, uint32(parent))
	ae.Bytes(unix.IFLA_ADDRESS, mac)
	ae.Nested(unix.IFLA_LINKINFO, func(li *netlink.AttributeEncoder) error {
		li.String(unix.IFLA_INFO_KIND, kind)
		li.Nested(unix.IFLA_INFO_DATA, func(d *netlink.AttributeEncoder) error {
			d.Uint32(unix.IFLA_MACVLAN_MODE, macvlanModeBridge)
			return nil
		})
		return nil
	})
	_, err := n.execute(unix.RTM_NEWLINK, netlink.Request|netlink.Acknowledge|netlink.Create|netlink.Excl, ifinfomsg(index, 0, 0), ae)
	if err != nil {
		return n.opErr(fmt.Sprintf("create %s %s on link %d", kind, name, parent), err)
	}
	return nil
}

// DelLink deletes the link with index (RTM_DELLINK); a missing one is
// unix.ENODEV.
func (n *NS) DelLink(index int) error {
	_, err := n.execute(unix.RTM_DELLINK, netlink.Request|netlink.Acknowledge, ifinfomsg(index, 0, 0), nil)
	if err != nil {
		return n.opErr(fmt.Sprintf("delete link %d", index), err)
	}
	return nil
}
