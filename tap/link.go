package tap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// configure applies MTU, MAC and sysfs settings where the TAP was created,
// moves it into c.Netns, then brings it up and adds c.Addr there.
func configure(d *Device, c Config) error {
	here, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return fmt.Errorf("tap: rtnetlink: %w", err)
	}
	defer here.Close()
	idx, err := linkIndex(here, d.name)
	if err != nil {
		return err
	}
	ae := netlink.NewAttributeEncoder()
	if c.MTU > 0 {
		ae.Uint32(unix.IFLA_MTU, uint32(c.MTU))
	}
	if len(c.MAC) > 0 {
		if len(c.MAC) != 6 {
			return fmt.Errorf("tap: MAC %s is not a 6-byte Ethernet address", c.MAC)
		}
		ae.Bytes(unix.IFLA_ADDRESS, c.MAC)
	}
	if err := setLink(here, idx, 0, ae, fmt.Sprintf("set mtu %d / mac %s", c.MTU, c.MAC)); err != nil {
		return err
	}
	// Read the MAC back while the TAP is still visible here: the NIC side
	// asks for frames to it (PACKET_MR_UNICAST).
	ifi, err := net.InterfaceByIndex(int(idx))
	if err != nil {
		return fmt.Errorf("tap: read back %s: %w", d.name, err)
	}
	d.mac = ifi.HardwareAddr
	for attr, val := range c.Sysfs {
		if !d.feat.NAPI && (attr == "threaded" || attr == "gro_flush_timeout" || attr == "napi_defer_hard_irqs") {
			return fmt.Errorf("tap: %s needs IFF_NAPI, which the kernel did not grant", attr)
		}
		// The TAP's sysfs is visible only from its own namespace: write
		// before the move (the settings survive it).
		p := filepath.Join("/sys/class/net", d.name, attr)
		if err := os.WriteFile(p, []byte(val), 0); err != nil {
			return fmt.Errorf("tap: write %s = %s: %w", p, val, err)
		}
	}

	conn := here
	if c.Netns != "" {
		nsPath := filepath.Join("/run/netns", c.Netns)
		ns, err := os.Open(nsPath)
		if err != nil {
			return fmt.Errorf("tap: network namespace %q: %w (create it with: ip netns add %s)", c.Netns, err, c.Netns)
		}
		defer ns.Close()
		ae := netlink.NewAttributeEncoder()
		ae.Uint32(unix.IFLA_NET_NS_FD, uint32(ns.Fd()))
		if err := setLink(here, idx, 0, ae, "move to netns "+c.Netns); err != nil {
			return err
		}
		d.netns = c.Netns
		there, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: int(ns.Fd())})
		if err != nil {
			return fmt.Errorf("tap: rtnetlink in netns %s: %w", c.Netns, err)
		}
		defer there.Close()
		conn = there
		// The index is kept unless taken in the new namespace.
		if idx, err = linkIndex(there, d.name); err != nil {
			return err
		}
	}
	if err := setLink(conn, idx, unix.IFF_UP, nil, "set up"); err != nil {
		return err
	}
	if c.Addr.IsValid() {
		if err := addAddr(conn, idx, c.Addr); err != nil {
			return err
		}
	}
	return nil
}

func ifinfomsg(index int32, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	binary.NativeEndian.PutUint32(b[8:], flags)
	binary.NativeEndian.PutUint32(b[12:], change)
	return b
}

func linkIndex(c *netlink.Conn, name string) (int32, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, name)
	attrs, err := ae.Encode()
	if err != nil {
		return 0, err
	}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request},
		Data:   append(ifinfomsg(0, 0, 0), attrs...),
	})
	if err != nil {
		return 0, fmt.Errorf("tap: look up link %q: %w", name, err)
	}
	if len(msgs) == 0 || len(msgs[0].Data) < unix.SizeofIfInfomsg {
		return 0, fmt.Errorf("tap: look up link %q: short reply", name)
	}
	return int32(binary.NativeEndian.Uint32(msgs[0].Data[4:])), nil
}

// setLink sends RTM_NEWLINK for index: up sets IFF_UP when non-zero; ae adds
// attributes (nil for none).
func setLink(c *netlink.Conn, index int32, up uint32, ae *netlink.AttributeEncoder, what string) error {
	data := ifinfomsg(index, up, up)
	if ae != nil {
		attrs, err := ae.Encode()
		if err != nil {
			return err
		}
		if len(attrs) == 0 && up == 0 {
			return nil
		}
		data = append(data, attrs...)
	}
	_, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_NEWLINK, Flags: netlink.Request | netlink.Acknowledge},
		Data:   data,
	})
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("tap: %s: %w (an interface of that name already exists there)", what, err)
		}
		return fmt.Errorf("tap: %s: %w", what, err)
	}
	return nil
}

func addAddr(c *netlink.Conn, index int32, p netip.Prefix) error {
	fam, ip := unix.AF_INET, p.Addr().AsSlice()
	if p.Addr().Is6() && !p.Addr().Is4In6() {
		fam = unix.AF_INET6
	} else {
		ip = p.Addr().Unmap().AsSlice()
	}
	msg := make([]byte, unix.SizeofIfAddrmsg)
	msg[0] = byte(fam)
	msg[1] = byte(p.Bits())
	binary.NativeEndian.PutUint32(msg[4:], uint32(index))
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(unix.IFA_LOCAL, ip)
	ae.Bytes(unix.IFA_ADDRESS, ip)
	if fam == unix.AF_INET {
		bc := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked().Addr().As4()
		host := uint32(1)<<(32-p.Bits()) - 1
		v := binary.BigEndian.Uint32(bc[:]) | host
		binary.BigEndian.PutUint32(bc[:], v)
		if p.Bits() < 31 {
			ae.Bytes(unix.IFA_BROADCAST, bc[:])
		}
	}
	attrs, err := ae.Encode()
	if err != nil {
		return err
	}
	_, err = c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_NEWADDR, Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Excl},
		Data:   append(msg, attrs...),
	})
	if err != nil {
		return fmt.Errorf("tap: add address %s: %w", p, err)
	}
	return nil
}

// HardwareAddr parses a MAC for Config.MAC; "" gives nil.
func HardwareAddr(s string) (net.HardwareAddr, error) {
	if s == "" {
		return nil, nil
	}
	m, err := net.ParseMAC(s)
	if err != nil || len(m) != 6 {
		return nil, fmt.Errorf("tap: bad MAC %q: want six hex bytes like 02:00:00:00:00:01", s)
	}
	return m, nil
}

// LinkStats are a netdev's kernel counters (struct rtnl_link_stats64).
type LinkStats struct {
	RxPackets, TxPackets, RxBytes, TxBytes   uint64
	RxErrors, TxErrors, RxDropped, TxDropped uint64
}

// LinkReader reads netdev counters in one network namespace. Its netlink
// socket is opened once, so reading later needs no privilege (entering
// another namespace would need CAP_SYS_ADMIN).
type LinkReader struct{ c *netlink.Conn }

// NewLinkReader opens a reader for namespace netns ("" for the current one).
func NewLinkReader(netns string) (*LinkReader, error) {
	cfg := &netlink.Config{}
	if netns != "" {
		ns, err := os.Open(filepath.Join("/run/netns", netns))
		if err != nil {
			return nil, fmt.Errorf("tap: network namespace %q: %w", netns, err)
		}
		defer ns.Close()
		cfg.NetNS = int(ns.Fd())
	}
	c, err := netlink.Dial(unix.NETLINK_ROUTE, cfg)
	if err != nil {
		return nil, fmt.Errorf("tap: rtnetlink: %w", err)
	}
	return &LinkReader{c}, nil
}

// Close closes the reader's socket.
func (r *LinkReader) Close() error { return r.c.Close() }

// Read returns the counters of device name (IFLA_STATS64).
func (r *LinkReader) Read(name string) (LinkStats, error) {
	var st LinkStats
	c := r.c
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, name)
	attrs, err := ae.Encode()
	if err != nil {
		return st, err
	}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request},
		Data:   append(ifinfomsg(0, 0, 0), attrs...),
	})
	if err != nil {
		return st, fmt.Errorf("tap: link %q stats: %w", name, err)
	}
	if len(msgs) == 0 || len(msgs[0].Data) < unix.SizeofIfInfomsg {
		return st, fmt.Errorf("tap: link %q stats: short reply", name)
	}
	ad, err := netlink.NewAttributeDecoder(msgs[0].Data[unix.SizeofIfInfomsg:])
	if err != nil {
		return st, err
	}
	for ad.Next() {
		if ad.Type() != unix.IFLA_STATS64 {
			continue
		}
		b := ad.Bytes()
		f := []*uint64{&st.RxPackets, &st.TxPackets, &st.RxBytes, &st.TxBytes,
			&st.RxErrors, &st.TxErrors, &st.RxDropped, &st.TxDropped}
		for i, p := range f {
			if len(b) >= (i+1)*8 {
				*p = binary.NativeEndian.Uint64(b[i*8:])
			}
		}
		return st, nil
	}
	if err := ad.Err(); err != nil {
		return st, err
	}
	return st, fmt.Errorf("tap: link %q: no IFLA_STATS64", name)
}

// VMPortNames lists the VM ports (macvtap devices) stacked on the TAP named
// tapName in the reader's namespace. It changes nothing, so it suits
// scrapes.
func (r *LinkReader) VMPortNames(tapName string) ([]string, error) {
	links, err := dumpLinks(r.c)
	if err != nil {
		return nil, fmt.Errorf("tap: list links: %w", err)
	}
	var tapIndex int32 = -1
	for _, l := range links {
		if l.name == tapName {
			tapIndex = l.index
		}
	}
	var names []string
	for _, l := range links {
		if l.kind == "macvtap" && !l.parentNetns && l.parent == tapIndex {
			names = append(names, l.name)
		}
	}
	return names, nil
}
