package main

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/tapfwd/tapfwd/vmport"
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

// lookupOwner resolves USER[:GROUP] (names or numbers): the user's uid and
// the group's gid, the user's primary group when none is given.
func lookupOwner(spec string) (*vmport.Owner, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("no user %q", name)
		}
	}
	gidStr := u.Gid
	if hasGroup {
		g, err := user.LookupGroup(group)
		if err != nil {
			if g, err = user.LookupGroupId(group); err != nil {
				return nil, fmt.Errorf("no group %q", group)
			}
		}
		gidStr = g.Gid
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(gidStr)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%q has a non-numeric uid or gid", spec)
	}
	return &vmport.Owner{UID: uid, GID: gid}, nil
}
