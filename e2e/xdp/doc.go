// Package xdp tests the tapfwd binary with AF_XDP sockets on the NIC
// (--nic-backend xdp) on a test bed, with the kernel's XDP on a veth.
package xdp
