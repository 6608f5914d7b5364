// Package vhost tests the tapfwd binary serving vhost-user VM ports: QEMU
// guests and a fake front-end on its sockets, libvirt, restarts that QEMU
// reconnects across, and the errors of a socket path that cannot work.
package vhost
