// Package offload does in userspace what the kernel's segmentation and
// receive offloads do, on Ethernet frames described by a virtio_net_hdr,
// so that a TAP gets the frames it can take whatever the other side sent:
//
//   - Segment splits a GSO super-frame (TCPv4, TCPv6, UDP_L4) into frames
//     of at most gso_size bytes of payload with finished checksums, as the
//     kernel's GSO does before a device without offloads
//     (net/core/gso.c: skb_gso_segment, net/ipv4/tcp_offload.c:
//     tcp_gso_segment, net/ipv4/udp_offload.c: __udp_gso_segment).
//   - CheckTunnel and SegmentTunnel do the same for the super-frames the
//     kernel's GRO makes of TCP or UDP inside a tunnel (VXLAN and other
//     UDP tunnels, GRE, IP-in-IP), which the legacy vnet header cannot
//     describe (net/ipv4/udp_offload.c: skb_udp_tunnel_segment,
//     gre_gso_segment).
//   - GRO (NewGRO, GRO.Coalesce, GRO.Open, Frame) merges the TCP segments
//     and UDP datagrams of a flow in a batch into GSO super-frames, by the
//     rules of the kernel's GRO (net/core/gro.c: dev_gro_receive,
//     net/ipv4/tcp_offload.c: tcp_gro_receive, net/ipv4/udp_offload.c:
//     udp_gro_receive_segment), so that a TAP with a vnet header takes
//     one write for up to 64 KiB.
//
// A super-frame GRO makes is one the header fix-up accepts unchanged and
// Segment gives back byte for byte. Segment, SegmentTunnel and CheckTunnel
// return the header validation's errors for a header they refuse, and
// their own for what only they find (ErrTooManySegments, ErrSegmentTooBig,
// ErrNotTunnel). Everything here works on byte slices, in place or into
// buffers the caller gives: no I/O, and no allocation on the hot path.
package offload
