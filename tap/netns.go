package tap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoNetns means a named network namespace does not exist.
var ErrNoNetns = errors.New("network namespace not found")

// netnsDir is where ip netns keeps named namespaces.
const netnsDir = "/run/netns"

// nsHandle is an rtnetlink connection in a network namespace: a named one
// (/run/netns/NAME) or, with name "", the caller's.
type nsHandle struct {
	name string
	file *os.File // nil for the caller's namespace
	conn *netlink.Conn
}

func openNS(name string) (*nsHandle, error) {
	h := &nsHandle{name: name}
	cfg := &netlink.Config{}
	if name != "" {
		if strings.ContainsRune(name, '/') || name == "." || name == ".." {
			return nil, fmt.Errorf("tap: bad network namespace name %q", name)
		}
		f, err := os.Open(filepath.Join(netnsDir, name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, userErr(ErrNoNetns, "tap: network namespace %q not found (no %s/%s; list them with: ip netns list)", name, netnsDir, name)
			}
			return nil, fmt.Errorf("tap: network namespace %q: %w", name, err)
		}
		h.file = f
		cfg.NetNS = int(f.Fd())
	}
	c, err := netlink.Dial(unix.NETLINK_ROUTE, cfg)
	if err != nil {
		h.close()
		return nil, fmt.Errorf("tap: rtnetlink in %s: %w", h.where(), err)
	}
	h.conn = c
	return h, nil
}

func (h *nsHandle) close() {
	if h.conn != nil {
		h.conn.Close()
	}
	if h.file != nil {
		h.file.Close()
	}
}

// where names the namespace for messages.
func (h *nsHandle) where() string {
	if h.name == "" {
		return "this network namespace"
	}
	return fmt.Sprintf("network namespace %q", h.name)
}

// label names the namespace for device node paths: its /run/netns name, ""
// for the initial namespace, or "netns-INODE" for an unnamed one. Several
// namespaces can hold an interface of the same name and ifindex, so a node
// named after the interface alone would be ambiguous.
func (h *nsHandle) label() string {
	if h.name != "" {
		return h.name
	}
	var self, initNS unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return ""
	}
	if err := unix.Stat("/proc/1/ns/net", &initNS); err == nil && initNS.Dev == self.Dev && initNS.Ino == self.Ino {
		return ""
	}
	// Run under "ip netns exec NAME": find NAME, as ip netns identify does.
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			var st unix.Stat_t
			if unix.Stat(filepath.Join(netnsDir, e.Name()), &st) == nil && st.Dev == self.Dev && st.Ino == self.Ino {
				return e.Name()
			}
		}
	}
	return "netns-" + strconv.FormatUint(self.Ino, 10)
}

// sysfs returns a private, detached sysfs mount (an fd for openat) that
// shows this namespace's network devices. A sysfs mount shows the network
// namespace of whoever created it (fs/sysfs/mount.c: sysfs_init_fs_context
// tags it with the caller's netns), so this process's /sys may show another
// namespace than the one the TAP lives in. fsopen on a thread that joined the
// namespace makes one without touching any mount table.
func (h *nsHandle) sysfs() (int, error) {
	var cfd int
	err := onThreadIn(h.file, func() error {
		fd, err := unix.Fsopen("sysfs", unix.FSOPEN_CLOEXEC)
		if err != nil {
			return os.NewSyscallError("fsopen sysfs", err)
		}
		if err := unix.FsconfigCreate(fd); err != nil {
			unix.Close(fd)
			return os.NewSyscallError("fsconfig", err)
		}
		cfd = fd
		return nil
	})
	if err != nil {
		// Without the new mount API (before 5.2, or refused by a seccomp
		// filter) the caller's own /sys is the best there is: right
		// unless this process was moved into the namespace without a
		// fresh /sys (ip netns exec mounts one).
		if h.file == nil {
			if fd, oerr := unix.Open("/sys", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); oerr == nil {
				return fd, nil
			}
		}
		return -1, fmt.Errorf("tap: sysfs of %s: %w", h.where(), err)
	}
	defer unix.Close(cfd)
	mfd, err := unix.Fsmount(cfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, fmt.Errorf("tap: sysfs of %s: %w", h.where(), os.NewSyscallError("fsmount", err))
	}
	return mfd, nil
}

// onThreadIn runs fn on a locked OS thread that has joined namespace ns
// (nil: fn runs where it is called). A thread that cannot return to its
// own namespace stays locked, so the runtime ends it with the goroutine.
func onThreadIn(ns *os.File, fn func() error) error {
	if ns == nil {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- os.NewSyscallError("setns", err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, os.NewSyscallError("setns back", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
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
