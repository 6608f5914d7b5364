// Package tapporttest is for the tests of the packages that stack ports on
// a TAP (VM ports and the host port): a TAP in a lab namespace and settings there.
package tapporttest

import (
	"testing"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
)

// LabTAP opens a TAP in a new bed's fwd namespace and moves it into the
// lab, as tapfwd run --tap-netns does; both go when t ends.
func LabTAP(t *testing.T) (*testbed.Bed, *tap.Device) {
	t.Helper()
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	var d *tap.Device
	err := bed.Do(bed.FwdNS, func() error {
		var err error
		d, err = tap.Open(tap.Config{Name: bed.LabIf, VnetHdr: tap.On, Netns: bed.LabNS})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return bed, d
}

// CheckSettings checks per-device IP settings of dev in namespace ns:
// disable_ipv6 is IPv6's, every other key IPv4's.
func CheckSettings(t *testing.T, ns, dev string, want map[string]string) {
	t.Helper()
	h, err := netns.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for key, v := range want {
		version := netns.IPv4
		if key == "disable_ipv6" {
			version = netns.IPv6
		}
		if got, err := h.DevConf(version, dev, key); err != nil || got != v {
			t.Errorf("%s %s = %q, %v; want %s", dev, key, got, err, v)
		}
	}
}
