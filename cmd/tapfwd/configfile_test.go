package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConf(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lab.conf")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFile: the file sets the same names as the flags; the command
// line wins; a bool may stand alone.
func TestConfigFile(t *testing.T) {
	p := writeConf(t, `# lab segment 1
nic = veth1
tap = lab0
queues = 2
persist
vm-ports = 3
tap-netns = "lab"
metrics-addr = 127.0.0.1:9400
`)
	c, err := parseRun([]string{"--config", p, "--queues", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.NIC.Name != "veth1" || c.TAP.Name != "lab0" || c.TAP.Queues != 4 || !c.TAP.Persist || c.VMPorts.N != 3 ||
		c.TAP.Netns != "lab" || c.Metrics.Addr != "127.0.0.1:9400" {
		t.Errorf("config: %+v", c)
	}
}

// TestConfigFileErrors: each mistake is one line naming the key and the
// line it is on.
func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"nic = x\nfrobnicate = 1\n", `:2: unknown key "frobnicate"`},
		{"nic = x\nqueues = many\n", ":2: queues:"},
		{"nic = x\nqueues\n", `:2: "queues" needs a value`},
		{"nic = x\nnic = y\n", `:2: "nic" given again (first on line 1)`},
		{"config = other.conf\n", ":1: a config file cannot name another one"},
		{"nic = x\nqueues = 0\n", "--queues 0: want 1 to 256"},
	} {
		_, err := parseRun([]string{"--config", writeConf(t, tc.text)}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line containing %q", tc.text, err, tc.want)
		}
	}
}
