package napi

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// VethNAPI builds a Forwarder bed, turns GRO on for its NIC w1 (a veth has
// NAPI instances only then: drivers/net/veth.c: veth_set_features), and
// returns a Client made inside the fwd namespace with w1's ifindex and first
// NAPI id. Everything goes when t ends. Exported for the tests of package
// napi_test.
func VethNAPI(t *testing.T) (*testbed.Bed, *Client, int, uint32) {
	t.Helper()
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	need.Tools(t, "ethtool")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := bed.Run(ctx, bed.FwdNS, "ethtool", "-K", bed.NIC, "gro", "on"); err != nil {
		t.Fatal(err)
	}
	var c *Client
	var ifindex int
	err := bed.Do(bed.FwdNS, func() error {
		ifi, err := net.InterfaceByName(bed.NIC)
		if err != nil {
			return err
		}
		ifindex = ifi.Index
		c, err = Dial()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	list, err := c.List(ifindex)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) == 0 {
		t.Fatalf("%s with GRO on has no NAPI instance", bed.NIC)
	}
	return bed, c, ifindex, list[0].ID
}

// Should the policy probe ever claim busy-poll on a kernel that refuses it,
// the kernel's ERANGE still becomes the one-line FeatureError.
func TestKernelBusyPollERANGE(t *testing.T) {
	_, c, _, id := VethNAPI(t)
	if !c.feat.Threaded || c.feat.BusyPoll {
		t.Skipf("skipping: needs a kernel with per-NAPI threaded but without busy-poll (6.17, 6.18); have %+v", c.feat)
	}
	c.feat.BusyPoll = true // pretend the probe said yes
	_, err := c.Set(id, Attrs{Threaded: new(ThreadedBusyPoll)})
	var fe *FeatureError
	if !errors.As(err, &fe) || fe.Since != "6.19" || strings.Contains(err.Error(), "\n") {
		t.Fatalf("busy-poll past the probe: %v, want a FeatureError naming 6.19", err)
	}
	if n, err := c.Get(id); err != nil || n.Threaded != ThreadedDisabled {
		t.Errorf("after the refused busy-poll: %+v, %v", n, err)
	}
}

func TestOpError(t *testing.T) {
	c := &Client{}
	err := c.opError("napi-set 7", &netlink.OpError{Op: "receive", Err: unix.EPERM, Message: "nope"})
	if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "CAP_NET_ADMIN") || !strings.Contains(err.Error(), "kernel: nope") {
		t.Errorf("EPERM: %v", err)
	}
	err = c.idError("napi-get", 9, &netlink.OpError{Op: "receive", Err: unix.ENOENT})
	if !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "napi-get 9: no such NAPI instance") {
		t.Errorf("ENOENT: %v", err)
	}
	if err := c.opError("x", errors.New("boom")); err.Error() != "x: boom" {
		t.Errorf("plain error: %v", err)
	}
}

// TestKthreadComm: the command name is cut to the kernel's 15 bytes.
func TestKthreadComm(t *testing.T) {
	if got := kthreadComm("tap0"); got != "napi/tap0-" {
		t.Errorf("kthreadComm(tap0) = %q", got)
	}
	if got := kthreadComm("averylongname0"); got != "napi/averylongn" {
		t.Errorf("kthreadComm(averylongname0) = %q, want the first 15 bytes", got)
	}
}

// NewVethClient is a second Client in bed's fwd namespace, closed when t
// ends: another process's view. Exported for the tests of package
// napi_test.
func NewVethClient(t *testing.T, bed *testbed.Bed) *Client {
	t.Helper()
	var c *Client
	if err := bed.Do(bed.FwdNS, func() (err error) { c, err = Dial(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
