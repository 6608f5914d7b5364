// Package vnethdrtest builds the frames that the tests of the virtio-net
// header code and of the userspace offloads take apart, and holds the
// references they are checked against, written apart from the code under
// test: frames serialized by gopacket (Seg, the full description of a TCP
// segment or UDP datagram; Spec, the short one with the usual defaults;
// SuperFrame, a GSO frame as a packet socket hands it out), RFC 1071 done
// the obvious way (RefSum, Pseudo), a frame decoded by gopacket with every
// checksum verified (Decode), a GSO frame's TCP segments checked against
// it (CheckTCPSegments, which the socket and forwarding tests use too),
// the rules by which the kernel refuses a virtio_net_hdr written to a TAP
// or a packet socket (KernelRefusal), the checksum states a test frame
// arrives in (CsumMode), and the seeding and decoding of fuzz targets
// over a header and a frame (FuzzSeeds, AddHdr, FuzzHdr).
// It imports no package of ours, so that the header package's in-package
// tests can use it; Hdr mirrors the header type field for field, and the
// fuzz helpers take the header type as a type parameter.
package vnethdrtest
