package main

import (
	"strings"
	"testing"
)

// The sockets' names, the guests' MACs and the lines to attach them need
// no root: names per TAP and namespace, MACs stable and locally
// administered unicast, paths escaped for QEMU and XML.
func TestVhostNames(t *testing.T) {
	if p := vhostPath("/run/v", "", "lab0", 1); p != "/run/v/lab0-1.sock" {
		t.Errorf("vhostPath: %s", p)
	}
	if p := vhostPath("/run/v", "lab", "lab0", 0); p != "/run/v/lab:lab0-0.sock" {
		t.Errorf("vhostPath in a namespace: %s", p)
	}
	seen := map[string]bool{}
	for _, ns := range []string{"", "lab"} {
		for _, tap := range []string{"lab0", "lab1"} {
			for i := 0; i < 64; i++ {
				m := vhostMAC(ns, tap, i)
				if m[0]&1 != 0 || m[0]&2 == 0 || seen[m.String()] || m.String() != vhostMAC(ns, tap, i).String() {
					t.Fatalf("vhostMAC(%q, %q, %d) = %s: not a stable, unique, locally administered unicast address", ns, tap, i, m)
				}
				seen[m.String()] = true
			}
		}
	}
	p := &vhostPort{Name: "lab0-0", Path: "/run/a,b/it's.sock", MAC: vhostMAC("", "lab0", 0)}
	q := vhostQEMULine(p, 3)
	for _, want := range []string{"-m 1G -object memory-backend-memfd,id=mem,size=1G,share=on -machine memory-backend=mem",
		"-chardev socket,id=vhu3,path=/run/a,,b/it's.sock,reconnect=1", "-netdev vhost-user,id=vhu3,chardev=vhu3",
		"-device virtio-net-pci,netdev=vhu3,mac=" + p.MAC.String() + ",vectors=0"} {
		if !strings.Contains(q, want) {
			t.Errorf("QEMU line %q lacks %q", q, want)
		}
	}
	x := vhostLibvirtXML(p)
	if !strings.Contains(x, "path='/run/a,b/it&apos;s.sock' mode='client'") || !strings.Contains(x, "<mac address='"+p.MAC.String()+"'/>") {
		t.Errorf("libvirt XML:\n%s", x)
	}
	if l := oneLine(vhostLibvirtMemory); l != "<memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>" {
		t.Errorf("oneLine: %s", l)
	}
}
