package tap

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/vnethdr"
)

func TestParseWant(t *testing.T) {
	for s, w := range map[string]Want{"auto": Auto, "": Auto, "on": On, "off": Off} {
		if got, err := ParseWant(s); err != nil || got != w {
			t.Errorf("ParseWant(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseWant("yes"); err == nil {
		t.Error("ParseWant(yes) did not fail")
	}
}

func TestWant(t *testing.T) {
	const kern = unix.IFF_TAP | unix.IFF_VNET_HDR // no IFF_NAPI
	if got, _ := want("IFF_NAPI", Auto, kern, unix.IFF_NAPI); got {
		t.Error("auto asked for a flag the kernel lacks")
	}
	if got, _ := want("IFF_VNET_HDR", Auto, kern, unix.IFF_VNET_HDR); !got {
		t.Error("auto did not ask for a flag the kernel has")
	}
	if got, _ := want("IFF_VNET_HDR", Off, kern, unix.IFF_VNET_HDR); got {
		t.Error("off asked for a flag")
	}
	_, err := want("IFF_NAPI", On, kern, unix.IFF_NAPI)
	if err == nil || !strings.Contains(err.Error(), "IFF_NAPI") || !errors.Is(err, ErrNoFeature) {
		t.Errorf("on without kernel support: err = %v, want ErrNoFeature naming IFF_NAPI", err)
	}
}

func TestFlagNames(t *testing.T) {
	got := strings.Join(FlagNames(0x7173), " ")
	want := "TUN TAP NAPI NAPI_FRAGS NO_CARRIER NO_PI ONE_QUEUE VNET_HDR MULTI_QUEUE"
	if got != want {
		t.Errorf("FlagNames(0x7173) = %q, want %q", got, want)
	}
	f := Features{Offloads: unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6}
	if f.OffloadNames() != "csum,tso4,tso6" {
		t.Errorf("OffloadNames = %q", f.OffloadNames())
	}
}

// openIn opens a TAP from inside ns, as tapfwd does when run there.
func openIn(t *testing.T, bed *testbed.Bed, ns string, c Config) (*Device, error) {
	t.Helper()
	var d *Device
	err := bed.Do(ns, func() error {
		var err error
		d, err = Open(c)
		return err
	})
	if d != nil {
		t.Cleanup(func() { d.Close() })
	}
	return d, err
}

func TestOpenConfigures(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	mac := net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x20, 0x30}
	addr := netip.MustParsePrefix(bed.LabAddr.String())
	d, err := openIn(t, bed, bed.FwdNS, Config{
		Name: bed.LabIf, Queues: 2, NAPI: On, VnetHdr: On, MTU: 1400, MAC: mac,
		Netns: bed.LabNS, Addr: addr,
		NAPISettings: NAPISettings{Threaded: true, GROFlushTimeout: 20 * time.Microsecond, DeferHardIRQs: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := d.Features()
	if d.Name() != bed.LabIf || len(d.Fds()) != 2 || d.Netns() != bed.LabNS {
		t.Errorf("name %q fds %d netns %q", d.Name(), len(d.Fds()), d.Netns())
	}
	// The kernel's default for a new device (net/core/dev.c:
	// GRO_LEGACY_MAX_SIZE).
	if v4, v6 := d.GROMaxSizes(); v4 != 65536 || v6 != 65536 {
		t.Errorf("GRO max sizes %d, %d; want 65536 each", v4, v6)
	}
	if !f.NAPI || !f.VnetHdr || !f.MultiQueue || f.VnetHdrLen != vnethdr.Len {
		t.Errorf("features %+v", f)
	}
	if f.Offloads&(unix.TUN_F_CSUM|unix.TUN_F_TSO4|unix.TUN_F_TSO6) != unix.TUN_F_CSUM|unix.TUN_F_TSO4|unix.TUN_F_TSO6 {
		t.Errorf("offloads %s, want at least csum,tso4,tso6", f.OffloadNames())
	}
	if d.MAC().String() != mac.String() {
		t.Errorf("MAC %s, want %s", d.MAC(), mac)
	}
	link := testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "addr", "show", "dev", bed.LabIf)
	for _, want := range []string{"mtu 1400", addr.String(), "UP"} {
		if !strings.Contains(testkit.BedRun(t, bed, bed.LabNS, "ip", "-o", "link", "show", "dev", bed.LabIf)+link, want) {
			t.Errorf("TAP in lab lacks %q:\n%s", want, link)
		}
	}
	// The kernel's own view of the flags (drivers/net/tun.c: tun_flags_show).
	flags := strings.TrimSpace(testkit.BedRun(t, bed, bed.LabNS, "cat", "/sys/class/net/"+bed.LabIf+"/tun_flags"))
	if flags != "0x5112" { // TAP|NAPI|MULTI_QUEUE|NO_PI|VNET_HDR
		t.Errorf("tun_flags %s, want 0x5112", flags)
	}
	// The NAPI settings, written before the move, came along.
	for attr, want := range map[string]string{"threaded": "1", "gro_flush_timeout": "20000", "napi_defer_hard_irqs": "2"} {
		if got := strings.TrimSpace(testkit.BedRun(t, bed, bed.LabNS, "cat", "/sys/class/net/"+bed.LabIf+"/"+attr)); got != want {
			t.Errorf("%s = %s, want %s", attr, got, want)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := bed.Run(context.Background(), bed.LabNS, "ip", "link", "show", "dev", bed.LabIf); err == nil {
		t.Error("TAP still exists after Close")
	}
}

func TestOpenOffAndKernelName(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	d, err := openIn(t, bed, bed.FwdNS, Config{NAPI: Off, VnetHdr: Off})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.Name(), "tap") {
		t.Errorf("kernel-picked name %q", d.Name())
	}
	f := d.Features()
	if f.NAPI || f.VnetHdr || f.Offloads != 0 {
		t.Errorf("off features %+v", f)
	}
	flags := strings.TrimSpace(testkit.BedRun(t, bed, bed.FwdNS, "cat", "/sys/class/net/"+d.Name()+"/tun_flags"))
	if flags != "0x1102" { // TAP|MULTI_QUEUE|NO_PI
		t.Errorf("tun_flags %s, want 0x1102", flags)
	}
}

func TestOpenErrorsLeaveNothing(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	// A TAP of the name the test moves in, waiting in the lab.
	testkit.BedRun(t, bed, bed.LabNS, "ip", "tuntap", "add", "dev", "tfwy"+bed.ID, "mode", "tap")
	for _, tc := range []struct {
		c    Config
		want string
		kind error
	}{
		{Config{Name: bed.NIC}, "is in use", ErrNameInUse},
		{Config{Name: "tfwy" + bed.ID, Netns: bed.LabNS}, "is in use", ErrNameInUse},
		{Config{Name: "tfwx" + bed.ID, Netns: "tfw-no-such-ns"}, "ip netns add", netns.ErrNotFound},
		{Config{Name: "tfwx" + bed.ID, MTU: 70000}, "mtu", nil},
		{Config{Name: "this-name-is-too-long"}, "longer than", nil},
		{Config{Name: "tfwx" + bed.ID, NAPI: Off, NAPISettings: NAPISettings{Threaded: true}}, "IFF_NAPI", nil},
	} {
		_, err := openIn(t, bed, bed.FwdNS, tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.kind != nil && !errors.Is(err, tc.kind)) {
			t.Errorf("Open(%+v) = %v, want an error containing %q (is %v)", tc.c, err, tc.want, tc.kind)
		}
		links := testkit.BedRun(t, bed, bed.FwdNS, "ip", "-o", "link", "show")
		if strings.Count(strings.TrimSpace(links), "\n") != 1 {
			t.Errorf("after a failed Open the namespace holds:\n%s", links)
		}
	}
}

// TestMessagesNameNoPackage: what a user reads of a TAP that cannot be
// made says what is wrong with it, not which Go package said so (issue
// 38, item 7e).
func TestMessagesNameNoPackage(t *testing.T) {
	for _, c := range []Config{{Name: strings.Repeat("t", 16)}, {Name: "t0", Queues: 2, QueueNAPI: []bool{true}}} {
		err := checkConfig(c)
		if err == nil || strings.HasPrefix(err.Error(), "tap: ") {
			t.Errorf("checkConfig(%+v) = %v, want an error that names no package", c, err)
		}
	}
	if err := Remove("tfw-no-such0", ""); !errors.Is(err, ErrNoTAP) || strings.HasPrefix(err.Error(), "tap: ") {
		t.Errorf("Remove of no TAP: %v, want ErrNoTAP naming no package", err)
	}
}
