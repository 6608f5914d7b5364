package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vmport"
)

// TestExplain checks the flag advice the CLI adds to the libraries' typed
// errors, and that it adds none to others.
func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string // the advice, at the end; "" for none
	}{
		{fmt.Errorf("tap: name %q is in use: %w", "lab0", tap.ErrNameInUse), " (choose another --tap or delete it)"},
		{fmt.Errorf("tap: 4 queues: %w", tap.ErrNoMultiQueue), ": use --queues 1"},
		{&vmport.Error{Kind: vmport.ErrNoTAP, Name: "lab0"}, " (is tapfwd running with --tap lab0? If it moved the TAP with --tap-netns, pass that namespace with --netns.)"},
		{&vmport.Error{Kind: vmport.ErrNoTAP, Netns: "lab", Name: "lab0"}, " (is tapfwd running with --tap lab0?)"},
		{&vmport.Error{Kind: vmport.ErrNotTAP, Netns: "lab", Name: "w1"}, ""},
		{errors.Join(&vmport.Error{Kind: vmport.ErrNoPort, Netns: "lab", Name: "tfwvm9"}), " (list them with: tapfwd vm-port list --netns lab)"},
		{&vmport.Error{Kind: vmport.ErrNoPort, Name: "tfwvm9"}, " (list them with: tapfwd vm-port list)"},
		{&vmport.Error{Kind: vmport.ErrMACInUse, Name: "02:00:00:00:00:10"}, " (choose another --mac, or leave it out for a random one)"},
		{&vmport.Error{Kind: vmport.ErrNameInUse, Name: "tfwvm0"}, ": choose another --name"},
		{&vmport.Error{Kind: vmport.ErrNoMacvtap}, ""},
		{fmt.Errorf("netns: network namespace %q not found: %w", "x", netns.ErrNotFound), ""},
		{errors.New("tap: something else"), ""},
	} {
		got := explain(tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("explain(%v) = %v, which does not wrap it", tc.err, got)
		}
		if got.Error() != tc.err.Error()+tc.want {
			t.Errorf("explain(%q) = %q, want the error and %q", tc.err, got, tc.want)
		}
		if strings.Contains(tc.err.Error(), "--") {
			t.Errorf("a library error names a flag: %q", tc.err)
		}
	}
	if explain(nil) != nil {
		t.Error("explain(nil) is not nil")
	}
}

// TestExplainVhost: what --vhost-user can do about a socket path or its
// directory.
func TestExplainVhost(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: %q has 120 bytes, at most 101 fit here", vhostuser.ErrPathTooLong, "/x"), "(choose a shorter directory, or a shorter --tap)"},
		{fmt.Errorf("%w: /x exists and is a regular file", vhostuser.ErrNotSocket), "(remove it, or choose another directory)"},
		{fmt.Errorf("/x: %w", os.NewSyscallError("access", unix.EROFS)), "(the directory must be writable to tapfwd as it starts: choose another)"},
		{fmt.Errorf("listen: %w", os.NewSyscallError("bind", unix.EACCES)), "(the directory must be writable to tapfwd as it starts: choose another)"},
		{errors.New("/x is not a directory"), ""},
	} {
		got := explainVhost(tc.err)
		if !errors.Is(got, tc.err) || got.Error() != strings.TrimSpace("--vhost-user: "+tc.err.Error()+" "+tc.want) {
			t.Errorf("explainVhost(%q) = %q, want the error with --vhost-user and %q", tc.err, got, tc.want)
		}
	}
}
