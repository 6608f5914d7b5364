package vmport

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
)

// DevDir holds the character device nodes tapfwd makes for VM ports, one
// per port: DevDir/PORT for a port in the initial network namespace,
// DevDir/NS:PORT for one in namespace NS (interface names cannot contain
// ':'). The kernel's own /dev/tapIFINDEX (devtmpfs) is ambiguous when
// several namespaces hold a macvtap with the same ifindex.
const DevDir = "/dev/tapfwd"

// portDevt reads the port's character device number from its sysfs
// (drivers/net/macvtap.c: macvtap_device_event creates device tapIFINDEX
// in class macvtap, under the netdev).
func portDevt(mnt int, name string, index int) (major, minor uint32, err error) {
	rel := fmt.Sprintf("class/net/%s/macvtap/tap%d/dev", name, index)
	s, err := readAt(mnt, rel)
	if err != nil {
		return 0, 0, fmt.Errorf("vmport: character device of %s: %w", name, err)
	}
	a, b, ok := strings.Cut(s, ":")
	ma, err1 := strconv.ParseUint(a, 10, 32)
	mi, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("vmport: character device of %s: bad %s %q", name, rel, s)
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

// makeNode creates the character device node path, replacing a stale one.
func makeNode(path string, major, minor uint32) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("vmport: remove stale %w", err)
	}
	var err error
	// Twice: removeNode may take the directory away when it is empty.
	for try := 0; try < 2; try++ {
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("vmport: %w", err)
		}
		// 0600 as the kernel's own /dev/tapN: opening it is access to the
		// network. chown it to let an unprivileged QEMU open it.
		if err = unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(major, minor))); !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("vmport: create device node %s: %w", path, os.NewSyscallError("mknod", err))
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
		return fmt.Errorf("vmport: %w", err)
	}
	os.Remove(DevDir) // fails while other nodes are there
	return nil
}

// sweepNodes removes stale device nodes: those of namespace label whose
// port is gone or has another device number (ports go away with their TAP,
// and a minor number is reused by the next port), and those of named
// namespaces that no longer exist. Errors are ignored: a node left over
// is removed by the next sweep.
func sweepNodes(h *netns.NS, label string) {
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
			if _, err := os.Stat(filepath.Join(netns.Dir, ns)); errors.Is(err, os.ErrNotExist) {
				removeNode(filepath.Join(DevDir, e.Name()))
			}
		}
	}
	if len(mine) == 0 {
		return
	}
	links, err := h.Links()
	if err != nil {
		return
	}
	mnt, err := h.Sysfs(false)
	if err != nil {
		return
	}
	defer unix.Close(mnt)
	for _, port := range mine {
		path := nodePath(label, port)
		l := linkNamed(links, port)
		if l != nil && l.Kind == "macvtap" {
			if ma, mi, err := portDevt(mnt, port, l.Index); err == nil && nodeIs(path, ma, mi) {
				continue
			}
		}
		removeNode(path)
	}
}
