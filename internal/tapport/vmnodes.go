package tapport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/rootdir"
	"github.com/tapfwd/tapfwd/netns"
)

// DevDir holds the character device nodes tapfwd makes for VM ports, one
// per port: DevDir/PORT for a port in the initial network namespace,
// DevDir/NS:PORT for one in namespace NS. Interface names cannot contain
// ':' (net/core/dev.c: dev_valid_name), namespace names can: a node's name
// is cut at its last ':'. The kernel's own /dev/tapIFINDEX (devtmpfs) is
// ambiguous when several namespaces hold a macvtap with the same ifindex.
//
// No two nodes share a device number: the kernel hands a gone port's minor
// to the next port made, in any namespace, so a node left by a lab whose
// tapfwd died would open another lab's port. Making a node removes every
// other node with its number, and sweeps remove the nodes of every named
// namespace whose port is gone.
const DevDir = "/dev/tapfwd"

// portDevt reads the port's character device number from its sysfs
// (drivers/net/macvtap.c: macvtap_device_event creates device tapIFINDEX
// in class macvtap, under the netdev).
func portDevt(mnt int, name string, index int) (major, minor uint32, err error) {
	rel := fmt.Sprintf("class/net/%s/macvtap/tap%d/dev", name, index)
	s, err := readAt(mnt, rel)
	if err != nil {
		return 0, 0, fmt.Errorf("character device of %s: %w", name, err)
	}
	a, b, ok := strings.Cut(s, ":")
	ma, err1 := strconv.ParseUint(a, 10, 32)
	mi, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("character device of %s: bad %s %q", name, rel, s)
	}
	return uint32(ma), uint32(mi), nil
}

// readAt reads a small file below the directory fd dir.
func readAt(dir int, path string) (string, error) {
	fd, err := unix.Openat(dir, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	b := make([]byte, 256)
	n, err := f.Read(b)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b[:n])), nil
}

func nodePath(label, name string) string {
	if label == "" {
		return filepath.Join(DevDir, name)
	}
	return filepath.Join(DevDir, label+":"+name)
}

// parseNode is nodePath backwards: the namespace label and the port name
// of a node's file name under DevDir.
func parseNode(file string) (label, name string) {
	i := strings.LastIndexByte(file, ':')
	if i < 0 {
		return "", file
	}
	return file[:i], file[i+1:]
}

// Owner is who may open a port's device node besides root: the node is
// made with this owner and group and mode 0660 (libvirt runs QEMU as its
// own user).
type Owner struct{ UID, GID int }

// devDir makes DevDir when it is missing and checks it: a root-owned
// directory only root may write to (rootdir.Ensure), so no one but root
// can plant or swap nodes in it.
func devDir() error {
	if err := rootdir.Ensure(DevDir); err != nil {
		return err
	}
	return nil
}

// makeNode creates the character device node path, replacing a stale
// node there and removing every other node of the same device, owned by
// root with mode 0600 (as the kernel's own /dev/tapN: opening it is access
// to the network), or by owner with mode 0660.
func makeNode(path string, major, minor uint32, owner *Owner) error {
	if err := removeNode(path); err != nil {
		return err
	}
	if err := devDir(); err != nil {
		return err
	}
	if err := evict(path, unix.Mkdev(major, minor)); err != nil {
		return err
	}
	mode := uint32(0o600)
	if owner != nil {
		mode = 0o660
	}
	if err := unix.Mknod(path, unix.S_IFCHR|mode, int(unix.Mkdev(major, minor))); err != nil {
		return fmt.Errorf("create device node %s: %w", path, os.NewSyscallError("mknod", err))
	}
	// Mknod applies the umask: set the mode as asked.
	if err := unix.Fchmodat(unix.AT_FDCWD, path, mode, 0); err != nil {
		os.Remove(path)
		return fmt.Errorf("chmod %s: %w", path, os.NewSyscallError("fchmodat", err))
	}
	if owner != nil {
		if err := unix.Lchown(path, owner.UID, owner.GID); err != nil {
			os.Remove(path)
			return fmt.Errorf("chown %s to %d:%d: %w", path, owner.UID, owner.GID, os.NewSyscallError("lchown", err))
		}
	}
	return nil
}

// evict removes the nodes under DevDir but keep that have device number
// dev: a port has one node, and another node of its device is one whose
// port is gone and whose minor the kernel gave this port. Only character
// devices are removed (lstat: a link is never followed).
func evict(keep string, dev uint64) error {
	ents, err := os.ReadDir(DevDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		path := filepath.Join(DevDir, e.Name())
		var st unix.Stat_t
		if path == keep || unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != dev {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s, a stale node of the device %d:%d: %w", path, unix.Major(dev), unix.Minor(dev), err)
		}
	}
	return nil
}

// nodeIs reports whether path is a character device node (not a link to
// one) with the device number major:minor.
func nodeIs(path string, major, minor uint32) bool {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(major, minor)
}

// removeNode removes a device node tapfwd made, and DevDir once it is
// empty. It never follows a link and never removes anything but a
// macvtap character device: a file, link or other device at that path is
// refused (ErrNotNode) and left alone.
func removeNode(path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("%w", &os.PathError{Op: "lstat", Path: path, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != macvtapMajor() {
		return fmt.Errorf("%s is not a VM port's device node: %w", path, ErrNotNode)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	os.Remove(DevDir) // fails while other nodes are there
	return nil
}

// macvtapMajor is the character device major the kernel gave macvtap
// (dynamic: drivers/net/macvtap.c registers a region named "macvtap"), as
// /proc/devices lists it; 0 when it is not listed.
func macvtapMajor() uint32 {
	b, err := os.ReadFile("/proc/devices")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == "macvtap" {
			if n, err := strconv.ParseUint(f[0], 10, 32); err == nil {
				return uint32(n)
			}
		}
	}
	return 0
}

// Sweep removes stale device nodes (see sweepNodes); ns ("" for the
// caller's) is the namespace of the caller's ports.
func Sweep(ns string) error {
	h, err := netns.Open(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	sweepNodes(h, h.Label())
	return nil
}

// sweepNodes removes stale device nodes: those of namespace label (h) and
// of every other named namespace whose port is gone or has another device
// number (ports go away with their TAP, a lab's tapfwd may die without
// removing its nodes, and the kernel gives a gone port's minor to the next
// port), and all those of named namespaces that no longer exist. Nodes of
// the initial namespace (seen from another) and of unnamed ones cannot be
// checked by name: makeNode evicts them when their device is reused.
// Errors are ignored: a node left over is removed by the next sweep, and
// what is not a node is left alone.
func sweepNodes(h *netns.NS, label string) {
	ents, err := os.ReadDir(DevDir)
	if err != nil {
		return
	}
	byLabel := map[string][]string{}
	for _, e := range ents {
		l, port := parseNode(e.Name())
		byLabel[l] = append(byLabel[l], port)
	}
	for l, ports := range byLabel {
		switch {
		case l == label:
			sweepIn(h, l, ports)
		case l == "" || strings.HasPrefix(l, "netns-"):
			// Not to be opened by name: left to makeNode.
		default:
			other, err := netns.Open(l)
			if errors.Is(err, netns.ErrNotFound) {
				for _, port := range ports {
					removeNode(nodePath(l, port))
				}
			}
			if err != nil {
				continue
			}
			sweepIn(other, l, ports)
			other.Close()
		}
	}
}

// sweepIn removes the nodes of ports in h (labelled label) that are not
// the device of a macvtap of that name there.
func sweepIn(h *netns.NS, label string, ports []string) {
	links, err := h.Links()
	if err != nil {
		return
	}
	mnt, err := h.Sysfs(false)
	if err != nil {
		return
	}
	defer unix.Close(mnt)
	for _, port := range ports {
		path := nodePath(label, port)
		l := netns.LinkNamed(links, port)
		if l != nil && l.Kind == "macvtap" {
			if ma, mi, err := portDevt(mnt, port, l.Index); err == nil && nodeIs(path, ma, mi) {
				continue
			}
		}
		removeNode(path)
	}
}

// The kernel names a macvtap's character device tapINDEX (drivers/net/
// macvtap.c), and devtmpfs or udev make /dev/tapINDEX for it: one name
// space for the whole host, while interface indexes are per network
// namespace. A lab with ports in several namespaces would have two ports
// with index 2 and one /dev/tap2, and libvirt (<target dev='PORT'
// managed='no'/>) opens /dev/tapINDEX: so a new port takes an index whose
// node does not exist yet.
const (
	indexMin = 1 << 12 // above what namespaces reach by counting
	indexMax = 1 << 24
)

// errNodeTaken: the port's /dev/tapINDEX is another device's (a port made
// at the same time in another namespace): the caller tries another index.
var errNodeTaken = errors.New("device node taken")

func kernelNode(index int) string { return fmt.Sprintf("/dev/tap%d", index) }

func fileExists(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil
}

// freeIndex picks an interface index for a new port: random in
// [indexMin, indexMax), not used by links and without a /dev/tapINDEX.
func freeIndex(links []netns.Link) int {
	used := map[int]bool{}
	for _, l := range links {
		used[l.Index] = true
	}
	for {
		i := indexMin + rand.IntN(indexMax-indexMin)
		if !used[i] && !fileExists(kernelNode(i)) {
			return i
		}
	}
}
