package afpacket

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// tag is the 802.1Q/802.1ad tag the kernel stripped from one received
// frame (PACKET_AUXDATA).
type tag struct {
	ok        bool
	tpid, tci uint16
}

// sizeofAuxdata is sizeof(struct tpacket_auxdata).
const sizeofAuxdata = int(unsafe.Sizeof(unix.TpacketAuxdata{}))

var auxSpace = unix.CmsgSpace(sizeofAuxdata)

// mmsg holds the msghdr/iovec arrays of one direction, allocated once.
type mmsg struct {
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
	ctrl []byte
}

func (m *mmsg) init(n int, rx bool) {
	m.hdrs = make([]unix.Mmsghdr, n)
	m.iovs = make([]unix.Iovec, n)
	if rx {
		m.ctrl = make([]byte, n*auxSpace)
	}
	for i := range m.hdrs {
		m.hdrs[i].Hdr.Iov = &m.iovs[i]
		m.hdrs[i].Hdr.Iovlen = 1
	}
}

// point aims iovec i at b.
func (m *mmsg) point(i int, b []byte) {
	m.iovs[i].Base = &b[0]
	m.iovs[i].SetLen(len(b))
}

// Read receives up to len(bufs) frames with one recvmmsg(MSG_DONTWAIT):
// frame i, its vnet header in front, lands in bufs[i][offset:] and sizes[i]
// is its length with the header. A frame that did not fit its buffer has
// sizes[i] larger than len(bufs[i])-offset (recvmmsg with MSG_TRUNC reports
// the whole length). VLAN(i) gives the tag the kernel stripped from frame i.
//
// With nothing queued Read returns unix.EAGAIN. ENETDOWN means the NIC went
// down and ENODEV that it is gone; any other error consumed one frame
// (EINVAL: a GSO type the vnet header cannot express,
// net/packet/af_packet.c: packet_rcv_vnet).
func (s *Socket) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := min(len(bufs), len(sizes), len(s.rx.hdrs))
	if n == 0 {
		return 0, nil
	}
	for i := 0; i < n; i++ {
		s.rx.point(i, bufs[i][offset:])
		h := &s.rx.hdrs[i].Hdr
		h.Control = &s.rx.ctrl[i*auxSpace]
		h.SetControllen(auxSpace)
		h.Flags = 0
	}
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.rx.hdrs[0])),
		uintptr(n), unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
	if e != 0 {
		if e == unix.ENETDOWN && !s.exists() {
			return 0, unix.ENODEV
		}
		return 0, e
	}
	got := int(r)
	for i := 0; i < got; i++ {
		mh := &s.rx.hdrs[i]
		room := len(bufs[i]) - offset
		sizes[i] = int(mh.Len)
		truncated := parseAux(s.rx.ctrl[i*auxSpace:i*auxSpace+int(mh.Hdr.Controllen)], &s.tags[i])
		if (truncated || mh.Hdr.Flags&unix.MSG_TRUNC != 0) && sizes[i] <= room {
			sizes[i] = room + 1
		}
	}
	return got, nil
}

// VLAN returns the 802.1Q/802.1ad tag the kernel stripped from frame i of
// the last Read (the tag is not in the frame a packet socket sees).
func (s *Socket) VLAN(i int) (tpid, tci uint16, ok bool) {
	t := &s.tags[i]
	return t.tpid, t.tci, t.ok
}

// parseAux reads the VLAN tag from a PACKET_AUXDATA control message
// without allocating, and reports whether the frame was cut short.
func parseAux(c []byte, t *tag) (truncated bool) {
	*t = tag{}
	const hl = unix.SizeofCmsghdr
	for len(c) >= hl {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(h.Len)
		if l < hl || l > len(c) {
			return false
		}
		if h.Level == unix.SOL_PACKET && h.Type == unix.PACKET_AUXDATA && l >= hl+sizeofAuxdata {
			a := (*unix.TpacketAuxdata)(unsafe.Pointer(&c[hl]))
			if a.Status&unix.TP_STATUS_VLAN_VALID != 0 {
				t.ok, t.tci, t.tpid = true, a.Vlan_tci, unix.ETH_P_8021Q
				if a.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
					t.tpid = a.Vlan_tpid
				}
			}
			return a.Snaplen < a.Len
		}
		sp := unix.CmsgSpace(l - hl)
		if sp > len(c) {
			return false
		}
		c = c[sp:]
	}
	return false
}

// Write transmits bufs[i][offset:] (each a vnet header followed by an
// Ethernet frame) with one sendmmsg(MSG_DONTWAIT) and returns how many the
// kernel took. The error is that of bufs[0] when none was taken: EAGAIN or
// ENOBUFS (queue full; the qdisc is bypassed, so nothing queues), ENETDOWN
// (the NIC is down) or ENXIO (it is gone), EINVAL or EMSGSIZE (the kernel
// refused that frame). sendmmsg reports only a count after the first frame,
// so a short count comes with a nil error: writing again from bufs[n]
// reports why that one failed.
func (s *Socket) Write(bufs [][]byte, offset int) (int, error) {
	n := min(len(bufs), len(s.tx.hdrs))
	if n == 0 {
		return 0, nil
	}
	for i := 0; i < n; i++ {
		s.tx.point(i, bufs[i][offset:])
	}
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.tx.hdrs[0])),
		uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
