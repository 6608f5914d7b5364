package tapport

import (
	"errors"
	"net"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/netns"
)

var errNoKind = errors.New("no such link type")

// TestCreateErr checks the kinds and causes of a failed create; the
// flag to change is the CLI's to say (cmd/tapfwd: explain).
func TestCreateErr(t *testing.T) {
	h, err := netns.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, tc := range []struct {
		errno error
		kind  error
		want  string
	}{
		{unix.EOPNOTSUPP, errNoKind, "modprobe macvtap"},
		{unix.EADDRINUSE, ErrMACInUse, "its MAC is in use on TAP tap0"},
		{unix.EEXIST, ErrNameInUse, "an interface of that name exists"},
		{unix.EPERM, unix.EPERM, "CAP_NET_ADMIN"},
		{unix.EPERM, netns.ErrNotPermitted, "CAP_NET_ADMIN"},
	} {
		err := CreateErr(h, "macvtap", errNoKind, "tfwvm0", "tap0", tc.errno)
		if !strings.Contains(err.Error(), tc.want) || (tc.kind != nil && !errors.Is(err, tc.kind)) {
			t.Errorf("CreateErr(%v) = %v, want %q (is %v)", tc.errno, err, tc.want, tc.kind)
		}
	}
	// A host port is a macvlan.
	err = CreateErr(h, "macvlan", errNoKind, "tap0h", "tap0", unix.EOPNOTSUPP)
	if !strings.Contains(err.Error(), "modprobe macvlan") || !strings.Contains(err.Error(), "CONFIG_MACVLAN") || !errors.Is(err, errNoKind) {
		t.Errorf("CreateErr(macvlan, EOPNOTSUPP) = %v, want the missing kind naming modprobe macvlan", err)
	}
}

func TestCheckMAC(t *testing.T) {
	for _, tc := range []struct {
		mac string
		ok  bool
	}{
		{"02:00:5e:00:53:01", true}, {"00:00:00:00:00:00", false}, {"01:00:5e:00:00:01", false}, {"02:00:00:00:00:00:00:01", false},
	} {
		m, err := net.ParseMAC(tc.mac)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckMAC(m); (err == nil) != tc.ok {
			t.Errorf("CheckMAC(%s) = %v", tc.mac, err)
		}
	}
	if CheckMAC(nil) != nil {
		t.Error("CheckMAC(nil) refused: nil picks one")
	}
}
