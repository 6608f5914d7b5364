package vnethdr

import (
	"encoding/binary"
	"errors"
)

// Len is sizeof(struct virtio_net_hdr), the legacy header without num_buffers
// (include/uapi/linux/virtio_net.h). It is the default TUNSETVNETHDRSZ of a TAP
// and what PACKET_VNET_HDR gives.
const Len = 10

// Flags (include/uapi/linux/virtio_net.h).
const (
	// FlagNeedsCsum: the L4 checksum is partial. The field at
	// CsumStart+CsumOffset holds the folded pseudo-header sum and the sum of
	// frame[CsumStart:] still has to be added (CHECKSUM_PARTIAL).
	FlagNeedsCsum = 1
	// FlagDataValid: the checksum was already verified (CHECKSUM_UNNECESSARY).
	FlagDataValid = 2
)

// GSO types (include/uapi/linux/virtio_net.h).
const (
	GSONone  = 0
	GSOTCPv4 = 1
	GSOUDP   = 3 // UFO: IP fragmentation offload, removed from Linux 4.14 and rejected here
	GSOTCPv6 = 4
	GSOUDPL4 = 5 // USO, UDP_SEGMENT
	GSOECN   = 0x80
)

// Sentinel errors, each naming one way a header or frame is refused. None of
// them is fatal: the frame is dropped, the queue goes on. The forwarder counts
// drops by the step that refused the frame, not by the error: bad_vnet_hdr
// for Decode, Fixup, InsertVLAN and CompleteChecksum, segmentation when
// segmenting a frame failed (CheckGSO's errors among them).
var (
	// ErrShort: a buffer is shorter than the header or the bounds it must hold
	// (Decode, InsertVLAN).
	ErrShort = errors.New("vnet header: buffer too short")
	// ErrCsumBounds: csum_start/csum_offset point outside the frame or the IP
	// packet, csum_start is before the smallest transport offset the kernel
	// takes (20 bytes into the frame) or too far into it for the kernel's
	// 16-bit skb->csum_start, or csum_offset is not the TCP/UDP check field
	// of a GSO frame.
	ErrCsumBounds = errors.New("vnet header: checksum start/offset out of bounds")
	// ErrGSOType: gso_type is unknown, legacy UFO, ECN on USO, or does not match
	// the IP version and L4 protocol of the frame.
	ErrGSOType = errors.New("vnet header: bad gso type")
	// ErrGSOSize: gso_size is 0, GSO_BY_FRAGS (0xffff), below TCP_MIN_MSS
	// (88) for TCP, or a USO frame would need more than UDP_MAX_SEGMENTS
	// segments.
	ErrGSOSize = errors.New("vnet header: bad gso size")
	// ErrMalformed: the headers do not parse, lengths disagree with the
	// frame, the frame is an IP fragment, or csum_start is not where the L4
	// header is.
	ErrMalformed = errors.New("malformed frame")
	// ErrNoHeadroom: InsertVLAN has fewer than 4 bytes before the frame.
	ErrNoHeadroom = errors.New("vnet header: no headroom for VLAN tag")
)

// Hdr is struct virtio_net_hdr. Multi-byte fields are little-endian on the wire:
// virtio 1.0 layout, which is also what the legacy header means on the
// little-endian hosts tapfwd runs on (drivers/net/tun.c: tun_is_little_endian).
type Hdr struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16 // length of all headers; a hint the kernel copies to the linear part
	GSOSize    uint16 // L4 payload bytes per segment (the MSS for TCP)
	CsumStart  uint16 // where checksumming starts, counted from the Ethernet header
	CsumOffset uint16 // where the checksum goes, counted from CsumStart
}

// Decode reads the first Len bytes of b into h. It does not validate: see Fixup.
func (h *Hdr) Decode(b []byte) error {
	if len(b) < Len {
		return ErrShort
	}
	h.Flags = b[0]
	h.GSOType = b[1]
	h.HdrLen = binary.LittleEndian.Uint16(b[2:])
	h.GSOSize = binary.LittleEndian.Uint16(b[4:])
	h.CsumStart = binary.LittleEndian.Uint16(b[6:])
	h.CsumOffset = binary.LittleEndian.Uint16(b[8:])
	return nil
}

// Encode writes h into the first Len bytes of b. The caller guarantees
// len(b) >= Len (it panics otherwise, like binary.LittleEndian.PutUint16):
// header room is fixed at buffer allocation, never taken from packet data.
func (h *Hdr) Encode(b []byte) {
	_ = b[Len-1]
	b[0] = h.Flags
	b[1] = h.GSOType
	binary.LittleEndian.PutUint16(b[2:], h.HdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.GSOSize)
	binary.LittleEndian.PutUint16(b[6:], h.CsumStart)
	binary.LittleEndian.PutUint16(b[8:], h.CsumOffset)
}

// IsGSO reports whether h describes a GSO super-frame. The ECN bit alone is
// not a GSO type (include/linux/virtio_net.h: virtio_net_hdr_to_skb rejects it).
func (h Hdr) IsGSO() bool { return h.GSOType&^GSOECN != GSONone }

// errNotIP is internal: parse found no IPv4 or IPv6 header.
var errNotIP = errors.New("not an IP frame")
