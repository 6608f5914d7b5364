package vhostuser

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Front-end requests (QEMU docs/interop/vhost-user.rst, "Front-end message
// types"; the numbers are hw/virtio/vhost-user.c: VhostUserRequest).
const (
	reqGetFeatures         = 1
	reqSetFeatures         = 2
	reqSetOwner            = 3
	reqResetOwner          = 4
	reqSetMemTable         = 5
	reqSetLogBase          = 6
	reqSetLogFd            = 7
	reqSetVringNum         = 8
	reqSetVringAddr        = 9
	reqSetVringBase        = 10
	reqGetVringBase        = 11
	reqSetVringKick        = 12
	reqSetVringCall        = 13
	reqSetVringErr         = 14
	reqGetProtocolFeatures = 15
	reqSetProtocolFeatures = 16
	reqGetQueueNum         = 17
	reqSetVringEnable      = 18
	reqNetSetMTU           = 20
)

var reqNames = map[uint32]string{
	reqGetFeatures: "GET_FEATURES", reqSetFeatures: "SET_FEATURES", reqSetOwner: "SET_OWNER",
	reqResetOwner: "RESET_OWNER", reqSetMemTable: "SET_MEM_TABLE", reqSetLogBase: "SET_LOG_BASE",
	reqSetLogFd: "SET_LOG_FD", reqSetVringNum: "SET_VRING_NUM", reqSetVringAddr: "SET_VRING_ADDR",
	reqSetVringBase: "SET_VRING_BASE", reqGetVringBase: "GET_VRING_BASE", reqSetVringKick: "SET_VRING_KICK",
	reqSetVringCall: "SET_VRING_CALL", reqSetVringErr: "SET_VRING_ERR",
	reqGetProtocolFeatures: "GET_PROTOCOL_FEATURES", reqSetProtocolFeatures: "SET_PROTOCOL_FEATURES",
	reqGetQueueNum: "GET_QUEUE_NUM", reqSetVringEnable: "SET_VRING_ENABLE", reqNetSetMTU: "NET_SET_MTU",
}

func reqName(r uint32) string {
	if s, ok := reqNames[r]; ok {
		return s
	}
	return fmt.Sprintf("request %d", r)
}

// Message header: request, flags and payload size, each a native-endian u32
// (hw/virtio/vhost-user.c: VhostUserHeader).
const (
	hdrSize        = 12
	flagVersion    = 0x1 // VHOST_USER_VERSION, in the two low bits
	flagsVersionMk = 0x3
	flagReply      = 0x4 // VHOST_USER_REPLY_MASK
	flagNeedReply  = 0x8 // VHOST_USER_NEED_REPLY_MASK
)

// Payload layouts.
const (
	sizeU64    = 8
	sizeState  = 8  // struct vhost_vring_state: index, num
	sizeAddr   = 40 // struct vhost_vring_addr: index, flags, desc, used, avail, log
	sizeRegion = 32 // VhostUserMemoryRegion: guest_phys_addr, memory_size, userspace_addr, mmap_offset
	maxRegions = 8  // VHOST_MEMORY_BASELINE_NREGIONS: without CONFIGURE_MEM_SLOTS
	// maxPayload is the largest payload accepted: a full SET_MEM_TABLE.
	maxPayload = 8 + maxRegions*sizeRegion
	// maxFds is the most file descriptors one message may carry.
	maxFds = maxRegions

	vringIdxMask  = 0xff    // VHOST_USER_VRING_IDX_MASK
	vringNoFdMask = 1 << 8  // VHOST_USER_VRING_NOFD_MASK
	maxRingIndex  = 0xff    // the highest ring SET_VRING_KICK/CALL/ERR can name
	maxQueueSize  = 1 << 15 // a split virtqueue has at most 32768 entries
	minMTU        = 68      // RFC 791's minimum, as drivers/net/virtio_net.c: MIN_MTU
	maxMTU        = 65535   // virtio_net_config.mtu is a u16
)

type vringState struct{ index, num uint32 }

type vringAddr struct {
	index, flags            uint32
	desc, used, avail, logA uint64
}

type regionDesc struct{ gpa, size, uaddr, mmapOffset uint64 }

// message is one request, parsed and checked as far as it can be without
// the port's state.
type message struct {
	req       uint32
	needReply bool
	u64       uint64
	state     vringState
	addr      vringAddr
	regions   [maxRegions]regionDesc
	nregions  int
	ring      int  // a ring's request: its index
	beyond    bool // ... beyond the port's rings: refused (its values unchecked)
	noFd      bool // SET_VRING_KICK/CALL/ERR: no fd, the invalid-FD flag
}

// parseHeader checks a request header: version 1, no reply flag, no unknown
// flag, a payload no larger than any request has.
func parseHeader(b []byte) (req, flags, size uint32, err error) {
	req = binary.NativeEndian.Uint32(b[0:])
	flags = binary.NativeEndian.Uint32(b[4:])
	size = binary.NativeEndian.Uint32(b[8:])
	switch {
	case flags&flagsVersionMk != flagVersion:
		return req, flags, size, protoErr(req, "version %d, want 1", flags&flagsVersionMk)
	case flags&flagReply != 0:
		return req, flags, size, protoErr(req, "a request with the reply flag set")
	case flags&^(flagsVersionMk|flagNeedReply) != 0:
		return req, flags, size, protoErr(req, "unknown header flags %#x", flags)
	case size > maxPayload:
		return req, flags, size, protoErr(req, "payload of %d bytes, at most %d", size, maxPayload)
	}
	return req, flags, size, nil
}

// parseMessage checks a request's payload size, file descriptor count and
// every field that can be checked without the port's state, and decodes it.
// A ring's request for a ring beyond the port's (it has rings of them, up
// to maxRingIndex) is marked beyond and its values are left unchecked: a
// front-end may set up rings it was not offered (DPDK's virtio-user sets up
// as many as it was told to use, without asking), and the port refuses
// those without sending it away.
func parseMessage(hdr []byte, payload []byte, nfds, rings int) (message, error) {
	var m message
	req, flags, size, err := parseHeader(hdr)
	if err != nil {
		return m, err
	}
	if int(size) != len(payload) {
		return m, protoErr(req, "header says %d payload bytes, got %d", size, len(payload))
	}
	m.req, m.needReply = req, flags&flagNeedReply != 0
	wantFds := 0
	switch req {
	case reqGetFeatures, reqGetProtocolFeatures, reqSetOwner, reqResetOwner, reqGetQueueNum:
		err = wantSize(req, payload, 0)
	case reqSetFeatures, reqSetProtocolFeatures, reqNetSetMTU:
		if err = wantSize(req, payload, sizeU64); err == nil {
			m.u64 = binary.NativeEndian.Uint64(payload)
		}
	case reqSetVringNum, reqSetVringBase, reqGetVringBase, reqSetVringEnable:
		err = parseState(&m, payload, rings)
	case reqSetVringAddr:
		err = parseAddr(&m, payload, rings)
	case reqSetVringKick, reqSetVringCall, reqSetVringErr:
		err = parseFile(&m, payload, rings)
		if !m.noFd {
			wantFds = 1
		}
	case reqSetMemTable:
		err = parseMemTable(&m, payload)
		wantFds = m.nregions
	default:
		return m, protoErr(req, "not supported")
	}
	if err != nil {
		return m, err
	}
	if nfds != wantFds {
		return m, protoErr(req, "%d file descriptors, want %d", nfds, wantFds)
	}
	return m, nil
}

func wantSize(req uint32, p []byte, n int) error {
	if len(p) != n {
		return protoErr(req, "payload of %d bytes, want %d", len(p), n)
	}
	return nil
}

// ringIndex sets m's ring, marking one beyond the port's rings; an index
// no ring request could name breaks the protocol.
func ringIndex(m *message, i uint32, rings int) error {
	if i > maxRingIndex {
		return protoErr(m.req, "ring %d, at most %d", i, maxRingIndex)
	}
	m.ring, m.beyond = int(i), int(i) >= rings
	return nil
}

func parseState(m *message, p []byte, rings int) error {
	if err := wantSize(m.req, p, sizeState); err != nil {
		return err
	}
	m.state = vringState{binary.NativeEndian.Uint32(p), binary.NativeEndian.Uint32(p[4:])}
	if err := ringIndex(m, m.state.index, rings); err != nil || m.beyond {
		return err
	}
	n := m.state.num
	switch m.req {
	case reqSetVringNum:
		if n == 0 || n > maxQueueSize || bits.OnesCount32(n) != 1 {
			return protoErr(m.req, "queue size %d is not a power of two up to %d", n, maxQueueSize)
		}
	case reqSetVringBase:
		// A split ring's index is 16 bits; packed rings (bit 15 the wrap
		// counter) are not offered.
		if n > 0xffff {
			return protoErr(m.req, "base %#x does not fit a split ring's 16-bit index", n)
		}
	case reqSetVringEnable:
		if n > 1 {
			return protoErr(m.req, "enable value %d, want 0 or 1", n)
		}
	}
	return nil
}

func parseAddr(m *message, p []byte, rings int) error {
	if err := wantSize(m.req, p, sizeAddr); err != nil {
		return err
	}
	e := binary.NativeEndian
	a := vringAddr{
		index: e.Uint32(p), flags: e.Uint32(p[4:]),
		desc: e.Uint64(p[8:]), used: e.Uint64(p[16:]), avail: e.Uint64(p[24:]), logA: e.Uint64(p[32:]),
	}
	m.addr = a
	if err := ringIndex(m, a.index, rings); err != nil || m.beyond {
		return err
	}
	switch {
	case a.flags != 0:
		// VHOST_VRING_F_LOG needs VHOST_F_LOG_ALL, which is not offered.
		return protoErr(m.req, "ring flags %#x: dirty logging is not offered", a.flags)
	case a.desc%16 != 0 || a.avail%2 != 0 || a.used%4 != 0:
		// Virtio 1.x 2.7: descriptor table 16, available ring 2, used ring 4.
		return protoErr(m.req, "misaligned ring: desc %#x avail %#x used %#x", a.desc, a.avail, a.used)
	}
	return nil
}

func parseFile(m *message, p []byte, rings int) error {
	if err := wantSize(m.req, p, sizeU64); err != nil {
		return err
	}
	v := binary.NativeEndian.Uint64(p)
	if v&^(vringIdxMask|vringNoFdMask) != 0 {
		return protoErr(m.req, "unknown bits in %#x", v)
	}
	m.noFd = v&vringNoFdMask != 0
	return ringIndex(m, uint32(v&vringIdxMask), rings)
}

func parseMemTable(m *message, p []byte) error {
	if len(p) < 8 {
		return protoErr(m.req, "payload of %d bytes, too short for the region count", len(p))
	}
	n := binary.NativeEndian.Uint32(p)
	if n == 0 || n > maxRegions {
		return protoErr(m.req, "%d regions, want 1 to %d", n, maxRegions)
	}
	if err := wantSize(m.req, p, 8+int(n)*sizeRegion); err != nil {
		return err
	}
	m.nregions = int(n)
	for i := range m.nregions {
		b := p[8+i*sizeRegion:]
		r := regionDesc{
			gpa: binary.NativeEndian.Uint64(b), size: binary.NativeEndian.Uint64(b[8:]),
			uaddr: binary.NativeEndian.Uint64(b[16:]), mmapOffset: binary.NativeEndian.Uint64(b[24:]),
		}
		if r.size == 0 || r.gpa+r.size < r.gpa || r.uaddr+r.size < r.uaddr || r.mmapOffset+r.size < r.mmapOffset {
			return protoErr(m.req, "region %d: empty or wrapping around (gpa %#x uaddr %#x offset %#x size %#x)",
				i, r.gpa, r.uaddr, r.mmapOffset, r.size)
		}
		for j := range i {
			o := m.regions[j]
			if overlap(r.gpa, r.size, o.gpa, o.size) || overlap(r.uaddr, r.size, o.uaddr, o.size) {
				return protoErr(m.req, "regions %d and %d overlap", j, i)
			}
		}
		m.regions[i] = r
	}
	return nil
}

// overlap reports whether [a, a+n) and [b, b+m) share a byte; neither wraps.
func overlap(a, n, b, m uint64) bool { return a < b+m && b < a+n }

// putReply encodes a reply header and payload into b, which has room for
// hdrSize+len(payload) bytes, and returns the encoded message.
func putReply(b []byte, req uint32, payload []byte) []byte {
	binary.NativeEndian.PutUint32(b[0:], req)
	binary.NativeEndian.PutUint32(b[4:], flagVersion|flagReply)
	binary.NativeEndian.PutUint32(b[8:], uint32(len(payload)))
	n := copy(b[hdrSize:], payload)
	return b[:hdrSize+n]
}
