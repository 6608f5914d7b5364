package main

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

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afpacket"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// vhostPort is one vhost-user VM port (--vhost-user): its socket, the MAC
// its guest must use, and the packet socket of its own that puts the
// guest's frames on the NIC.
type vhostPort struct {
	Name string // the socket's name without ".sock" and namespace: TAP-I
	Path string
	MAC  net.HardwareAddr
	port *vhostuser.Port
	nic  *afpacket.Socket
}

// vhostPath is port i's socket in dir: TAP-I.sock, NS:TAP-I.sock for a
// TAP in namespace NS (as /dev/tapfwd names macvtap nodes), so that
// instances on different TAPs share a directory.
func vhostPath(dir, ns, tapName string, i int) string {
	name := vhostName(tapName, i) + ".sock"
	if ns != "" {
		name = ns + ":" + name
	}
	return filepath.Join(dir, name)
}

func vhostName(tapName string, i int) string { return tapName + "-" + strconv.Itoa(i) }

// removeVhostSockets removes the sockets of the TAP's ports in dir (what
// run --persist kept) and says how many there were; anything at those
// paths that is not a socket stays. No tapfwd may be using them: down
// removes them only after the TAP, which a running tapfwd holds.
func removeVhostSockets(dir, ns, tapName string) (int, error) {
	if dir == "" {
		return 0, nil
	}
	n := 0
	for i := 0; i < maxVMPorts; i++ {
		p := vhostPath(dir, ns, tapName, i)
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&fs.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}

// vhostMAC is port i's guest MAC: locally administered unicast, the same
// for the same TAP (name and namespace) and port on every run, so a guest
// that reconnects after a restart keeps its address on the wire.
func vhostMAC(ns, tapName string, i int) net.HardwareAddr {
	h := sha256.Sum256([]byte("tapfwd vhost-user\x00" + ns + "\x00" + tapName))
	return net.HardwareAddr{h[0]&0xfc | 0x02, h[1], h[2], h[3], h[4], byte(i)}
}

// prepareVhost makes the --vhost-user directory if it is missing and checks
// every socket path before anything is set up, so that a path that cannot
// work fails the start with nothing made.
func (d *daemon) prepareVhost() error {
	dir := d.c.VhostDir
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return explainVhost(fmt.Errorf("making the directory: %w", err))
		}
		// Not the umask's: the QEMU user must reach the sockets.
		if err := os.Chmod(dir, 0o755); err != nil {
			return explainVhost(err)
		}
		d.log.Info("made the vhost-user directory", "dir", dir)
	case err != nil:
		return explainVhost(err)
	case !fi.IsDir():
		return explainVhost(fmt.Errorf("%s is not a directory", dir))
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return explainVhost(fmt.Errorf("%s: %w", dir, os.NewSyscallError("access", err)))
	}
	for i := 0; i < d.c.VMPorts; i++ {
		if err := vhostuser.CheckPath(vhostPath(dir, d.c.TAP.Netns, d.c.TAP.Name, i)); err != nil {
			return explainVhost(err)
		}
	}
	return nil
}

// addVhostPorts listens on the --vm-ports sockets (before the privilege
// drop, which leaves accepting and mapping guest memory to the user).
// They are removed at exit, by a janitor after --user, unless --persist
// keeps them for the next run, which takes them over.
func (d *daemon) addVhostPorts() error {
	keep := d.dev.Persistent()
	c := vhostuser.Config{Mode: 0o600, KeepSocket: keep}
	if d.owner != nil {
		c.Mode, c.Owner = 0o660, &vhostuser.Owner{UID: d.owner.UID, GID: d.owner.GID}
	}
	var files []vhostuser.SocketFile
	for i := 0; i < d.c.VMPorts; i++ {
		p := &vhostPort{Name: vhostName(d.dev.Name(), i), Path: vhostPath(d.c.VhostDir, d.dev.Netns(), d.dev.Name(), i),
			MAC: vhostMAC(d.dev.Netns(), d.dev.Name(), i)}
		c.Path, c.Logger = p.Path, d.log.With("vm_port", p.Name)
		vp, err := vhostuser.Listen(c)
		if err != nil {
			return explainVhost(err)
		}
		p.port = vp
		d.vhost = append(d.vhost, p)
		files = append(files, vp.SocketFile())
		d.closing("closing vhost-user port "+p.Name, vp.Close)
	}
	switch {
	case keep:
		d.onClose(func() {
			d.log.Info("the vhost-user sockets stay with the persistent TAP", "dir", d.c.VhostDir, "vm_ports", len(files))
		})
	case d.cred != nil:
		// After the drop the directory is no longer writable to us.
		w, err := startJanitor(janitorJob{Sockets: files})
		if err != nil {
			return err
		}
		d.onClose(func() { w.Close() })
	}
	d.logVhostPorts()
	return nil
}

// logVhostPorts logs each port with the QEMU arguments and the libvirt
// element that attach a guest to it.
func (d *daemon) logVhostPorts() {
	for i, p := range d.vhost {
		d.log.Info("vm-port", "name", p.Name, "type", "vhost-user", "socket", p.Path, "mac", p.MAC.String(),
			"qemu", vhostQEMULine(p, i), "libvirt", oneLine(vhostLibvirtXML(p)))
	}
	d.log.Info("vhost-user guests need shared memory", "qemu", vhostQEMUMemory, "libvirt", oneLine(vhostLibvirtMemory))
}

// openGuestSenders opens each vhost-user port's packet socket of its own on
// the NIC: what its guest sends leaves through it (the queue workers'
// sockets are theirs).
func (d *daemon) openGuestSenders() error {
	for _, p := range d.vhost {
		s, err := afpacket.OpenSender(afpacket.Config{Ifname: d.c.NIC, Batch: d.c.Batch})
		if err != nil {
			return err
		}
		p.nic = s
		d.closing("closing the packet socket of "+p.Name, s.Close)
	}
	return nil
}

// guestPorts are the vhost-user ports as the forwarder takes them, their
// workers pinned to the CPUs after the queues' (wrapping, as theirs do).
func (d *daemon) guestPorts() ([]forward.GuestPort, error) {
	if len(d.vhost) == 0 {
		return nil, nil
	}
	q := d.c.TAP.Queues
	cpus, err := workerCPUs(d.c.CPUs, q+len(d.vhost))
	if err != nil {
		return nil, fmt.Errorf("--cpus: %w", err)
	}
	out := make([]forward.GuestPort, len(d.vhost))
	for i, p := range d.vhost {
		out[i] = forward.GuestPort{Guest: p.port, MAC: p.MAC, NIC: p.nic, CPU: cpus[q+i]}
	}
	return out, nil
}

// The guest's memory must be shared with tapfwd: a memfd backend, and
// -m as large as its size.
const (
	vhostQEMUMemory    = "-m 1G -object memory-backend-memfd,id=mem,size=1G,share=on -machine memory-backend=mem"
	vhostLibvirtMemory = `<memoryBacking>
  <source type='memfd'/>
  <access mode='shared'/>
</memoryBacking>`
)

// vhostQEMUArgs attach a virtio-net NIC with the port's MAC to the port
// (ids vhuI): QEMU connects to the socket and, with reconnect=1, comes
// back within a second when tapfwd restarts. vectors=0: under TCG QEMU
// 7.2 crashes when a vhost-user NIC with MSI-X starts (see
// vhostuser/qemu_test.go: the crash is on a path only taken without KVM's
// irqfds, so KVM hosts may drop it).
func vhostQEMUArgs(p *vhostPort, i int) string {
	id := "vhu" + strconv.Itoa(i)
	return fmt.Sprintf("-chardev socket,id=%s,path=%s,reconnect=1 -netdev vhost-user,id=%s,chardev=%s -device virtio-net-pci,netdev=%s,mac=%s,vectors=0",
		id, qemuEscape(p.Path), id, id, id, p.MAC)
}

// vhostQEMULine is a QEMU command line for a VM on port i alone: its
// memory shared, the port attached. Add the VM's own options.
func vhostQEMULine(p *vhostPort, i int) string {
	return "qemu-system-x86_64 " + vhostQEMUMemory + " " + vhostQEMUArgs(p, i)
}

// qemuEscape doubles the commas of a QEMU option value.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// vhostLibvirtXML is the domain's <interface> for the port: libvirt's QEMU
// connects as a client and reconnects after a second.
func vhostLibvirtXML(p *vhostPort) string {
	return fmt.Sprintf(`<interface type='vhostuser'>
  <mac address='%s'/>
  <source type='unix' path='%s' mode='client'>
    <reconnect enabled='yes' timeout='1'/>
  </source>
  <model type='virtio'/>
</interface>`, p.MAC, xmlEscape(p.Path))
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&apos;", `"`, "&quot;").Replace(s)
}

// oneLine joins an indented XML snippet into one line, for a log line.
func oneLine(s string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(s, "\n") {
		b.WriteString(strings.TrimSpace(l))
	}
	return b.String()
}
