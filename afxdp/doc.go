// Package afxdp is the AF_XDP backend for the NIC side: per-queue XDP sockets
// with their UMEM and rings, the XDP program and XSKMAP that feed them, and
// the batch I/O shape forward's NIC interface expects.
package afxdp
