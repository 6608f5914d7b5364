package vhostuser

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// How tapfwd names the vhost-user ports of a TAP: port i of TAP T in
// namespace NS is the socket NS:T-I.sock (T-I.sock outside a namespace, as
// /dev/tapfwd names macvtap nodes), so that instances on different TAPs
// share a directory, and its guest's MAC is derived from NS, T and i, so
// that a guest that reconnects after a restart keeps its address.

// PortName is port i's name: TAP-I.
func PortName(tapName string, i int) string { return tapName + "-" + strconv.Itoa(i) }

// SocketPath is port i's socket in dir.
func SocketPath(dir, ns, tapName string, i int) string {
	name := PortName(tapName, i) + ".sock"
	if ns != "" {
		name = ns + ":" + name
	}
	return filepath.Join(dir, name)
}

// GuestMAC is port i's guest MAC: locally administered unicast, the same
// for the same TAP (name and namespace) and port on every run.
func GuestMAC(ns, tapName string, i int) net.HardwareAddr {
	h := sha256.Sum256([]byte("tapfwd vhost-user\x00" + ns + "\x00" + tapName))
	return net.HardwareAddr{h[0]&0xfc | 0x02, h[1], h[2], h[3], h[4], byte(i)}
}

// RemoveSockets removes the sockets of the TAP's ports 0 to n-1 in dir
// (what a persistent TAP kept) and says how many there were; anything at
// those paths that is not a socket stays. No port may be listening on
// them.
func RemoveSockets(dir, ns, tapName string, n int) (int, error) {
	removed := 0
	for i := range n {
		p := SocketPath(dir, ns, tapName, i)
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&fs.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("remove a vhost-user socket: %w", err)
		}
		removed++
	}
	return removed, nil
}

// A vhost-user guest's memory must be shared with the back-end: a memfd
// backend, and -m as large as its size.
const (
	QEMUMemory    = "-m 1G -object memory-backend-memfd,id=mem,size=1G,share=on -machine memory-backend=mem"
	LibvirtMemory = `<memoryBacking>
  <source type='memfd'/>
  <access mode='shared'/>
</memoryBacking>`
)

// QEMULine is a QEMU command line for a VM on the socket at path alone:
// its memory shared, a virtio-net NIC with the guest's MAC attached (ids
// vhuI) and, with more than one queue pair, queues=N on the netdev and
// mq=on on the NIC. QEMU connects to the socket and, with reconnect=1,
// comes back within a second when the back-end restarts. The NIC has
// vectors=0 (INTx serves every ring), since under TCG QEMU 7.2 crashes
// when a vhost-user NIC with MSI-X starts (see qemu_test.go: the crash is
// on a path only taken without KVM's irqfds, so a KVM host may give
// vectors=2N+2 instead, an interrupt per ring). Add the VM's own options.
func QEMULine(path string, mac net.HardwareAddr, i, queues int) string {
	id := "vhu" + strconv.Itoa(i)
	netdev, nic := "", ",vectors=0"
	if queues > 1 {
		netdev, nic = ",queues="+strconv.Itoa(queues), ",mq=on,vectors=0"
	}
	return fmt.Sprintf("qemu-system-x86_64 %s -chardev socket,id=%s,path=%s,reconnect=1 -netdev vhost-user,id=%s,chardev=%s%s -device virtio-net-pci,netdev=%s,mac=%s%s",
		QEMUMemory, id, strings.ReplaceAll(path, ",", ",,"), id, id, netdev, id, mac, nic)
}

// LibvirtXML is a domain's <interface> for the socket at path, with
// queues queue pairs: libvirt's QEMU connects as a client and reconnects
// after a second. The domain needs LibvirtMemory too.
func LibvirtXML(path string, mac net.HardwareAddr, queues int) string {
	driver := ""
	if queues > 1 {
		driver = fmt.Sprintf("\n  <driver queues='%d'/>", queues)
	}
	return fmt.Sprintf(`<interface type='vhostuser'>
  <mac address='%s'/>
  <source type='unix' path='%s' mode='client'>
    <reconnect enabled='yes' timeout='1'/>
  </source>
  <model type='virtio'/>%s
</interface>`, mac, xmlEscape(path), driver)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&apos;", `"`, "&quot;").Replace(s)
}
