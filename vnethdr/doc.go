// Package vnethdr encodes, validates and fixes up the virtio_net_hdr that TAPs and packet
// sockets exchange, and completes checksums and segments GSO frames in userspace.
package vnethdr
