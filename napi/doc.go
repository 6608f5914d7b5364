// Package napi controls NIC NAPI instances through the kernel's netdev
// generic netlink family (napi-get, napi-set, queue-get), and pins and
// prioritises their polling kthreads; Changes puts back what it changed.
package napi
