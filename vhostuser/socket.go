package vhostuser

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// maxSunPath is the longest socket path bind takes (sizeof sun_path
// less the terminating NUL, include/uapi/linux/un.h).
const maxSunPath = 107

// listenSocket binds a unix stream socket at path with the given mode and
// owner. It binds under a temporary name beside path, sets mode and owner,
// then renames it over path: the socket is never reachable with other
// permissions, and a stale socket at path is replaced in one step. It
// returns the socket file's inode, so Close removes only its own.
func listenSocket(path string, mode os.FileMode, owner *Owner) (*net.UnixListener, uint64, error) {
	if mode == 0 {
		mode = 0o600
	}
	if err := CheckPath(path); err != nil {
		return nil, 0, err
	}
	tmp := tmpName(path)
	_ = os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, 0, fmt.Errorf("vhostuser: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*net.UnixListener, uint64, error) {
		_ = ln.Close()
		_ = os.Remove(tmp)
		return nil, 0, err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("vhostuser: set the mode of %s: %w", path, err))
	}
	if owner != nil {
		if err := os.Lchown(tmp, owner.UID, owner.GID); err != nil {
			return fail(fmt.Errorf("vhostuser: set the owner of %s: %w", path, err))
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("vhostuser: move the socket to %s: %w", path, err))
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(fmt.Errorf("vhostuser: stat %s: %w", path, err))
	}
	return ln, fi.Sys().(*syscall.Stat_t).Ino, nil
}

// tmpName is the name listenSocket binds under before it renames.
func tmpName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.Itoa(os.Getpid()))
}

// CheckPath says whether Listen can make a socket at path, as far as the
// path itself goes: it fits a unix socket address (ErrPathTooLong) and
// nothing but a socket is there (ErrNotSocket). Whether the directory
// takes it shows only when Listen binds.
func CheckPath(path string) error {
	if path == "" {
		return errors.New("vhostuser: no socket path")
	}
	if extra := len(tmpName(path)) - len(path); len(path)+extra > maxSunPath {
		return fmt.Errorf("%w: %q has %d bytes, at most %d fit here", ErrPathTooLong, path, len(path), maxSunPath-extra)
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
		return fmt.Errorf("vhostuser: %w", err)
	}
	return nil
}

// removeSocket removes path if it is still the port's socket (ino).
func removeSocket(path string, ino uint64) {
	_ = RemoveSocketFile(SocketFile{Path: path, Ino: ino})
}
