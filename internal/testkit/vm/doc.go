// Package vm runs the end-to-end tests' virtual machines: the test guest
// (scripts/vmguest.sh) under QEMU on a macvtap or vhost-user port, and a
// private libvirtd that boots it from a domain's XML.
package vm
