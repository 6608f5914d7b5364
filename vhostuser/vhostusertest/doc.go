// Package vhostusertest plays a vhost-user front-end and its guest for tests: it negotiates
// like QEMU 7.2 over a unix socket, shares memfd memory and drives virtio-net split rings.
package vhostusertest
