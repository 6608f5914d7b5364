package tap

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
)

// Errors about persistent TAPs (Config.Persist), for errors.Is.
var (
	// ErrPersistent means a persistent TAP of that name exists and
	// Config.Persist was not asked for: attaching would leave it behind.
	// It comes with ErrNameInUse.
	ErrPersistent = errors.New("a persistent TAP of that name exists")
	// ErrMismatch means the existing persistent TAP was made with other
	// settings than those asked for; nothing was changed.
	ErrMismatch = errors.New("the persistent TAP has other settings")
	// ErrOwned means the persistent TAP has an owner or a group
	// (TUNSETOWNER, TUNSETGROUP): that user or group may attach queues
	// without CAP_NET_ADMIN, so read and write the lab's frames. It is not
	// attached to.
	ErrOwned = errors.New("the persistent TAP has an owner or group")
	// ErrAttached means another process holds queues of the TAP.
	ErrAttached = errors.New("another process is attached to the TAP")
	// ErrNoTAP means there is no TAP of that name to remove.
	ErrNoTAP = errors.New("no such TAP")
)

// kindError is a complete message that matches its kinds with errors.Is.
type kindError struct {
	msg   string
	kinds []error
}

func (e *kindError) Error() string   { return e.msg }
func (e *kindError) Unwrap() []error { return e.kinds }

// recordPrefix starts the alias (IFLA_IFALIAS) of a persistent TAP tapfwd
// made: the settings the next run must match. The device carries its own
// record, so nothing is left behind when it is removed.
const recordPrefix = "tapfwd:"

// record is what a persistent TAP was made with.
type record struct {
	queues     int
	napi, vnet bool
}

// attachedError is ErrAttached for the TAP name in ns, which has n queues
// attached.
func attachedError(name string, ns *netns.NS, n int) error {
	queues := "1 queue"
	if n != 1 {
		queues = fmt.Sprintf("%d queues", n)
	}
	return fmt.Errorf("TAP %s in %s has %s attached: %w", name, ns, queues, ErrAttached)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (r record) String() string {
	return fmt.Sprintf("%squeues=%d,napi=%s,vnet-hdr=%s", recordPrefix, r.queues, onOff(r.napi), onOff(r.vnet))
}

// parseRecord reads an alias written by record.String.
func parseRecord(alias string) (record, bool) {
	rest, ok := strings.CutPrefix(alias, recordPrefix)
	if !ok {
		return record{}, false
	}
	var r record
	seen := 0
	for kv := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "queues":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return record{}, false
			}
			r.queues = n
		case "napi":
			r.napi = v == "on"
		case "vnet-hdr":
			r.vnet = v == "on"
		default:
			continue
		}
		seen++
	}
	return r, seen == 3
}

// existing looks for an interface named c.Name where the TAP is to live
// (c.Netns, else here) and, when the TAP is to move, here too (it is made
// here first). It returns the namespace it was found in (the caller closes
// it) and the link; a nil namespace means the name is free.
func existing(c Config, there *netns.NS) (*netns.NS, netns.Link, error) {
	if c.Name == "" || strings.Contains(c.Name, "%") {
		return nil, netns.Link{}, nil
	}
	here, err := netns.Open("")
	if err != nil {
		return nil, netns.Link{}, err
	}
	for _, ns := range []*netns.NS{there, here} {
		if ns == nil {
			continue
		}
		l, err := ns.Link(c.Name)
		if errors.Is(err, unix.ENODEV) {
			continue
		}
		if err != nil {
			here.Close()
			return nil, l, err
		}
		if ns == there {
			here.Close()
			// A fresh handle: the caller closes it, and Open closes there.
			ns, err = netns.Open(c.Netns)
			if err != nil {
				return nil, l, err
			}
		}
		return ns, l, nil
	}
	here.Close()
	return nil, netns.Link{}, nil
}

// checkExisting says why the interface l in ns cannot be attached to with
// c and the negotiated features f, or nil when it can.
func checkExisting(c Config, f Features, ns *netns.NS, l netns.Link) error {
	if !l.IsTAP() {
		return fmt.Errorf("name %q is in use in %s (a %s device): %w", c.Name, ns, l.KindName(), ErrNameInUse)
	}
	if !l.Tun.Persist {
		return fmt.Errorf("name %q is in use in %s (a TAP another process holds): %w", c.Name, ns, ErrNameInUse)
	}
	if !c.Persist {
		return &kindError{fmt.Sprintf("name %q is in use in %s by a persistent TAP an earlier run left", c.Name, ns),
			[]error{ErrPersistent, ErrNameInUse}}
	}
	if err := checkOwner(c.Name, ns, l.Tun); err != nil {
		return err
	}
	if l.Tun.Queues > 0 {
		return attachedError(c.Name, ns, l.Tun.Queues)
	}
	var diff []string
	if l.Tun.MultiQueue != f.MultiQueue {
		diff = append(diff, fmt.Sprintf("multi-queue %s (asked %s)", onOff(l.Tun.MultiQueue), onOff(f.MultiQueue)))
	}
	if l.Tun.VnetHdr != f.VnetHdr {
		diff = append(diff, fmt.Sprintf("vnet-hdr %s (asked %s)", onOff(l.Tun.VnetHdr), onOff(f.VnetHdr)))
	}
	if r, ok := parseRecord(l.Alias); ok {
		if r.queues != c.Queues {
			diff = append(diff, fmt.Sprintf("queues %d (asked %d)", r.queues, c.Queues))
		}
		if r.napi != f.NAPI {
			diff = append(diff, fmt.Sprintf("napi %s (asked %s)", onOff(r.napi), onOff(f.NAPI)))
		}
	}
	if c.MTU > 0 && l.MTU != c.MTU {
		diff = append(diff, fmt.Sprintf("mtu %d (asked %d)", l.MTU, c.MTU))
	}
	if len(c.MAC) > 0 && l.MAC.String() != c.MAC.String() {
		diff = append(diff, fmt.Sprintf("mac %s (asked %s)", l.MAC, c.MAC))
	}
	if len(diff) > 0 {
		return &kindError{fmt.Sprintf("the persistent TAP %s in %s was made with other settings: %s", c.Name, ns, strings.Join(diff, ", ")),
			[]error{ErrMismatch}}
	}
	return nil
}

// checkOwner refuses a TAP with an owner or group: tapfwd never sets
// them, and with one set that user or group attaches queues as it likes
// (drivers/net/tun.c: tun_not_capable).
func checkOwner(name string, ns *netns.NS, t netns.TunInfo) error {
	var set []string
	if t.Owner >= 0 {
		set = append(set, fmt.Sprintf("owner %d", t.Owner))
	}
	if t.Group >= 0 {
		set = append(set, fmt.Sprintf("group %d", t.Group))
	}
	if len(set) == 0 {
		return nil
	}
	return &kindError{fmt.Sprintf("the persistent TAP %s in %s has %s set (TUNSETOWNER, TUNSETGROUP): they may attach queues to it without CAP_NET_ADMIN and read and write the lab's frames",
		name, ns, strings.Join(set, " and ")), []error{ErrOwned}}
}

// attach opens c.Queues queues on the persistent TAP l in ns: the /dev/net/tun
// files are opened by a thread inside ns, since TUNSETIFF finds the device
// by name in the namespace the file was opened in (drivers/net/tun.c:
// tun_chr_open takes the opener's namespace). The TAP keeps its MTU, MAC,
// address and VM ports; NAPI settings are written again (the first queue's
// TUNSETIFF applies the asked flags to the device).
func attach(c Config, f Features, ns *netns.NS, l netns.Link) (_ *Device, err error) {
	d := &Device{name: c.Name, feat: f, netns: ns.Name(), mac: l.MAC, persistent: true, attached: true}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	err = ns.Do(func() error {
		for q := 0; q < c.Queues; q++ {
			if err := d.openQueue(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if f.VnetHdr {
		if o, err := setOffload(d.fds[0]); err == nil {
			d.feat.Offloads = o
		}
	}
	if err := writeNAPI(ns, d.name, c.NAPISettings); err != nil {
		return nil, err
	}
	d.groIPv4, d.groIPv6 = l.GROIPv4MaxSize, l.GROMaxSize
	if err := ns.SetLink(l.Index, netns.LinkChange{Up: true}); err != nil {
		return nil, fmt.Errorf("set TAP %s up: %w", d.name, err)
	}
	if c.Addr.IsValid() {
		if err := ns.AddAddr(l.Index, c.Addr); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("configure TAP %s: %w", d.name, err)
		}
	}
	return d, nil
}

// persist makes the open TAP outlive its queues and records its settings
// in its alias, where ns (the namespace it ended up in) shows it.
func (d *Device) persist(c Config, ns *netns.NS) error {
	if err := unix.IoctlSetInt(d.fds[0], unix.TUNSETPERSIST, 1); err != nil {
		return fmt.Errorf("make TAP %s persistent: %w", d.name, os.NewSyscallError("ioctl", err))
	}
	d.persistent = true
	l, err := ns.Link(d.name)
	if err != nil {
		return err
	}
	alias := record{queues: c.Queues, napi: d.feat.NAPI, vnet: d.feat.VnetHdr}.String()
	return ns.SetLink(l.Index, netns.LinkChange{Alias: alias})
}

// unpersist makes a TAP made persistent by persist go away with its last
// queue again (when Open fails after persist).
func (d *Device) unpersist() {
	if d.persistent && !d.attached && len(d.fds) > 0 {
		unix.IoctlSetInt(d.fds[0], unix.TUNSETPERSIST, 0)
	}
}

// Remove deletes the persistent TAP name in namespace ns ("" for the
// caller's). It refuses a TAP some process is attached to (ErrAttached)
// and anything that is not a TAP (ErrNoTAP). The kernel removes the VM
// ports stacked on it; their device nodes are the caller's (internal/tapport).
func Remove(name, ns string) error {
	n, err := netns.Open(ns)
	if err != nil {
		return err
	}
	defer n.Close()
	l, err := n.Link(name)
	if errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("no interface %q in %s: %w", name, n, ErrNoTAP)
	}
	if err != nil {
		return err
	}
	switch {
	case !l.IsTAP():
		return fmt.Errorf("%q in %s is a %s device, not a TAP: %w", name, n, l.KindName(), ErrNoTAP)
	case l.Tun.Queues > 0:
		return attachedError(name, n, l.Tun.Queues)
	}
	if err := n.DelLink(l.Index); err != nil {
		return fmt.Errorf("remove TAP %s: %w", name, err)
	}
	return nil
}
