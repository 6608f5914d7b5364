package tap

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestProbe: the TUN driver reports the flags every kernel tapfwd runs on
// has, and a throw-away TAP takes at least the checksum offload.
func TestProbe(t *testing.T) {
	testkit.NeedRoot(t)
	f, err := Probe()
	if want := uint32(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE); err != nil || f&want != want {
		t.Errorf("Probe() = %v (%v), %v; want %v among them", FlagNames(f), f, err, FlagNames(want))
	}
	o, err := ProbeOffloads()
	if err != nil || o&unix.TUN_F_CSUM == 0 {
		t.Errorf("ProbeOffloads() = %#x, %v; want csum at least", o, err)
	}
}
