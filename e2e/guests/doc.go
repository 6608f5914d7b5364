// Package guests tests the tapfwd binary with QEMU guests on its VM ports
// (macvtap and vhost-user), under libvirt, beside the lab host's own port
// with DHCP, and across restarts that keep them running.
package guests
