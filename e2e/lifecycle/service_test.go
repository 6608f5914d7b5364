package lifecycle

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/internal/testkit/traffic"
)

// TestNotify: under a service manager (NOTIFY_SOCKET, WATCHDOG_USEC)
// tapfwd says READY=1 once frames flow, pings the watchdog while it runs,
// and says STOPPING=1 on SIGTERM; --ready-fd gets a line and is closed.
func TestNotify(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	ns := testkit.NewNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", ns.Path)
	t.Setenv("WATCHDOG_USEC", "400000")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	args := bed.TapfwdArgs("--metrics-addr", "", "--ready-fd", "3")
	cmd := bed.Command(context.Background(), bed.FwdNS, testkit.Tapfwd(t), args...)
	cmd.ExtraFiles = []*os.File{w}
	out := &strings.Builder{}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	ready := ns.Wait(t, "READY=1", 10*time.Second)
	t.Logf("READY: %q", ready.Text)
	if strings.Contains(ready.Text, " 1 queues") {
		t.Errorf("READY's status counts in broken English: %q", ready.Text)
	}
	// Frames flow as soon as tapfwd says so.
	p := traffic.NewPinger(t, bed)
	if p.Ping(1, time.Second) != 1 {
		t.Errorf("the lab did not answer right after READY=1:\n%s", out)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if !strings.HasPrefix(line, "READY=1") || err != nil {
		t.Errorf("--ready-fd gave %q, %v", line, err)
	}
	if _, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("--ready-fd not closed after the line: %v", err)
	}
	time.Sleep(time.Second)
	if n := ns.Count("WATCHDOG=1"); n < 3 {
		t.Errorf("%d WATCHDOG=1 in the second after READY=1 (WatchdogSec 0.4 s), want at least 3", n)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, out)
	}
	ns.Wait(t, "STOPPING=1", time.Second)
}

// TestSystemdUnit checks deploy/systemd/tapfwd@.service with
// systemd-analyze verify, and the capabilities it grants.
func TestSystemdUnit(t *testing.T) {
	testkit.NeedTools(t, "systemd-analyze")
	unit := templateUnit(t)
	for _, want := range []string{
		"CapabilityBoundingSet=" + unitCaps + "\n",
		"AmbientCapabilities=" + unitCaps + "\n",
		"Type=notify\n", "WatchdogSec=", "ExecStart=/usr/local/bin/tapfwd run --config /etc/tapfwd/%i.conf\n",
		"NoNewPrivileges=yes", "RestrictAddressFamilies=", "ProtectSystem=strict", "DeviceAllow=/dev/net/tun rw",
		"DeviceAllow=char-macvtap m", "SystemCallErrorNumber=EPERM",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	// verify checks that ExecStart exists: point it at the built binary.
	p := filepath.Join(t.TempDir(), "tapfwd@lab.service")
	os.WriteFile(p, []byte(strings.ReplaceAll(unit, "/usr/local/bin/tapfwd", testkit.Tapfwd(t))), 0o644)
	out, err := exec.Command("systemd-analyze", "verify", p).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// templateUnit is the text of deploy/systemd/tapfwd@.service.
func templateUnit(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testkit.ModuleRoot(t), "deploy/systemd/tapfwd@.service"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// unitCaps are the capabilities tapfwd@.service grants.
const unitCaps = "CAP_NET_ADMIN CAP_NET_RAW CAP_MKNOD CAP_CHOWN"

// TestUnitCapabilities runs the template unit's ExecStart line (its config
// file written by the test) the way systemd would: uid 0 without root's
// implicit capabilities (SecureBits=noroot-locked), no new privileges, and
// exactly the unit's AmbientCapabilities. Forwarding, VM ports with an
// owner, and a persistent TAP that a second start attaches to all work with
// those and nothing more.
func TestUnitCapabilities(t *testing.T) {
	testkit.NeedTools(t, "setpriv")
	unit := templateUnit(t)
	caps := strings.Fields(testkit.UnitLine(t, unit, "AmbientCapabilities"))
	if b := strings.Fields(testkit.UnitLine(t, unit, "CapabilityBoundingSet")); strings.Join(b, " ") != strings.Join(caps, " ") {
		t.Fatalf("bounding set %v differs from the ambient set %v", b, caps)
	}

	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	// Without CAP_SYS_ADMIN the TAP stays in the fwd namespace, which
	// is then the lab: w1 must not answer for the TAP's address itself.
	testkit.BedRun(t, bed, bed.FwdNS, "sysctl", "-qw", "net.ipv4.conf."+bed.NIC+".arp_ignore=1")
	conf := filepath.Join(t.TempDir(), "lab.conf")
	os.WriteFile(conf, []byte(strings.Join([]string{
		"nic = " + bed.NIC, "tap = " + bed.LabIf, "tap-addr = " + bed.LabAddr.String(),
		"persist = true", "vm-ports = 2", "vm-port-owner = nobody", `metrics-addr = ""`,
	}, "\n")), 0o600)
	t.Cleanup(func() { testkit.BedRun(t, bed, bed.FwdNS, testkit.Tapfwd(t), "down", "--tap", bed.LabIf) })
	execStart := strings.Fields(strings.ReplaceAll(testkit.UnitLine(t, unit, "ExecStart"), "/etc/tapfwd/%i.conf", conf))
	args := append(append(testkit.SetprivArgs(caps), testkit.Tapfwd(t)), execStart[1:]...)

	for _, start := range []string{"first start", "restart"} {
		fw, err := bed.StartForwarder(context.Background(), "tapfwd under the unit's capabilities", "setpriv", args...)
		if err != nil {
			t.Fatalf("%s: %v", start, err)
		}
		if got := kernel.Status(t, fw.Pid())["CapEff"]; got != capMask(t, caps) {
			t.Errorf("%s: CapEff %s, want %s (%v)", start, got, capMask(t, caps), caps)
		}
		ports, err := tapport.List(bed.FwdNS, bed.LabIf)
		if err != nil || len(ports) != 2 {
			t.Fatalf("%s: VM ports %+v, %v", start, ports, err)
		}
		for _, p := range ports {
			var st unix.Stat_t
			if err := unix.Lstat(p.Dev, &st); err != nil || st.Uid != 65534 || st.Mode&0o777 != 0o660 {
				t.Errorf("%s: node %s: uid %d mode %#o (%v), want nobody's, 0660", start, p.Dev, st.Uid, st.Mode&0o777, err)
			}
		}
		if err := fw.Stop(); err != nil {
			t.Errorf("%s: stop: %v\n%s", start, err, fw.Output())
		}
		if start == "restart" && !strings.Contains(fw.Output(), "attached to the persistent TAP") {
			t.Errorf("the restart did not attach to the persistent TAP:\n%s", fw.Output())
		}
	}
}

// capMask is the CapEff hex mask of caps, as /proc/PID/status shows it.
func capMask(t *testing.T, caps []string) string {
	t.Helper()
	bits := map[string]uint{"CAP_CHOWN": unix.CAP_CHOWN, "CAP_MKNOD": unix.CAP_MKNOD,
		"CAP_NET_ADMIN": unix.CAP_NET_ADMIN, "CAP_NET_RAW": unix.CAP_NET_RAW, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN}
	var m uint64
	for _, c := range caps {
		b, ok := bits[c]
		if !ok {
			t.Fatalf("capMask: add %s", c)
		}
		m |= 1 << b
	}
	return fmt.Sprintf("%016x", m)
}
