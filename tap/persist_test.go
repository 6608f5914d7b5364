package tap

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/netns"
)

func TestRecord(t *testing.T) {
	r := record{queues: 2, napi: true, vnet: false}
	got, ok := parseRecord(r.String())
	if !ok || got != r {
		t.Errorf("parseRecord(%q) = %+v, %v", r.String(), got, ok)
	}
	for _, bad := range []string{"", "lab tap", "tapfwd:queues=0,napi=on,vnet-hdr=on", "tapfwd:queues=2,napi=on"} {
		if _, ok := parseRecord(bad); ok {
			t.Errorf("parseRecord(%q) accepted", bad)
		}
	}
}

// linkIn describes name in namespace ns of the bed.
func linkIn(t *testing.T, ns, name string) (netns.Link, error) {
	t.Helper()
	n, err := netns.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	return n.Link(name)
}

// TestPersistAttach: a persistent TAP outlives its queues with its settings
// recorded; a second Open with the same settings attaches to it (and moves
// frames), one with other settings is refused and changes nothing, one
// without Persist is refused, and Remove deletes it only when nobody holds
// it.
func TestPersistAttach(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	name := "tfwp" + bed.ID
	c := Config{Name: name, Queues: 2, NAPI: On, VnetHdr: On, Netns: bed.LabNS, Persist: true}
	t.Cleanup(func() { Remove(name, bed.LabNS) })
	d, err := openIn(t, bed, bed.FwdNS, c)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Persistent() || d.Attached() {
		t.Errorf("new TAP: persistent %v attached %v", d.Persistent(), d.Attached())
	}
	mac := d.MAC().String()
	d.Close()
	l, err := linkIn(t, bed.LabNS, name)
	if err != nil {
		t.Fatalf("persistent TAP gone after its queues closed: %v", err)
	}
	if !l.Tun.Persist || l.Tun.Queues != 0 || !strings.HasPrefix(l.Alias, recordPrefix) {
		t.Errorf("after close: %+v alias %q", l.Tun, l.Alias)
	}

	for _, tc := range []struct {
		what string
		c    Config
		want error
	}{
		{"other queues", Config{Name: name, Queues: 1, NAPI: On, VnetHdr: On, Netns: bed.LabNS, Persist: true}, ErrMismatch},
		{"other vnet-hdr", Config{Name: name, Queues: 2, NAPI: On, VnetHdr: Off, Netns: bed.LabNS, Persist: true}, ErrMismatch},
		{"other napi", Config{Name: name, Queues: 2, NAPI: Off, VnetHdr: On, Netns: bed.LabNS, Persist: true}, ErrMismatch},
		{"no persist", Config{Name: name, Queues: 2, NAPI: On, VnetHdr: On, Netns: bed.LabNS}, ErrPersistent},
	} {
		if _, err := openIn(t, bed, bed.FwdNS, tc.c); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		} else if tc.want == ErrMismatch && !strings.Contains(err.Error(), "asked") {
			t.Errorf("%s: %q does not say what differs", tc.what, err)
		}
	}
	if l2, _ := linkIn(t, bed.LabNS, name); l2.Alias != l.Alias || l2.Tun != l.Tun {
		t.Errorf("a refused attach changed the TAP: %+v %q -> %+v %q", l.Tun, l.Alias, l2.Tun, l2.Alias)
	}

	d, err = openIn(t, bed, bed.FwdNS, c)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if !d.Attached() || d.MAC().String() != mac || len(d.Fds()) != 2 || d.Netns() != bed.LabNS {
		t.Errorf("attached: %v mac %s (was %s) fds %d netns %q", d.Attached(), d.MAC(), mac, len(d.Fds()), d.Netns())
	}
	if l, _ := linkIn(t, bed.LabNS, name); l.Tun.Queues != 2 || !l.Up {
		t.Errorf("attached TAP: %d queues, up %v", l.Tun.Queues, l.Up)
	}
	if err := Remove(name, bed.LabNS); !errors.Is(err, ErrAttached) {
		t.Errorf("Remove while attached: %v, want ErrAttached", err)
	}
	// A frame written into the attached queue reaches the TAP's stack.
	frame := make([]byte, 10+60)
	copy(frame[10:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 9, 0x88, 0xb5})
	if _, err := unix.Write(d.Fds()[0], frame); err != nil {
		t.Errorf("write into the attached queue: %v", err)
	}
	d.Close()
	if err := Remove(name, bed.LabNS); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := linkIn(t, bed.LabNS, name); !errors.Is(err, unix.ENODEV) {
		t.Errorf("TAP still there after Remove: %v", err)
	}
	if err := Remove(name, bed.LabNS); !errors.Is(err, ErrNoTAP) {
		t.Errorf("Remove of a missing TAP: %v, want ErrNoTAP", err)
	}
}

// TestPersistRefusesOwner: a persistent TAP someone made with an owner or
// a group (ip tuntap add ... user U / group G: TUNSETOWNER, TUNSETGROUP)
// lets that user or group attach queues without CAP_NET_ADMIN, so read
// and write the lab's frames: attaching to it is refused, in one line
// saying what was found, and the TAP is left as it is.
func TestPersistRefusesOwner(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	for _, tc := range []struct{ what, args, want string }{
		{"owner", "user 65534", "owner 65534"},
		{"group", "group 65534", "group 65534"},
		{"both", "user 65533 group 65534", "owner 65533 and group 65534"},
	} {
		name := "tfwo" + bed.ID
		testkit.BedRun(t, bed, bed.LabNS, append([]string{"ip", "tuntap", "add", "dev", name, "mode", "tap", "multi_queue", "vnet_hdr"}, strings.Fields(tc.args)...)...)
		l, err := linkIn(t, bed.LabNS, name)
		if err != nil {
			t.Fatal(err)
		}
		c := Config{Name: name, Queues: 1, VnetHdr: On, Netns: bed.LabNS, Persist: true}
		_, err = openIn(t, bed, bed.FwdNS, c)
		t.Logf("%s: %v", tc.what, err)
		if !errors.Is(err, ErrOwned) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want ErrOwned naming %q in one line", tc.what, err, tc.want)
		}
		if l2, _ := linkIn(t, bed.LabNS, name); l2.Tun != l.Tun || l2.Up {
			t.Errorf("%s: a refused attach changed the TAP: %+v -> %+v", tc.what, l.Tun, l2.Tun)
		}
		if err := Remove(name, bed.LabNS); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemoveAttachedCounts: Remove of a persistent TAP a process holds
// says how many queues it has attached, in words: "1 queue", "2 queues"
// (issue 38, item 7d).
func TestRemoveAttachedCounts(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	for _, tc := range []struct {
		queues int
		want   string
	}{{1, "has 1 queue attached"}, {2, "has 2 queues attached"}} {
		name := "tfwq" + bed.ID
		c := Config{Name: name, Queues: tc.queues, NAPI: On, VnetHdr: On, Netns: bed.LabNS, Persist: true}
		d, err := openIn(t, bed, bed.FwdNS, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := Remove(name, bed.LabNS); !errors.Is(err, ErrAttached) || !strings.Contains(err.Error(), tc.want) || strings.HasPrefix(err.Error(), "tap: ") {
			t.Errorf("Remove of a TAP with %d queues attached: %v, want ErrAttached saying %q", tc.queues, err, tc.want)
		}
		d.Close()
		if err := Remove(name, bed.LabNS); err != nil {
			t.Fatal(err)
		}
	}
}
