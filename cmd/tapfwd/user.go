package main

import (
	"fmt"
	"os/user"
	"strconv"
	"syscall"
)

type credential struct{ uid, gid int }

func lookupUser(name string) (*credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %q has a non-numeric uid or gid", name)
	}
	if uid == 0 {
		return nil, fmt.Errorf("user %q is root: nothing would be dropped", name)
	}
	return &credential{uid, gid}, nil
}

// drop switches every thread of the process to c: supplementary groups
// cleared, then gid, then uid. Leaving uid 0 without SECBIT_KEEP_CAPS
// clears the permitted and effective capability sets
// (kernel/capability.c, cap_emulate_setxuid), so nothing privileged is
// left; the open fds keep working.
func (c *credential) drop() error {
	// Go applies these to all threads of the process (syscall.AllThreadsSyscall),
	// the pinned workers included.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(c.gid); err != nil {
		return fmt.Errorf("setgid %d: %w", c.gid, err)
	}
	if err := syscall.Setuid(c.uid); err != nil {
		return fmt.Errorf("setuid %d: %w", c.uid, err)
	}
	return nil
}
