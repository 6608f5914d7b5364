package vhostuser_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/vhostuser"
)

// TestNames: socket names per TAP and namespace, MACs stable, unique and
// locally administered unicast, paths escaped for QEMU and XML.
func TestNames(t *testing.T) {
	if p := vhostuser.SocketPath("/run/v", "", "lab0", 1); p != "/run/v/lab0-1.sock" {
		t.Errorf("SocketPath: %s", p)
	}
	if p := vhostuser.SocketPath("/run/v", "lab", "lab0", 0); p != "/run/v/lab:lab0-0.sock" {
		t.Errorf("SocketPath in a namespace: %s", p)
	}
	seen := map[string]bool{}
	for _, ns := range []string{"", "lab"} {
		for _, tap := range []string{"lab0", "lab1"} {
			for i := range 64 {
				m := vhostuser.GuestMAC(ns, tap, i)
				if m[0]&1 != 0 || m[0]&2 == 0 || seen[m.String()] || m.String() != vhostuser.GuestMAC(ns, tap, i).String() {
					t.Fatalf("vhostuser.GuestMAC(%q, %q, %d) = %s: not a stable, unique, locally administered unicast address", ns, tap, i, m)
				}
				seen[m.String()] = true
			}
		}
	}
	path, mac := "/run/a,b/it's.sock", vhostuser.GuestMAC("", "lab0", 0)
	q := vhostuser.QEMULine(path, mac, 3, 1)
	for _, want := range []string{"-m 1G -object memory-backend-memfd,id=mem,size=1G,share=on -machine memory-backend=mem",
		"-chardev socket,id=vhu3,path=/run/a,,b/it's.sock,reconnect=1", "-netdev vhost-user,id=vhu3,chardev=vhu3",
		"-device virtio-net-pci,netdev=vhu3,mac=" + mac.String() + ",vectors=0"} {
		if !strings.Contains(q, want) {
			t.Errorf("QEMU line %q lacks %q", q, want)
		}
	}
	if strings.Contains(q, "queues=") || strings.Contains(q, "mq=") {
		t.Errorf("QEMU line of one queue pair %q has multiqueue options", q)
	}
	q = vhostuser.QEMULine(path, mac, 3, 4)
	for _, want := range []string{"-netdev vhost-user,id=vhu3,chardev=vhu3,queues=4 ",
		"-device virtio-net-pci,netdev=vhu3,mac=" + mac.String() + ",mq=on,vectors=10"} {
		if !strings.Contains(q, want) {
			t.Errorf("QEMU line of 4 queue pairs %q lacks %q", q, want)
		}
	}
	x := vhostuser.LibvirtXML(path, mac, 1)
	if !strings.Contains(x, "path='/run/a,b/it&apos;s.sock' mode='client'") || !strings.Contains(x, "<mac address='"+mac.String()+"'/>") || strings.Contains(x, "driver") {
		t.Errorf("libvirt XML:\n%s", x)
	}
	if x := vhostuser.LibvirtXML(path, mac, 4); !strings.Contains(x, "<model type='virtio'/>\n  <driver queues='4'/>\n</interface>") {
		t.Errorf("libvirt XML of 4 queue pairs:\n%s", x)
	}
}

// TestRemoveSockets removes the TAP's sockets and nothing else: not
// another TAP's, not a file at a socket's path.
func TestRemoveSockets(t *testing.T) {
	dir := t.TempDir()
	listen := func(p string) {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close()
	}
	listen(vhostuser.SocketPath(dir, "lab", "lab0", 0))
	listen(vhostuser.SocketPath(dir, "lab", "lab0", 2))
	listen(vhostuser.SocketPath(dir, "", "lab0", 1)) // the same TAP name outside the namespace
	os.WriteFile(vhostuser.SocketPath(dir, "lab", "lab0", 1), nil, 0o644)
	n, err := vhostuser.RemoveSockets(dir, "lab", "lab0", 64)
	if err != nil || n != 2 {
		t.Fatalf("RemoveSockets: %d, %v; want 2", n, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 2 {
		t.Errorf("left: %v, want the file and the other TAP's socket", left)
	}
	if n, err := vhostuser.RemoveSockets(dir, "lab", "lab0", 64); n != 0 || err != nil {
		t.Errorf("again: %d, %v", n, err)
	}
}
