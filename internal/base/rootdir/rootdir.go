package rootdir

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrUnsafe means a directory is not a root-owned directory only root may
// write to; nothing should be put in it.
var ErrUnsafe = errors.New("unsafe directory")

// Ensure makes directory path, mode 0755, when it is missing (its parent
// must exist) and checks it (Check).
func Ensure(path string) error {
	err := os.Mkdir(path, 0o755)
	switch {
	case err == nil:
		// Mkdir applies the umask; other users may need to reach the
		// files in it (QEMU its device nodes).
		if err := os.Chmod(path, 0o755); err != nil {
			return err
		}
	case !errors.Is(err, os.ErrExist):
		return err
	}
	return Check(path)
}

// Check checks directory path: a directory, not a link to one, owned by
// root, that group and others may not write to, so no one but root can
// plant or swap files in it. Else the error is ErrUnsafe.
func Check(path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory (a link or a file is there): %w", path, ErrUnsafe)
	case st.Uid != 0:
		return fmt.Errorf("%s is owned by uid %d, not root: %w", path, st.Uid, ErrUnsafe)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s has mode %#o: group or others may write to it: %w", path, st.Mode&0o777, ErrUnsafe)
	}
	return nil
}
