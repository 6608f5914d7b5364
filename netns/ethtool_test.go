package netns

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGRO: SetGRO turns a veth's GRO on and off as ethtool -k then shows
// it, and GRO reads it back; a missing device is an error that names it.
func TestGRO(t *testing.T) {
	a := newNS(t)
	if _, err := exec.LookPath("ethtool"); err != nil {
		t.Fatal("ethtool is missing: apt-get install ethtool")
	}
	ip(t, "-n", a, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	n := open(t, a)
	ethtool := func() string {
		out, err := exec.Command("ip", "netns", "exec", a, "ethtool", "-k", "d0").CombinedOutput()
		if err != nil {
			t.Fatalf("ethtool -k: %v: %s", err, out)
		}
		_, rest, _ := strings.Cut(string(out), "generic-receive-offload: ")
		v, _, _ := strings.Cut(rest, "\n")
		return v
	}
	if on, err := n.GRO("d0"); err != nil || on || ethtool() != "off" {
		t.Fatalf("a new veth's GRO: %v, %v (ethtool: %s); want off", on, err, ethtool())
	}
	for _, want := range []bool{true, false} {
		if err := n.SetGRO("d0", want); err != nil {
			t.Fatal(err)
		}
		on, err := n.GRO("d0")
		if err != nil || on != want || ethtool() != onOff(want) {
			t.Errorf("after SetGRO(%v): %v, %v (ethtool: %s)", want, on, err, ethtool())
		}
	}
	if _, err := n.GRO("tfwnope0"); err == nil || !strings.Contains(err.Error(), "tfwnope0") {
		t.Errorf("a missing device: %v", err)
	}
	if err := n.SetGRO("tfwnope0", true); err == nil || !strings.Contains(err.Error(), "turning GRO on on tfwnope0") {
		t.Errorf("a missing device: %v", err)
	}
}
