// Package afxdp is the AF_XDP backend for the NIC side: per-queue XDP sockets
// with their UMEM and rings, the XDP program and XSKMAP that feed them, and
// batch Read and Write calls in the shape a forwarding worker expects.
package afxdp
