package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
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
