package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestHostsPlan checks the two-host bed's names and build steps, for
// every mode and peering, without building it: names under the bed's
// prefix (TAP names within IFNAMSIZ), every step in one of its four
// namespaces, every address in 198.18.0.0/15, the VXLAN devices with the
// VNI, port and MTU asked and each other's underlay address as peer.
func TestHostsPlan(t *testing.T) {
	bench := netip.MustParsePrefix("198.18.0.0/15")
	for _, mode := range []HostsMode{HostsForwarder, HostsBridge} {
		for _, peering := range []Peering{PeerFDB, PeerRemote} {
			name := mode.String() + "/" + peering.String()
			h := newHosts(HostsConfig{Mode: mode, Peering: peering, MTU: 9000, VNI: 77}, "0a0b0c", 7, "/sbin/ip")
			if h.MTU != 9000-VXLANOverhead || h.Host[1].NS != "tfw-0a0b0c-host2" || h.Host[0].LabNS != "tfw-0a0b0c-lab1" ||
				h.Host[1].LabAddr.String() != "198.18.7.2/24" || h.Host[0].UnderlayAddr.String() != "198.19.7.1/24" {
				t.Errorf("%s: %+v", name, h)
			}
			for i := range h.Host {
				if l := len(h.Host[i].LabIf); l > 15 {
					t.Errorf("%s: TAP name %q has %d bytes", name, h.Host[i].LabIf, l)
				}
				steps := h.hostSteps(i)
				checkSteps(t, name, h, i, steps, bench)
			}
		}
	}
}

// checkSteps checks host i's steps of h.
func checkSteps(t *testing.T, name string, h *Hosts, i int, steps [][]string, bench netip.Prefix) {
	t.Helper()
	var vx, fdb []string
	for _, s := range steps {
		if s[0] == bridgeCmd {
			fdb, s = s, s[1:]
		}
		if s[0] != "-n" || !slices.Contains(h.namespaces(), s[1]) {
			t.Errorf("%s host %d: a step outside the bed: %q", name, i, s)
		}
		for _, w := range s {
			if p, err := netip.ParsePrefix(w); err == nil && !bench.Overlaps(p) {
				t.Errorf("%s host %d: address %s outside 198.18.0.0/15", name, i, w)
			}
			if a, err := netip.ParseAddr(w); err == nil && !bench.Contains(a) {
				t.Errorf("%s host %d: address %s outside 198.18.0.0/15", name, i, w)
			}
		}
		if slices.Contains(s, "vxlan") {
			vx = s
		}
	}
	peer := h.Host[1-i].UnderlayAddr.Addr().String()
	v := " " + strings.Join(vx, " ") + " "
	if !strings.Contains(v, " id 77 dstport 4789 ") || !strings.Contains(v, " mtu 8950 ") ||
		strings.Contains(v, " remote "+peer+" ") != (h.Peering == PeerRemote) {
		t.Errorf("%s host %d: VXLAN device %q", name, i, vx)
	}
	if (fdb != nil) != (h.Peering == PeerFDB) || fdb != nil && fdb[len(fdb)-1] != peer {
		t.Errorf("%s host %d: fdb entry %q", name, i, fdb)
	}
	if last := steps[len(steps)-1]; last[len(last)-1] != "up" || last[len(last)-2] != "vx0" {
		t.Errorf("%s host %d: the VXLAN device is not brought up last: %q", name, i, last)
	}
}

// TestHostsView: a view from one lab toward the other is a Bed whose
// wire is lab from and whose forwarder is host to's; ForwarderArgs is
// host i's forwarder's devices; a view of one lab to itself panics.
func TestHostsView(t *testing.T) {
	h := newHosts(HostsConfig{Mode: HostsForwarder, MTU: 1500, VNI: 42}, "0a0b0c", 9, "/sbin/ip")
	v := h.View(0, 1)
	if v.Mode != Forwarder || v.WireNS != "tfw-0a0b0c-lab1" || v.FwdNS != "tfw-0a0b0c-host2" || v.NIC != "vx0" ||
		v.LabIf != "tfwtap2-0a0b0c" || v.WireAddr.String() != "198.18.9.1/24" || v.LabAddr.String() != "198.18.9.2/24" || v.MTU != 1450 {
		t.Errorf("View(0, 1) = %+v", v)
	}
	if got := strings.Join(h.ForwarderArgs(0), " "); got != "--nic vx0 --tap tfwtap1-0a0b0c --tap-netns tfw-0a0b0c-lab1 --tap-addr 198.18.9.1/24" {
		t.Errorf("ForwarderArgs(0) = %s", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "View(1, 1)") {
			t.Errorf("View(1, 1) did not panic: %v", r)
		}
	}()
	h.View(1, 1)
}

// fakeTB is a TB that records what a constructor did to it. As testing's
// do, its Skipf and Fatalf end the goroutine: run calls the constructor
// on one of its own.
type fakeTB struct {
	skipped, failed string
	errs            []string
	cleanups        []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run runs fn on a goroutine of its own and waits for it to return or
// end in Skipf or Fatalf.
func (f *fakeTB) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

type fakeBed struct {
	closed int
	err    error
}

func (b *fakeBed) Close() error { b.closed++; return b.err }

// TestForTest: where beds cannot be built the constructor skips (saying
// why) and builds nothing; where they can, a build that fails fails the
// test with the bed's description, and one that works is closed when the
// test ends, a failure to close reported.
func TestForTest(t *testing.T) {
	built := 0
	build := func(b *fakeBed, err error) func(context.Context) (*fakeBed, error) {
		return func(context.Context) (*fakeBed, error) { built++; return b, err }
	}
	id := func(*fakeBed) string { return "0a0b0c" }
	if err := Available(); err != nil {
		f := &fakeTB{}
		f.run(func() { forTest(f, "forwarder test bed", build(&fakeBed{}, nil), id) })
		if !strings.HasPrefix(f.skipped, "skipping privileged test: testbed: ") || built != 0 {
			t.Errorf("beds unavailable (%v): skipped %q, built %d", err, f.skipped, built)
		}
		return
	}
	f := &fakeTB{}
	f.run(func() { forTest(f, "forwarder test bed", build(nil, errors.New("no room")), id) })
	if f.failed != "building forwarder test bed: no room" || f.skipped != "" || len(f.cleanups) != 0 {
		t.Errorf("failed build: %+v", f)
	}
	f = &fakeTB{}
	b := &fakeBed{err: errors.New("busy")}
	var got *fakeBed
	f.run(func() { got = forTest(f, "bridge test bed", build(b, nil), id) })
	if got != b || len(f.cleanups) != 1 || b.closed != 0 {
		t.Fatalf("build: %+v", f)
	}
	f.cleanups[0]()
	if b.closed != 1 || len(f.errs) != 1 || f.errs[0] != "removing bridge test bed 0a0b0c: busy" {
		t.Errorf("cleanup: closed %d, errors %q", b.closed, f.errs)
	}
}
