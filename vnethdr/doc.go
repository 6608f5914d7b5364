// Package vnethdr is the virtio_net_hdr that TAPs and packet sockets
// exchange in front of each frame: it decodes and encodes the header,
// validates and fixes up one from an untrusted writer against its frame
// (Fixup; CheckGSO, its read-only part for GSO headers; Partialize, the
// CHECKSUM_PARTIAL form of a GSO frame; TCPMinMSS, the smallest TCP
// gso_size taken), completes partial checksums (CompleteChecksum),
// recovers the partial checksum of a frame that lost its header
// (RecoverPartial), and puts a stripped VLAN tag back into the frame
// (InsertVLAN).
//
// For code that works on the frames behind such headers it exports the
// header parser these use (Layout, Parse, ParseIP, L3Offset) and the
// Internet checksum arithmetic (Sum, Fold, Checksum, Layout.AddrSum).
// Everything here is pure functions on byte slices: no I/O.
package vnethdr
