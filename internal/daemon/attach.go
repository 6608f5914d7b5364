package daemon

import (
	"fmt"

	"github.com/tapfwd/tapfwd/internal/tapport"
)

// MacvtapPort is a macvtap VM port and how to attach a guest to it: the
// JSON of tapfwd vm-port add and list.
type MacvtapPort struct {
	Name     string `json:"name"`
	Ifindex  int    `json:"ifindex"`
	MAC      string `json:"mac"`
	TAP      string `json:"tap"`
	TAPIndex int    `json:"tap_ifindex"`
	Netns    string `json:"netns,omitempty"`
	// Dev is the character device to open; empty when there is none.
	Dev     string `json:"dev"`
	DevNum  string `json:"dev_num"` // "major:minor"
	Up      bool   `json:"up"`
	QEMU    string `json:"qemu"`
	Libvirt string `json:"libvirt"`
	// LibvirtDirect lets libvirt make its own macvtap on the TAP instead.
	LibvirtDirect string `json:"libvirt_direct"`
}

// DescribeMacvtaps describes ports. Each port's QEMU line is numbered by
// its place among its TAP's ports in the list (netdev n0 on fd 3, n1 on
// fd 4, ...), so that the lines of two ports given to one guest do not
// clash.
func DescribeMacvtaps(ports []tapport.Port) []MacvtapPort {
	out := make([]MacvtapPort, 0, len(ports))
	place := map[string]int{}
	for _, p := range ports {
		key := p.Netns + "/" + p.TAP
		out = append(out, describeMacvtap(p, place[key]))
		place[key]++
	}
	return out
}

// DescribeAdded describes p, a port just added, numbered as
// DescribeMacvtaps numbers its TAP's ports.
func DescribeAdded(p tapport.Port) MacvtapPort {
	ports, err := tapport.List(p.Netns, p.TAP)
	for i, d := range DescribeMacvtaps(ports) {
		if err == nil && d.Name == p.Name {
			return describeMacvtap(p, i)
		}
	}
	return describeMacvtap(p, 0)
}

func describeMacvtap(p tapport.Port, i int) MacvtapPort {
	return MacvtapPort{
		Name: p.Name, Ifindex: p.Index, MAC: p.MAC.String(), TAP: p.TAP, TAPIndex: p.TAPIndex,
		Netns: p.Netns, Dev: p.Dev, DevNum: fmt.Sprintf("%d:%d", p.Major, p.Minor), Up: p.Up,
		QEMU: macvtapQEMU(p, i), Libvirt: macvtapLibvirt(p), LibvirtDirect: macvtapLibvirtDirect(p),
	}
}

// macvtapQEMU is a QEMU command line that attaches a virtio-net NIC with
// the port's MAC to the macvtap port, the guest's i-th: the shell opens
// the device as fd 3+i, QEMU takes it as netdev ni on that fd (vnet
// headers on, so guest offloads pass). Add the VM's own options (disk,
// memory, -accel kvm).
func macvtapQEMU(p tapport.Port, i int) string {
	dev := p.Dev
	if dev == "" {
		dev = "DEVICE"
	}
	return fmt.Sprintf("qemu-system-x86_64 -netdev tap,id=n%d,fd=%d -device virtio-net-pci,netdev=n%d,mac=%s %d<>%s", i, 3+i, i, p.MAC, 3+i, dev)
}

// macvtapLibvirt uses the port itself: libvirt (5.7 and later) opens an
// existing macvtap named by <target managed='no'>. libvirtd must see the
// port, so the TAP must live in libvirtd's namespace.
func macvtapLibvirt(p tapport.Port) string {
	return fmt.Sprintf(`<interface type='ethernet'>
  <mac address='%s'/>
  <target dev='%s' managed='no'/>
  <model type='virtio'/>
</interface>`, p.MAC, p.Name)
}

// macvtapLibvirtDirect has libvirt create and delete its own macvtap on
// the port's TAP (no port needed; give it a MAC no port uses).
func macvtapLibvirtDirect(p tapport.Port) string {
	return fmt.Sprintf(`<interface type='direct'>
  <source dev='%s' mode='bridge'/>
  <model type='virtio'/>
</interface>`, p.TAP)
}
