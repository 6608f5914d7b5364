package main

import (
	"io"
	"os"
	"path/filepath"
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
	c, err := parseRun([]string{"--config", p, "--queues", "4"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.NIC.Name != "veth1" || c.TAP.Name != "lab0" || c.TAP.Queues != 4 || !c.TAP.Persist || c.VMPorts.N != 3 ||
		c.TAP.Netns != "lab" || c.Metrics.Addr != "127.0.0.1:9400" {
		t.Errorf("config: %+v", c)
	}
}
