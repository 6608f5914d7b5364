// Package macvtap tests the tapfwd binary with QEMU guests on its macvtap
// VM ports: made by tapfwd vm-port and --vm-ports, booted by QEMU and by
// libvirt, and kept running across restarts of a persistent TAP.
package macvtap
