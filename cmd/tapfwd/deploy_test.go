package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnit checks deploy/systemd/tapfwd@.service with
// systemd-analyze verify, and the capabilities it grants.
func TestSystemdUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze not found: install it with apt-get install systemd (scripts/deps.sh does)")
	}
	raw, err := os.ReadFile("../../deploy/systemd/tapfwd@.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
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
	// verify checks that ExecStart exists: point it at this binary.
	p := filepath.Join(t.TempDir(), "tapfwd@lab.service")
	os.WriteFile(p, []byte(strings.ReplaceAll(unit, "/usr/local/bin/tapfwd", exe(t))), 0o644)
	out, err := exec.Command("systemd-analyze", "verify", p).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// unitCaps are the capabilities tapfwd@.service grants.
const unitCaps = "CAP_NET_ADMIN CAP_NET_RAW CAP_MKNOD CAP_CHOWN"
