package netns

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

// Dir is where ip netns keeps named namespaces (ip-netns(8)).
const Dir = "/run/netns"

// Errors callers test for with errors.Is; the errors returned say more.
var (
	// ErrNotFound means a named namespace does not exist under Dir.
	ErrNotFound = errors.New("no such entry in " + Dir)
	// ErrNotPermitted means the kernel refused a change for want of
	// CAP_NET_ADMIN. Packages that change links or devices on top of this
	// one (tap, tapport) wrap it too.
	ErrNotPermitted = errors.New("needs CAP_NET_ADMIN (run as root)")
	// ErrNoEnter means the kernel refused to let this process into a
	// named namespace: setns(2) needs CAP_SYS_ADMIN.
	ErrNoEnter = errors.New("entering a network namespace needs CAP_SYS_ADMIN (run as root)")
)

// enterErr is the error of entering namespace name (what is its
// description) that failed with err: EPERM also matches ErrNoEnter.
func enterErr(what string, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: %w: %w", what, err, ErrNoEnter)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// CheckName reports whether name can name a namespace under Dir: a single
// path element.
func CheckName(name string) error {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return fmt.Errorf("bad network namespace name %q: want a name under %s", name, Dir)
	}
	return nil
}

// openFile opens namespace name under Dir; nil, nil for "".
func openFile(name string) (*os.File, error) {
	if name == "" {
		return nil, nil
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(Dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("network namespace %q not found: %w (create it with: ip netns add %s; list them with: ip netns list)", name, ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("open network namespace %q: %w", name, err)
	}
	return f, nil
}

// NS is a network namespace with an rtnetlink connection in it: a named one
// (Dir/NAME) or, for the name "", the caller's. Its methods may be called
// concurrently. Reading through it needs no privilege once it is open, and
// it keeps the namespace alive until Close, also after ip netns del.
type NS struct {
	name string
	file *os.File // nil for the caller's namespace
	conn *netlink.Conn
}

// Open opens namespace name ("" for the caller's) and an rtnetlink socket
// in it. A missing namespace is ErrNotFound.
func Open(name string) (*NS, error) {
	f, err := openFile(name)
	if err != nil {
		return nil, err
	}
	n := &NS{name: name, file: f}
	cfg := &netlink.Config{}
	if f != nil {
		cfg.NetNS = int(f.Fd())
	}
	if n.conn, err = netlink.Dial(unix.NETLINK_ROUTE, cfg); err != nil {
		n.Close()
		return nil, enterErr("open rtnetlink in "+n.String(), err)
	}
	return n, nil
}

// Close closes the rtnetlink socket and the namespace.
func (n *NS) Close() error {
	var errs []error
	if n.conn != nil {
		errs = append(errs, n.conn.Close())
	}
	if n.file != nil {
		errs = append(errs, n.file.Close())
	}
	return errors.Join(errs...)
}

// Name is the name Open was given: "" for the caller's namespace.
func (n *NS) Name() string { return n.name }

// String names the namespace for messages.
func (n *NS) String() string {
	if n.name == "" {
		return "this network namespace"
	}
	return fmt.Sprintf("network namespace %q", n.name)
}

// Label names the namespace for paths that must tell namespaces apart: its
// name under Dir, "" for the initial namespace, or "netns-INODE" for an
// unnamed one. For the caller's namespace it finds the name as ip netns
// identify does (the caller may run under ip netns exec NAME).
func (n *NS) Label() string {
	if n.name != "" {
		return n.name
	}
	return selfLabel()
}

// Label is NS.Label of namespace name ("" for the caller's) without
// opening it and an rtnetlink socket; a missing namespace is ErrNotFound.
func Label(name string) (string, error) {
	if name == "" {
		return selfLabel(), nil
	}
	f, err := openFile(name)
	if err != nil {
		return "", err
	}
	f.Close()
	return name, nil
}

// selfLabel is the Label of the calling thread's namespace.
func selfLabel() string {
	var self, initNS unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return ""
	}
	if err := unix.Stat("/proc/1/ns/net", &initNS); err == nil && initNS.Dev == self.Dev && initNS.Ino == self.Ino {
		return ""
	}
	if ents, err := os.ReadDir(Dir); err == nil {
		for _, e := range ents {
			var st unix.Stat_t
			if unix.Stat(filepath.Join(Dir, e.Name()), &st) == nil && st.Dev == self.Dev && st.Ino == self.Ino {
				return e.Name()
			}
		}
	}
	return "netns-" + strconv.FormatUint(self.Ino, 10)
}

// Sysfs returns a private, detached sysfs mount (an fd for openat) that
// shows this namespace's network devices, read-only unless writable; the
// caller closes it. A sysfs mount shows the network namespace of whoever
// created it (fs/sysfs/mount.c: sysfs_init_fs_context tags it with the
// caller's netns), so this process's /sys may show another namespace than
// n. fsopen on a thread that joined n makes one without touching any mount
// table.
func (n *NS) Sysfs(writable bool) (int, error) {
	var cfd int
	err := onThreadIn(n.name, n.file, func() error {
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
		// Without the new mount API (before 5.2, without CAP_SYS_ADMIN,
		// or refused by a seccomp filter) the caller's own /sys is the
		// best there is: right unless this process was moved into the
		// namespace without a fresh /sys (ip netns exec mounts one).
		if n.file == nil {
			if fd, oerr := unix.Open("/sys", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); oerr == nil {
				return fd, nil
			}
		}
		return -1, fmt.Errorf("mount a sysfs of %s: %w", n, err)
	}
	defer unix.Close(cfd)
	attr := uint32(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC)
	if !writable {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	mfd, err := unix.Fsmount(cfd, unix.FSMOUNT_CLOEXEC, int(attr))
	if err != nil {
		return -1, fmt.Errorf("mount a sysfs of %s: %w", n, os.NewSyscallError("fsmount", err))
	}
	return mfd, nil
}

// Do runs fn on a locked OS thread that has joined namespace name (for "",
// fn runs on the calling goroutine, in the caller's namespace) and returns
// fn's error. Sockets, TAPs and packet sockets that fn opens belong to the
// namespace and stay there when used from other goroutines afterwards.
// Goroutines that fn starts run in the caller's namespace, and /sys still
// shows the caller's (see NS.Sysfs). A thread that cannot return to its own
// namespace stays locked, so the runtime ends it with the goroutine.
func Do(name string, fn func() error) error {
	f, err := openFile(name)
	if err != nil {
		return err
	}
	if f != nil {
		defer f.Close()
	}
	return onThreadIn(name, f, fn)
}

// Do runs fn on a locked OS thread inside n, as the function Do does.
func (n *NS) Do(fn func() error) error { return onThreadIn(n.name, n.file, fn) }

// onThreadIn is Do on an open namespace ns, named name (nil: the caller's).
func onThreadIn(name string, ns *os.File, fn func() error) error {
	if ns == nil {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := openOwn()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- enterErr(fmt.Sprintf("enter network namespace %q", name), os.NewSyscallError("setns", err))
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread dies with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("leave network namespace %q: %w", name, os.NewSyscallError("setns", err)))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// openOwn opens the calling thread's namespace.
func openOwn() (*os.File, error) {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open this thread's network namespace: %w", err)
	}
	return f, nil
}
