package tap

import (
	"strings"
	"testing"
)

func TestHardwareAddr(t *testing.T) {
	if m, err := HardwareAddr("02:00:00:00:00:01"); err != nil || m.String() != "02:00:00:00:00:01" {
		t.Errorf("a unicast MAC: %v, %v", m, err)
	}
	if m, err := HardwareAddr(""); m != nil || err != nil {
		t.Errorf(`"": %v, %v`, m, err)
	}
	for in, want := range map[string]string{
		"zz": "want six hex bytes", "02:00:00:00:00:00:01:02": "want six hex bytes",
		"01:00:5e:00:00:01": "a multicast address", "ff:ff:ff:ff:ff:ff": "a multicast address",
		"00:00:00:00:00:00": "all zeros",
	} {
		if _, err := HardwareAddr(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("HardwareAddr(%q): %v, want %q", in, err, want)
		}
	}
}

// TestStableMAC: the same key, namespace and name give the same MAC, a
// locally administered unicast one; changing any of them changes it.
func TestStableMAC(t *testing.T) {
	key := []byte("0123456789abcdef")
	m := StableMAC(key, "lab", "lab0")
	if m.String() != StableMAC(key, "lab", "lab0").String() {
		t.Error("two derivations differ")
	}
	if len(m) != 6 || m[0]&1 != 0 || m[0]&2 == 0 {
		t.Errorf("%s is not locally administered unicast", m)
	}
	for what, other := range map[string]string{
		"another name":      StableMAC(key, "lab", "lab1").String(),
		"another namespace": StableMAC(key, "", "lab0").String(),
		"another machine":   StableMAC([]byte("fedcba9876543210"), "lab", "lab0").String(),
	} {
		if other == m.String() {
			t.Errorf("%s: the same MAC %s", what, m)
		}
	}
	if _, err := HardwareAddr(m.String()); err != nil {
		t.Errorf("the derived MAC %s is refused as --tap-mac: %v", m, err)
	}
}
