package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os/user"
	"strconv"
	"strings"

	"github.com/tapfwd/tapfwd/internal/privdrop"
	"github.com/tapfwd/tapfwd/internal/tapport"
)

type credential struct{ uid, gid int }

func lookupUser(name string) (*credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("no user %q", name)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %q has a non-numeric uid or gid", name)
	}
	if uid == 0 {
		return nil, fmt.Errorf("user %q is root: nothing would be dropped", name)
	}
	if gid == 0 {
		return nil, fmt.Errorf("user %q has root's group (gid 0) as its primary group: it would keep root's group access", name)
	}
	return &credential{uid, gid}, nil
}

// drop becomes c on every thread for good (privdrop.Drop): no groups, no
// capabilities in any set, no_new_privs, checked thread by thread. In a
// cgo build (the race detector's) some of it reaches this thread only:
// that is logged.
func (c *credential) drop(log *slog.Logger) error {
	err := privdrop.Drop(c.uid, c.gid)
	if errors.Is(err, privdrop.ErrPartial) {
		log.Warn("a cgo build: the bounding and inheritable sets and no_new_privs cover one thread (build with CGO_ENABLED=0, as make build does)")
		return nil
	}
	return err
}

// LookupOwner resolves USER[:GROUP] (names or numbers): the user's uid and
// the group's gid, the user's primary group when none is given.
func LookupOwner(spec string) (*tapport.Owner, error) {
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
	return &tapport.Owner{UID: uid, GID: gid}, nil
}
