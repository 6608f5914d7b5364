// Package deploy holds the tests of the files under deploy/: the systemd
// template unit with each of its drop-ins, the lab namespace's unit and the
// metrics socket, the sample configuration and the Prometheus targets, as
// make install puts them down and as the units run them.
package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
)

const unitFile = "systemd/tapfwd@.service"

// dropIns are the drop-ins deploy/systemd/tapfwd@.service.d ships, by
// file name: what each one adds to the unit's capabilities.
var dropIns = map[string][]string{
	"netns.conf": {"CAP_SYS_ADMIN"},
	"user.conf":  {"CAP_SETUID", "CAP_SETGID"},
}

// TestUnitWithDropIns checks the template unit alone and with each drop-in
// with systemd-analyze verify (no warning), and with systemd-analyze
// security --offline that a drop-in adds its capabilities to the unit's
// rather than replacing them, and that the unit gives vhost-user its
// runtime directory.
func TestUnitWithDropIns(t *testing.T) {
	testkit.NeedTools(t, "systemd-analyze")
	shipped, err := filepath.Glob("systemd/tapfwd@.service.d/*.conf")
	if err != nil || len(shipped) != len(dropIns) {
		t.Fatalf("drop-ins %v (%v), want one per entry of %v", shipped, err, dropIns)
	}
	unit := readFile(t, unitFile)
	for _, want := range []string{"RuntimeDirectory=tapfwd/vhost\n", "RuntimeDirectoryPreserve=yes\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q (--vhost-user /run/tapfwd/vhost under ProtectSystem=strict)", want)
		}
	}
	for _, name := range append([]string{""}, keys(dropIns)...) {
		sub := "unit"
		if name != "" {
			sub += "+" + strings.TrimSuffix(name, ".conf")
		}
		t.Run(sub, func(t *testing.T) {
			path := stage(t, name)
			if out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) != 0 {
				t.Errorf("systemd-analyze verify: %v\n%s", err, out)
			}
			granted := grantedCaps(t, path)
			for _, c := range append(strings.Fields(testkit.UnitLine(t, unit, "AmbientCapabilities")), dropIns[name]...) {
				if !granted[c] {
					t.Errorf("%s is not in the bounding set of the unit with %q", c, name)
				}
			}
			if name != "netns.conf" && granted["CAP_SYS_ADMIN"] {
				t.Errorf("the unit with %q grants CAP_SYS_ADMIN", name)
			}
		})
	}
}

// stage writes the unit as tapfwd@lab.service into a temporary directory,
// its ExecStart pointed at an executable that exists (verify checks it),
// with the drop-in dropIn (none when empty) in tapfwd@lab.service.d, and
// returns the unit's path.
func stage(t *testing.T, dropIn string) string {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tapfwd@lab.service")
	writeFile(t, path, strings.ReplaceAll(readFile(t, unitFile), "/usr/local/bin/tapfwd", self))
	if dropIn != "" {
		writeFile(t, filepath.Join(path+".d", dropIn), readFile(t, filepath.Join("systemd/tapfwd@.service.d", dropIn)))
	}
	return path
}

// grantedCaps asks systemd-analyze security which of the capabilities it
// rates the unit at path keeps in its bounding set. It rates some in
// groups (CAP_SET(UID|GID|PCAP)): a group counts for each of its members.
func grantedCaps(t *testing.T, path string) map[string]bool {
	t.Helper()
	out, err := exec.Command("systemd-analyze", "security", "--offline=yes", "--json=short", path).Output()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v", err)
	}
	var rows []struct {
		Field string `json:"json_field"`
		Set   bool   `json:"set"`
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("systemd-analyze security --json: %v\n%s", err, out)
	}
	groups := map[string][]string{
		"CapabilityBoundingSet_CAP_SYS_ADMIN":                       {"CAP_SYS_ADMIN"},
		"CapabilityBoundingSet_CAP_NET_ADMIN":                       {"CAP_NET_ADMIN"},
		"CapabilityBoundingSet_CAP_MKNOD":                           {"CAP_MKNOD"},
		"CapabilityBoundingSet_CAP_SET_UID_GID_PCAP":                {"CAP_SETUID", "CAP_SETGID"},
		"CapabilityBoundingSet_CAP_CHOWN_FSETID_SETFCAP":            {"CAP_CHOWN"},
		"CapabilityBoundingSet_CAP_NET_BIND_SERVICE_BROADCAST_RAW)": {"CAP_NET_RAW"},
	}
	granted := map[string]bool{}
	seen := 0
	for _, r := range rows {
		if caps, ok := groups[r.Field]; ok {
			seen++
			for _, c := range caps {
				granted[c] = !r.Set // "set": the restriction holds
			}
		}
	}
	if seen != len(groups) {
		t.Fatalf("systemd-analyze security rated %d of the capability groups %v", seen, keys(groups))
	}
	return granted
}

// TestDropInCapabilities runs the unit's ExecStart the way systemd would
// (uid 0 without root's implicit capabilities, no new privileges, exactly
// the capabilities of the unit and the drop-in in the bounding,
// inheritable and ambient sets), and shows each drop-in is what its flag
// needs: tap-netns (the TAP in the lab's namespace) starts with netns.conf
// and is refused without it; user (tapfwd drops to nobody and forwards on,
// with no capability left) likewise with user.conf. The system call filter
// is systemd's and not applied here.
func TestDropInCapabilities(t *testing.T) {
	testkit.NeedRoot(t, "setpriv")
	tapfwd := testkit.PlainTapfwd(t)
	unit := readFile(t, unitFile)
	for _, tc := range []struct {
		dropIn string
		config func(bed *testbed.Bed) []string
		check  func(t *testing.T, bed *testbed.Bed, status map[string]string)
	}{
		{"netns.conf", func(bed *testbed.Bed) []string { return []string{"tap-netns = " + bed.LabNS} },
			func(t *testing.T, bed *testbed.Bed, status map[string]string) {
				if _, err := bed.Run(context.Background(), bed.LabNS, "ip", "link", "show", bed.LabIf); err != nil {
					t.Errorf("the TAP is not in the lab's namespace: %v", err)
				}
			}},
		{"user.conf", func(*testbed.Bed) []string { return []string{"user = nobody"} },
			func(t *testing.T, _ *testbed.Bed, status map[string]string) {
				if status["CapEff"] != "0000000000000000" || !strings.HasPrefix(status["Uid"], "65534\t") {
					t.Errorf("after the drop: Uid %q CapEff %q, want nobody's with none", status["Uid"], status["CapEff"])
				}
			}},
	} {
		t.Run(strings.TrimSuffix(tc.dropIn, ".conf"), func(t *testing.T) {
			bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
			lines := append([]string{"nic = " + bed.NIC, "tap = " + bed.LabIf, "tap-addr = " + bed.LabAddr.String(), `metrics-addr = ""`}, tc.config(bed)...)
			if tc.dropIn != "netns.conf" {
				// The TAP stays in the fwd namespace, which is then
				// the lab: w1 must not answer for the TAP's address.
				if _, err := bed.Run(context.Background(), bed.FwdNS, "sysctl", "-qw", "net.ipv4.conf."+bed.NIC+".arp_ignore=1"); err != nil {
					t.Fatal(err)
				}
			}
			conf := filepath.Join(t.TempDir(), "lab.conf")
			writeFile(t, conf, strings.Join(lines, "\n")+"\n")
			execStart := strings.Fields(strings.ReplaceAll(testkit.UnitLine(t, unit, "ExecStart"), "/etc/tapfwd/%i.conf", conf))
			unitCaps := strings.Fields(testkit.UnitLine(t, unit, "AmbientCapabilities"))

			// Without the drop-in the start fails.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := bed.Run(ctx, bed.FwdNS, "setpriv", append(testkit.SetprivArgs(unitCaps), append([]string{tapfwd}, execStart[1:]...)...)...)
			if err == nil || ctx.Err() != nil {
				t.Errorf("without %s: started (%v), want a refusal:\n%s", tc.dropIn, err, out)
			} else {
				t.Logf("without %s: %s", tc.dropIn, strings.TrimSpace(out))
			}

			caps := append(unitCaps, dropIns[tc.dropIn]...)
			fw, err := bed.StartForwarder(context.Background(), "tapfwd under the unit's and "+tc.dropIn+"'s capabilities",
				"setpriv", append(testkit.SetprivArgs(caps), append([]string{tapfwd}, execStart[1:]...)...)...)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, bed, kernel.Status(t, fw.Pid()))
			if err := fw.Stop(); err != nil {
				t.Errorf("stop: %v\n%s", err, fw.Output())
			}
		})
	}
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(fmt.Errorf("writing %s: %w", path, err))
	}
}
