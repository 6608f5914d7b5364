package main

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vmport"
)

// explain adds to an error from tap or vmport the flag a user can change:
// the libraries say what went wrong, only the CLI knows its flags.
func explain(err error) error {
	var pe *vmport.Error
	errors.As(err, &pe)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tap.ErrNameInUse):
		return fmt.Errorf("%w (choose another --tap or delete it)", err)
	case errors.Is(err, tap.ErrNoMultiQueue):
		return fmt.Errorf("%w: use --queues 1", err)
	case pe == nil, errors.Is(err, vmport.ErrNotTAP):
		return err
	case errors.Is(err, vmport.ErrNoTAP):
		hint := ""
		if pe.Netns == "" {
			hint = " If it moved the TAP with --tap-netns, pass that namespace with --netns."
		}
		return fmt.Errorf("%w (is tapfwd running with --tap %s?%s)", err, pe.Name, hint)
	case errors.Is(err, vmport.ErrNoPort):
		return fmt.Errorf("%w (list them with: tapfwd vm-port list%s)", err, vmNetnsFlag(pe.Netns))
	case errors.Is(err, vmport.ErrMACInUse):
		return fmt.Errorf("%w (choose another --mac, or leave it out for a random one)", err)
	case errors.Is(err, vmport.ErrNameInUse):
		return fmt.Errorf("%w: choose another --name", err)
	}
	return err
}

// explainVhost adds the flag to change to what went wrong with a socket
// or the directory.
func explainVhost(err error) error {
	switch {
	case errors.Is(err, vhostuser.ErrPathTooLong):
		return fmt.Errorf("--vhost-user: %w (choose a shorter directory, or a shorter --tap)", err)
	case errors.Is(err, vhostuser.ErrNotSocket):
		return fmt.Errorf("--vhost-user: %w (remove it, or choose another directory)", err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, unix.EROFS):
		return fmt.Errorf("--vhost-user: %w (the directory must be writable to tapfwd as it starts: choose another)", err)
	}
	return fmt.Errorf("--vhost-user: %w", err)
}
