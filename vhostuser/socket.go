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
	if path == "" {
		return nil, 0, errors.New("vhostuser: no socket path")
	}
	if mode == 0 {
		mode = 0o600
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.Itoa(os.Getpid()))
	if len(tmp) > maxSunPath {
		return nil, 0, fmt.Errorf("vhostuser: socket path %q is too long: at most %d bytes here", path, maxSunPath-(len(tmp)-len(path)))
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket == 0 {
		return nil, 0, fmt.Errorf("vhostuser: %s exists and is not a socket", path)
	}
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

// removeSocket removes path if it is still the port's socket (ino).
func removeSocket(path string, ino uint64) {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 || fi.Sys().(*syscall.Stat_t).Ino != ino {
		return
	}
	_ = os.Remove(path)
}
