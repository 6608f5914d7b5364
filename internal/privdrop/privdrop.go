package privdrop

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"golang.org/x/sys/unix"
)

// ErrPartial means some of the drop could reach only the calling thread: a
// cgo build cannot run a system call on every thread (the race detector
// needs cgo). Ids and held capabilities are dropped all the same; the
// inheritable and bounding sets and no_new_privs then cover this thread.
var ErrPartial = errors.New("cgo build: thread attributes set on the calling thread only")

// Drop switches every thread of the process to uid and gid with no
// supplementary groups and no capabilities: no_new_privs is set, the
// bounding and ambient sets are cleared while CAP_SETPCAP is still held,
// then the ids change (which clears the permitted and effective sets of a
// process leaving uid 0, kernel/capability.c: cap_emulate_setxuid), then
// every set is cleared explicitly (a process that started as another user
// with ambient capabilities keeps them across setuid). Check verifies the
// result; Drop returns its error. A gid of 0 is refused: root's group
// opens root's files. It returns ErrPartial (after a complete check of
// what matters) when thread attributes could be set on this thread only.
func Drop(uid, gid int) error {
	if uid == 0 || gid == 0 {
		return fmt.Errorf("drop privileges to uid %d gid %d: refusing to drop to root's user or group", uid, gid)
	}
	partial := false
	step := func(what string, trap, a1, a2 uintptr) error {
		err := allThreads(trap, a1, a2)
		if err == unix.ENOTSUP {
			partial = true
			_, _, e := unix.RawSyscall(trap, a1, a2, 0)
			if e != 0 {
				err = e
			} else {
				err = nil
			}
		}
		if err != nil {
			return fmt.Errorf("drop privileges: %s: %w", what, os.NewSyscallError(what, err))
		}
		return nil
	}
	if err := step("prctl PR_SET_NO_NEW_PRIVS", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return err
	}
	if err := dropBounding(step); err != nil {
		return err
	}
	if err := step("prctl PR_CAP_AMBIENT_CLEAR_ALL", unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil {
		return err
	}
	// The syscall package runs these on every thread (through libc in a
	// cgo build).
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("drop privileges: setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("drop privileges: setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("drop privileges: setuid %d: %w", uid, err)
	}
	if err := clearCaps(step); err != nil {
		return err
	}
	if err := Check(uid, gid, !partial); err != nil {
		return err
	}
	if partial {
		return ErrPartial
	}
	return nil
}

// dropBounding drops every capability from the bounding set. Without
// CAP_SETPCAP that fails (EPERM); then no_new_privs, set before, already
// keeps an execve from gaining anything.
func dropBounding(step func(string, uintptr, uintptr, uintptr) error) error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		err := step("prctl PR_CAPBSET_DROP", unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c))
		switch {
		case err == nil:
		case errors.Is(err, unix.EINVAL):
			return nil // beyond this kernel's last capability
		case errors.Is(err, unix.EPERM):
			return nil
		default:
			return err
		}
	}
	return nil
}

// Check reads every thread's credentials and capabilities (capget and
// /proc/self/task/TID/status) and fails unless each runs as uid and gid
// with no supplementary group and no permitted, effective or ambient
// capability; with strict, also no inheritable one and no_new_privs set.
func Check(uid, gid int, strict bool) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("check the dropped privileges: %w", err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if err := checkThread(tid, uid, gid, strict); err != nil {
			return err
		}
	}
	return nil
}

func checkThread(tid, uid, gid int, strict bool) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3, Pid: int32(tid)}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil // the thread ended meanwhile
		}
		return fmt.Errorf("check the dropped privileges: capget thread %d: %w", tid, err)
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
	if err != nil {
		return nil // the thread ended meanwhile
	}
	f := procfs.ParseStatus(string(st))
	var left []string
	for i, d := range data {
		if d.Permitted != 0 || d.Effective != 0 || (strict && d.Inheritable != 0) {
			left = append(left, fmt.Sprintf("capabilities word %d: permitted %#x effective %#x inheritable %#x", i, d.Permitted, d.Effective, d.Inheritable))
		}
	}
	if a := f["CapAmb"]; strings.Trim(a, "0") != "" {
		left = append(left, "ambient "+a)
	}
	want := strconv.Itoa(uid)
	if ids := strings.Fields(f["Uid"]); len(ids) != 4 || ids[0] != want || ids[1] != want || ids[2] != want || ids[3] != want {
		left = append(left, "uids "+f["Uid"])
	}
	want = strconv.Itoa(gid)
	if ids := strings.Fields(f["Gid"]); len(ids) != 4 || ids[0] != want || ids[1] != want || ids[2] != want || ids[3] != want {
		left = append(left, "gids "+f["Gid"])
	}
	if f["Groups"] != "" {
		left = append(left, "groups "+f["Groups"])
	}
	if strict && f["NoNewPrivs"] != "1" {
		left = append(left, "no_new_privs not set")
	}
	if len(left) > 0 {
		return fmt.Errorf("privileges left after the drop: thread %d still has %s", tid, strings.Join(left, "; "))
	}
	return nil
}
