// Package afpacket opens the AF_PACKET sockets tapfwd uses on the NIC side:
// one per queue in a fanout group, with virtio-net headers, qdisc bypass and
// batched recvmmsg/sendmmsg I/O, and reads the kernel's drop statistics.
package afpacket
