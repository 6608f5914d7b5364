package vhostuser

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/rootdir"
)

// maxSunPath is the longest socket path bind takes (sizeof sun_path
// less the terminating NUL, include/uapi/linux/un.h).
const maxSunPath = 107

// ErrUnsafeDir: the socket directory is a link, not a directory, not
// root's, or writable by group or others (CheckDir).
var ErrUnsafeDir = rootdir.ErrUnsafe

// CheckDir says whether dir may hold the ports' sockets: a directory, not
// a link to one, owned by root and writable by no one else. Anyone who can
// write to the directory can put a socket of their own where a front-end
// connects, and be handed its guest's memory (ErrUnsafeDir).
func CheckDir(dir string) error {
	if err := rootdir.Check(dir); err != nil {
		return fmt.Errorf("vhost-user socket directory: %w", err)
	}
	return nil
}

// listenSocket binds a unix stream socket at path with the given mode and
// owner, following no link on the way: it binds in a directory of its own
// made beside path (mode 0700, so that no one else can swap what is in it),
// through that directory's fd, sets mode and owner there, then renames the
// socket over path: it is never reachable with other permissions, and a
// stale socket at path is replaced in one step. It returns the socket
// file's inode, so Close removes only its own.
func listenSocket(path string, mode os.FileMode, owner *Owner) (*net.UnixListener, uint64, error) {
	if mode == 0 {
		mode = 0o600
	}
	if err := CheckPath(path); err != nil {
		return nil, 0, err
	}
	dir, base := filepath.Dir(path), filepath.Base(path)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("listen on %s: %w", path, &os.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(dfd)
	priv, name, err := privateDir(dfd, base)
	if err != nil {
		return nil, 0, fmt.Errorf("listen on %s: %w", path, err)
	}
	defer func() {
		_ = unix.Unlinkat(priv, "s", 0) // still there if a step failed
		_ = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
		_ = unix.Close(priv)
	}()
	// The kernel resolves /proc/self/fd/N to the directory itself.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "/proc/self/fd/" + strconv.Itoa(priv) + "/s", Net: "unix"})
	if err != nil {
		return nil, 0, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	ino, err := placeSocket(dfd, priv, base, mode, owner)
	if err != nil {
		_ = ln.Close()
		return nil, 0, fmt.Errorf("place socket %s: %w", path, err)
	}
	return ln, ino, nil
}

// privateDir makes a directory of its own in dfd, named after base, and
// opens it. It checks what it opened is that directory: root's (the
// process's), that only it may enter.
func privateDir(dfd int, base string) (fd int, name string, err error) {
	for {
		name = "." + base + "." + strconv.FormatUint(rand.Uint64(), 36)
		err = unix.Mkdirat(dfd, name, 0o700)
		if err != unix.EEXIST {
			break
		}
	}
	if err != nil {
		return -1, "", &os.PathError{Op: "mkdir", Path: name, Err: err}
	}
	fd, err = unix.Openat(dfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
		return -1, "", &os.PathError{Op: "open", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
		_ = unix.Close(fd)
		return -1, "", fmt.Errorf("%s was swapped for another directory as it was made", name)
	}
	return fd, name, nil
}

// placeSocket sets the mode and owner of socket "s" in the private
// directory priv and renames it to base in dfd. It returns its inode.
func placeSocket(dfd, priv int, base string, mode os.FileMode, owner *Owner) (uint64, error) {
	if err := unix.Fchmodat(priv, "s", uint32(mode.Perm()), 0); err != nil {
		return 0, fmt.Errorf("set the mode of the socket: %w", os.NewSyscallError("fchmodat", err))
	}
	if owner != nil {
		if err := unix.Fchownat(priv, "s", owner.UID, owner.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return 0, fmt.Errorf("set the owner of the socket: %w", os.NewSyscallError("fchownat", err))
		}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(priv, "s", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, fmt.Errorf("stat the socket: %w", os.NewSyscallError("fstatat", err))
	}
	if err := unix.Renameat(priv, "s", dfd, base); err != nil {
		return 0, fmt.Errorf("move the socket in place: %w", os.NewSyscallError("renameat", err))
	}
	return st.Ino, nil
}

// CheckPath says whether Listen can make a socket at path, as far as the
// path itself goes: it fits a unix socket address (ErrPathTooLong) and
// nothing but a socket is there (ErrNotSocket). Whether the directory
// takes it shows only when Listen binds.
func CheckPath(path string) error {
	if path == "" {
		return errors.New("no vhost-user socket path")
	}
	if len(path) > maxSunPath {
		return fmt.Errorf("%w: %q has %d bytes, at most %d fit", ErrPathTooLong, path, len(path), maxSunPath)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%w: %s exists and is a %s", ErrNotSocket, path, fileKind(fi.Mode()))
	}
	return nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}

// SocketFile names a port's socket file: its path and inode, so that
// another process (one that keeps the right to remove it after the port's
// own dropped it) can remove it later if it is still that file.
type SocketFile struct {
	Path string `json:"path"`
	Ino  uint64 `json:"ino"`
}

// SocketFile is the socket file Listen made.
func (p *Port) SocketFile() SocketFile { return SocketFile{Path: p.path, Ino: p.ino} }

// RemoveSocketFile removes f.Path if it is still the socket f names; a
// socket a later Listen put there stays.
func RemoveSocketFile(f SocketFile) error {
	fi, err := os.Lstat(f.Path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 || fi.Sys().(*syscall.Stat_t).Ino != f.Ino {
		return nil
	}
	if err := os.Remove(f.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove a vhost-user socket: %w", err)
	}
	return nil
}

// removeSocket removes path if it is still the port's socket (ino).
func removeSocket(path string, ino uint64) {
	_ = RemoveSocketFile(SocketFile{Path: path, Ino: ino})
}
