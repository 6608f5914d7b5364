// Package naive is the bench's naive baseline: the forwarder a user writes
// in an afternoon. A songgao/water TAP (no vnet header, one queue) and one
// AF_PACKET socket with PACKET_VNET_HDR, one read or write syscall per
// frame, and just enough offload handling (the project's virtio-net header code) to carry TCP
// with the NIC's offloads on.
package naive
