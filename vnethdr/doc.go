// Package vnethdr encodes, validates and fixes up the virtio_net_hdr that TAPs and packet
// sockets exchange, completes checksums and segments GSO frames in userspace, and coalesces
// TCP segments and UDP datagrams into GSO frames (GRO).
package vnethdr
