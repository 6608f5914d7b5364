// Package vhostuser serves one vhost-user virtio-net port to a front-end such as QEMU: the
// control protocol over a unix socket, the guest's memory table and its split virtqueues.
package vhostuser
