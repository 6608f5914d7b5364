package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/netns"
)

// TestNICGRORestored: --nic-gro on turns the NIC veth's GRO on while
// tapfwd runs, and SIGTERM puts back the veth's own, off. SIGKILL runs no
// clean-up, so the NIC keeps GRO on; the next run puts back what the NIC
// had before the killed run (off) before it reads the NIC, so that it
// journals, and at SIGTERM restores, off and not the killed run's on;
// after another SIGKILL, tapfwd down puts it back too. The NIC's journal
// (/run/tapfwd/features) is gone at the end.
func TestNICGRORestored(t *testing.T) {
	bed := testkit.ForwarderBed(t, "ethtool")
	ns := groNS(t, bed)
	gro := func(when string, want string) {
		t.Helper()
		on, err := ns.GRO(bed.NIC)
		_, eth, _ := strings.Cut(testkit.BedRun(t, bed, bed.FwdNS, "ethtool", "-k", bed.NIC), "generic-receive-offload: ")
		eth, _, _ = strings.Cut(eth, "\n")
		if err != nil || (map[bool]string{true: "on", false: "off"})[on] != want || eth != want {
			t.Errorf("%s: the NIC's GRO reads %v, %v (ethtool -k: %s); want %s", when, on, err, eth, want)
		}
	}
	gro("before tapfwd", "off")
	exe := testkit.Tapfwd(t)
	stopped := func(fw *testbed.Process, when string) string {
		t.Helper()
		if err := fw.Stop(); err != nil {
			t.Fatalf("exit: %v\n%s", err, fw.Output())
		}
		gro(when, "off")
		return fw.Output()
	}
	fw := testkit.StartOn(t, bed, exe, "--nic-gro", "on")
	gro("while tapfwd runs", "on")
	if out := stopped(fw, "after SIGTERM"); !strings.Contains(out, `msg="NIC GRO" nic=`+bed.NIC+" gro=on was=off") ||
		!strings.Contains(out, "put back the NIC's GRO") {
		t.Errorf("tapfwd did not say it turned GRO on and back:\n%s", out)
	}
	killed := func() {
		fw := testkit.StartOn(t, bed, exe, "--nic-gro", "on")
		fw.Kill()
		gro("after SIGKILL", "on")
	}

	killed()
	fw = testkit.StartOn(t, bed, exe, "--nic-gro", "on")
	gro("while the next run runs", "on")
	out := stopped(fw, "after the next run's SIGTERM")
	if !strings.Contains(out, "put back the NIC's features a killed tapfwd left") || !strings.Contains(out, "gro=on was=off") {
		t.Errorf("the next run did not put the killed run's GRO back before its own change:\n%s", out)
	}

	killed()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, stdout, stderr := testkit.Run(t, bed.Command(ctx, bed.FwdNS, exe, "down"))
	if code != 0 || !strings.Contains(stdout, "NIC "+bed.NIC+": put back the features tapfwd pid") || !strings.Contains(stdout, "gro off") {
		t.Errorf("tapfwd down: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("tapfwd down: %s", stdout)
	gro("after tapfwd down", "off")
	if left, _ := filepath.Glob(featureJournals(bed)); len(left) != 0 {
		t.Errorf("journals left: %v", left)
	}
}

// TestNICGROWaitNIC: a NIC made again while tapfwd waits for it
// (--wait-nic) comes with GRO off, the kernel's default for a veth;
// tapfwd turns it on as --nic-gro on asks, and puts it back at exit. The
// journal of the NIC that went is dropped then: its GRO went with it.
func TestNICGROWaitNIC(t *testing.T) {
	testkit.NeedRoot(t, "ethtool")
	bed, fw := testkit.Start(t, testkit.Tapfwd(t), "--wait-nic", "--nic-gro", "on")
	ns := groNS(t, bed)
	gro := func(when string, want bool) {
		t.Helper()
		if on, err := ns.GRO(bed.NIC); err != nil || on != want {
			t.Errorf("%s: the NIC's GRO is on: %v, %v; want %v", when, on, err, want)
		}
	}
	gro("while tapfwd runs", true)
	testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "del", bed.NIC)
	time.Sleep(300 * time.Millisecond)
	testkit.BedRun(t, bed, bed.WireNS, "ip", "link", "add", bed.WireIf, "type", "veth", "peer", "name", bed.NIC, "netns", bed.FwdNS)
	testkit.BedRun(t, bed, bed.WireNS, "ip", "addr", "add", bed.WireAddr.String(), "dev", bed.WireIf)
	testkit.BedRun(t, bed, bed.WireNS, "ip", "link", "set", bed.WireIf, "up")
	testkit.BedRun(t, bed, bed.FwdNS, "ip", "link", "set", bed.NIC, "up")
	testkit.ReachableWithin(t, bed, 5*time.Second)
	gro("on the NIC that came back", true)
	if left, _ := filepath.Glob(featureJournals(bed)); len(left) != 2 {
		t.Errorf("journals while tapfwd runs: %v, want the old NIC's and the new one's", left)
	}
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit: %v\n%s", err, fw.Output())
	}
	gro("after SIGTERM", false)
	if !strings.Contains(fw.Output(), "not putting back the NIC's GRO") || !strings.Contains(fw.Output(), "put back the NIC's GRO") {
		t.Errorf("tapfwd did not say what it did with each NIC's GRO:\n%s", fw.Output())
	}
	if left, _ := filepath.Glob(featureJournals(bed)); len(left) != 0 {
		t.Errorf("journals left: %v", left)
	}
}

// TestNICGROWithNAPIThreaded: on a veth with GRO off, which has no NAPI
// instances, --nic-gro on gives it the instances --nic-napi-threaded
// makes threaded, so tapfwd starts. After a SIGKILL the next run puts
// back the NAPI settings first, while GRO is still on and the instances
// are there (the NAPI journal is restored, not discarded as stale), then
// GRO; at SIGTERM both are put back without a failed clean-up.
func TestNICGROWithNAPIThreaded(t *testing.T) {
	bed := testkit.ForwarderBed(t)
	t.Cleanup(func() {
		for _, dir := range []string{"napi", "features"} {
			left, _ := filepath.Glob("/run/tapfwd/" + dir + "/*-" + bed.NIC + ".json")
			for _, p := range left {
				os.Remove(p)
			}
		}
	})
	err := bed.Do(bed.FwdNS, func() error {
		c, err := napi.Dial()
		if err == nil && !c.Features().Threaded {
			err = errors.New("--nic-napi-threaded needs Linux 6.17")
		}
		if c != nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	exe := testkit.Tapfwd(t)
	args := []string{"--nic-gro", "on", "--nic-napi-threaded", "enabled"}
	testkit.StartOn(t, bed, exe, args...).Kill()
	fw := testkit.StartOn(t, bed, exe, args...)
	if err := fw.Stop(); err != nil {
		t.Fatalf("exit: %v\n%s", err, fw.Output())
	}
	out := fw.Output()
	for _, want := range []string{"put back the NIC's NAPI settings a killed tapfwd left", "put back the NIC's features a killed tapfwd left",
		"NIC NAPI threaded", "put back the NIC's GRO"} {
		if !strings.Contains(out, want) {
			t.Errorf("the run after the kill did not log %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "discarded") || strings.Contains(out, "clean-up failed") {
		t.Errorf("the run after the kill:\n%s", out)
	}
	ns, err := netns.Open(bed.FwdNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if on, err := ns.GRO(bed.NIC); err != nil || on {
		t.Errorf("the NIC's GRO after SIGTERM is on: %v, %v", on, err)
	}
}

// groNS opens the namespace of bed's NIC to read its GRO, closed when t
// ends, and removes any feature journal a failed test left for the NIC.
func groNS(t *testing.T, bed *testbed.Bed) *netns.NS {
	t.Helper()
	t.Cleanup(func() {
		left, _ := filepath.Glob(featureJournals(bed))
		for _, p := range left {
			os.Remove(p)
		}
	})
	ns, err := netns.Open(bed.FwdNS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// featureJournals matches the feature journals of bed's NIC.
func featureJournals(bed *testbed.Bed) string { return "/run/tapfwd/features/*-" + bed.NIC + ".json" }
